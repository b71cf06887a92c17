// Model configs by name: the trainer's --model is a path or a preset name (configs/<name>.yaml).
#pragma once

#include <string>

#include "perceiver/config.h"

namespace perceiver {

/// The model config named by `model`: a path, or a preset looked up next to the trainer's
/// config file, in ./configs and in the installed data directory.
ModelConfig resolve_model_config(const std::string& model, const std::string& config_file_path);

}  // namespace perceiver
