// libFuzzer target: the configuration files (a model config as YAML and as HF config.json, and
// the trainer's --config_file_path YAML). Property on every input: each parser returns or throws
// perceiver::Error; nothing else escapes (yaml-cpp's and nlohmann's exceptions included), nothing
// crashes.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "perceiver/config.h"
#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace perceiver;
  const auto yaml = fuzz::put("config.yaml", data, size);
  const auto json = fuzz::put("config.json", data, size);
  fuzz::accepts([&] { model_config_from_yaml(yaml.string()); });
  fuzz::accepts([&] { model_config_from_hf_json(json.string()); });
  std::string arg0 = "perceiver-train", arg1 = "--config_file_path", arg2 = yaml.string();
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  bool help = false;
  std::string text;
  fuzz::accepts([&] { parse_train_config(3, argv, &help, &text); });
  return 0;
}
