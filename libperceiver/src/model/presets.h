// Model configs by name: the tools' --model/--config is a path or a preset name, looked up as
// <name>.yaml in the folders below, so that presets work from any working folder, from the
// build tree and from an installed tree (the container included).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "perceiver/config.h"

namespace perceiver {

/// Where preset names are looked up, in order: next to the trainer's config file (if given),
/// ./configs, share/perceiver/configs beside the running program's bin/ folder (an installed
/// tree; the build tree has the same layout), and the install prefix the library was built for.
std::vector<std::filesystem::path> preset_dirs(const std::string& config_file_path = "");

/// The file `model` names: itself if it is a file, else <dir>/<model>.yaml in the first of
/// preset_dirs() that has one. Throws naming `what` (the config key or option that gave it) and
/// every place it looked.
std::filesystem::path find_model_config(const std::string& model, const std::string& config_file_path = "",
                                        const std::string& what = "config key 'model'");

/// load_model_config(find_model_config(model, config_file_path)).
ModelConfig resolve_model_config(const std::string& model, const std::string& config_file_path,
                                 std::filesystem::path* used = nullptr);

}  // namespace perceiver
