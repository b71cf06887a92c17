// Strict reading of the flat YAML mappings our config files are made of (the trainer's config
// file, a model config's `model:` block). yaml-cpp keeps a repeated key and a key that is a list
// or a mapping without complaint; a config would then silently depend on which copy a lookup
// finds, so both are errors here, naming the file and line.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace perceiver {

struct YamlEntry {
  std::string key;
  YAML::Node value;
  int line = 0;  // 1-based line of the key in its file
};

/// The entries of `map` in file order. Throws perceiver::Error naming `file` and the line for a
/// key that is not a plain scalar or that appears twice.
std::vector<YamlEntry> yaml_mapping(const YAML::Node& map, const std::string& file);

/// Parses a YAML file; throws naming `what` and the path when it cannot be opened, and the
/// path with yaml-cpp's line and column on a syntax error.
YAML::Node load_yaml_file(const std::string& path, const std::string& what);

}  // namespace perceiver
