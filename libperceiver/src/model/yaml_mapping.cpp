#include "model/yaml_mapping.h"

#include <map>

#include "perceiver/error.h"

namespace perceiver {

std::vector<YamlEntry> yaml_mapping(const YAML::Node& map, const std::string& file) {
  std::vector<YamlEntry> out;
  std::map<std::string, int> first_line;
  for (const auto& kv : map) {
    const int line = kv.first.Mark().line + 1;
    PCV_CHECK(kv.first.IsScalar(), file, ":", line, ": a key must be a single name, not a ",
              kv.first.IsSequence() ? "list" : kv.first.IsMap() ? "mapping" : "null");
    const std::string key = kv.first.Scalar();
    const auto [it, fresh] = first_line.emplace(key, line);
    PCV_CHECK(fresh, file, ":", line, ": duplicate key '", key, "' (first given at line ", it->second, ")");
    out.push_back({key, kv.second, line});
  }
  return out;
}

YAML::Node load_yaml_file(const std::string& path, const std::string& what) {
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    PCV_FAIL("cannot open ", what, " '", path, "'");
  } catch (const YAML::Exception& e) {
    PCV_FAIL(path, ": YAML error: ", e.what());
  }
}

}  // namespace perceiver
