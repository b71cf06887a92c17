#include "model/presets.h"

#include <algorithm>
#include <system_error>

#include "perceiver/error.h"

namespace perceiver {
namespace fs = std::filesystem;

namespace {

// The running program's share/perceiver/configs (bin/<tool> -> ../share/perceiver/configs).
std::vector<fs::path> beside_program() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return {};
  return {exe.parent_path().parent_path() / "share" / "perceiver" / "configs"};
}

}  // namespace

std::vector<fs::path> preset_dirs(const std::string& config_file_path) {
  std::vector<fs::path> candidates;
  if (!config_file_path.empty()) candidates.push_back(fs::path(config_file_path).parent_path());
  candidates.push_back("configs");
  for (const fs::path& d : beside_program()) candidates.push_back(d);
#ifdef PERCEIVER_INSTALL_DATADIR
  candidates.push_back(fs::path(PERCEIVER_INSTALL_DATADIR) / "configs");
#endif
  std::vector<fs::path> dirs;
  for (const fs::path& d : candidates)
    if (std::find(dirs.begin(), dirs.end(), d.lexically_normal()) == dirs.end()) dirs.push_back(d.lexically_normal());
  return dirs;
}

fs::path find_model_config(const std::string& model, const std::string& config_file_path, const std::string& what) {
  PCV_CHECK(!model.empty(), what, ": empty (a preset name or a model config path)");
  if (fs::is_regular_file(model)) return model;
  std::string looked;
  for (const fs::path& d : preset_dirs(config_file_path)) {
    const fs::path p = d / (model + ".yaml");
    if (fs::is_regular_file(p)) return p;
    looked += (looked.empty() ? "" : ", ") + p.string();
  }
  PCV_FAIL(what, ": '", model, "' is neither a file nor a preset (looked for ", looked, ")");
}

ModelConfig resolve_model_config(const std::string& model, const std::string& config_file_path, fs::path* used) {
  const fs::path p = find_model_config(model, config_file_path);
  if (used) *used = p;
  return load_model_config(p.string());
}

}  // namespace perceiver
