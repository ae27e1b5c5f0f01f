// config_notes.hpp — what a config-file reader says about each key it met: honoured (and what
// it became in the resolved run), ignored (and why it cannot change the benchmark), and
// warnings (the run is what the framework would do, but maybe not what the file's author
// expected). Every report carries them (config.applied, config.ignored, config.warnings).
// Owns: the record types and their JSON. Must not: read files or decide anything.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zb::config {

struct ConfigKey {
  std::string key;    // dotted path as the file spells it: "zero_optimization.sub_group_size"
  std::string value;  // as written ("auto", "5e8", "true"), for the report
  std::string note;   // honoured: what it became; ignored: why it does not matter
};

struct ConfigNotes {
  std::vector<ConfigKey> applied;   // honoured keys
  std::vector<ConfigKey> ignored;   // keys that do not change what is benchmarked
  std::vector<std::string> warnings;

  void apply(const std::string& key, const std::string& value, const std::string& as) {
    applied.push_back({key, value, as});
  }
  void ignore(const std::string& key, const std::string& value, const std::string& reason) {
    ignored.push_back({key, value, reason});
  }
  void warn(const std::string& message) { warnings.push_back(message); }
  void append(const ConfigNotes& o) {
    applied.insert(applied.end(), o.applied.begin(), o.applied.end());
    ignored.insert(ignored.end(), o.ignored.begin(), o.ignored.end());
    warnings.insert(warnings.end(), o.warnings.begin(), o.warnings.end());
  }
};

inline nlohmann::json applied_json(const std::vector<ConfigKey>& keys) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& k : keys) out.push_back({{"key", k.key}, {"value", k.value}, {"as", k.note}});
  return out;
}

inline nlohmann::json ignored_json(const std::vector<ConfigKey>& keys) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& k : keys) out.push_back({{"key", k.key}, {"value", k.value}, {"reason", k.note}});
  return out;
}

}  // namespace zb::config
