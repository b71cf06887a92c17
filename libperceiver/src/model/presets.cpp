#include "model/presets.h"

#include <filesystem>
#include <vector>

#include "perceiver/error.h"

namespace perceiver {
namespace fs = std::filesystem;

ModelConfig resolve_model_config(const std::string& model, const std::string& config_file_path) {
  if (fs::exists(model) && fs::is_regular_file(model)) return load_model_config(model);
  std::vector<fs::path> candidates = {fs::path(config_file_path).parent_path() / (model + ".yaml"),
                                      fs::path("configs") / (model + ".yaml")};
#ifdef PERCEIVER_DATA_DIR
  candidates.push_back(fs::path(PERCEIVER_DATA_DIR) / "configs" / (model + ".yaml"));
#endif
  for (const auto& p : candidates)
    if (fs::exists(p)) return load_model_config(p.string());
  PCV_FAIL("config key 'model': '", model, "' is neither a file nor a preset (looked for ", candidates[0].string(),
           ", ", candidates[1].string(), ")");
}

}  // namespace perceiver
