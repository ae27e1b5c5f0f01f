// config_file.cpp — reading a config file as its framework reads it (see config_file.hpp; the
// key-by-key decisions are tabled in docs/configs.md).
#include "config/config_file.hpp"

#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <regex>
#include <set>

#include "config/bounded_readers.hpp"
#include "runtime/errors.hpp"

namespace zb::config {

namespace {
using json = nlohmann::json;

// A plain (unquoted) YAML scalar typed as PyYAML's safe_load types it (YAML 1.1 resolvers):
// accelerate reads its YAML with yaml.safe_load, so `no` is a boolean and `5e8` a string.
json plain_scalar(const std::string& s) {
  static const std::regex null_re("^(~|null|Null|NULL|)$");
  static const std::regex bool_true("^(yes|Yes|YES|true|True|TRUE|on|On|ON)$");
  static const std::regex bool_false("^(no|No|NO|false|False|FALSE|off|Off|OFF)$");
  static const std::regex int_re("^[-+]?(0|[1-9][0-9_]*)$");
  static const std::regex float_re("^[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+][0-9]+)?$");
  static const std::regex inf_re("^[-+]?\\.(inf|Inf|INF)$");
  static const std::regex nan_re("^\\.(nan|NaN|NAN)$");
  if (std::regex_match(s, null_re)) return nullptr;
  if (std::regex_match(s, bool_true)) return true;
  if (std::regex_match(s, bool_false)) return false;
  auto digits = [](std::string v) {
    v.erase(std::remove(v.begin(), v.end(), '_'), v.end());
    return v;
  };
  if (std::regex_match(s, int_re)) {
    try {
      return std::stoll(digits(s));
    } catch (const std::exception&) {
      return s;
    }
  }
  if (std::regex_match(s, float_re) && s != "." && s != "-." && s != "+.") return std::stod(digits(s));
  if (std::regex_match(s, inf_re)) return s[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  if (std::regex_match(s, nan_re)) return std::nan("");
  return s;
}

// One scalar node as PyYAML types it. Quoted scalars carry the "!" tag and stay strings; so
// does an explicit !!str.
json yaml_scalar(const YAML::Node& n) {
  if (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str") return n.Scalar();
  return plain_scalar(n.Scalar());
}

// The YAML tree as JSON by a counted walk (config/bounded_readers.hpp): this conversion follows
// every alias, so it is where an alias bomb would expand; the walk stops at the node budget.
json yaml_to_json(const YAML::Node& n, const std::string& where) {
  return yaml_to_json_bounded(n, yaml_scalar, where);
}


// The offset of the first byte that is not strict UTF-8 (Python's "utf-8" codec: no overlong
// forms, no surrogates, nothing above U+10FFFF), or npos.
size_t first_invalid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (b < 0x80) { ++i; continue; }
    if ((b & 0xE0) == 0xC0) n = 1, cp = b & 0x1F, min = 0x80;
    else if ((b & 0xF0) == 0xE0) n = 2, cp = b & 0x0F, min = 0x800;
    else if ((b & 0xF8) == 0xF0) n = 3, cp = b & 0x07, min = 0x10000;
    else return i;
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n + 1;
  }
  return std::string::npos;
}
}  // namespace

bool is_pyyaml_bool(const std::string& plain) { return plain_scalar(plain).is_boolean(); }

std::string read_config_bytes(const std::string& path, const std::string& flag) {
  // At most kMaxConfigFileBytes (config/bounded_readers.hpp, docs/configs.md "Limits").
  return read_file_bounded(path, flag + " " + path + ": ", kMaxConfigFileBytes);
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr) != 1)
    throw RunError("SHA-256 failed (OpenSSL EVP_Digest)");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

// JSON as DeepSpeed reads it (hjson with dict_raise_error_on_duplicate_keys): comments allowed,
// a key given twice in one object refused.
json parse_deepspeed_json(const std::string& text, const std::string& where) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    else if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() && parsed.is_string() &&
             !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  // Size, depth and value count bounded while parsing (config/bounded_readers.hpp).
  json root = parse_json_bounded(text, where, {}, /*ignore_comments=*/true, cb);
  if (!duplicate.empty()) throw UsageError(where + "key \"" + duplicate + "\" appears twice in one object (DeepSpeed refuses duplicate keys)");
  return root;
}


LoadedConfig load_config(const std::string& path, const std::string& flag) {
  LoadedConfig d;
  d.path = path;
  d.flag = flag;
  d.bytes = read_config_bytes(path, flag);
  const std::string where = flag + " " + path + ": ";
  // accelerate opens the YAML with encoding="utf-8" and DeepSpeed json.load()s the JSON as text:
  // a byte that is not UTF-8 is a UnicodeDecodeError there, before any key is read.
  if (const size_t bad = first_invalid_utf8(d.bytes); bad != std::string::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(d.bytes[bad])));
    throw UsageError(where + "not UTF-8 text: byte " + std::to_string(bad) + " is " + hex +
                     " (accelerate and DeepSpeed read config files as UTF-8 and refuse it)");
  }
  auto first = d.bytes.find_first_not_of(" \t\r\n");
  const bool looks_json = (first != std::string::npos && d.bytes[first] == '{') ||
                          (path.size() > 5 && path.substr(path.size() - 5) == ".json");
  if (looks_json) {
    d.root = parse_deepspeed_json(d.bytes, where);
  } else {
    YAML::Node node;
    try {
      node = YAML::Load(d.bytes);  // the byte cap is read_config_bytes'; aliases stay shared here
    } catch (const YAML::Exception& e) {
      throw UsageError(where + "not valid YAML: " + e.what());
    }
    d.root = yaml_to_json(node, where);
  }
  if (!d.root.is_object()) throw UsageError(where + "expected a mapping of settings");
  // accelerate's configs name a distributed_type (or at least its launch settings); DeepSpeed's do not.
  for (const char* k : {"distributed_type", "compute_environment", "num_processes", "fsdp_config", "deepspeed_config"})
    if (d.root.contains(k)) d.accelerate = true;
  if (!looks_json) d.accelerate = true;  // YAML is accelerate's format; DeepSpeed reads JSON
  return d;
}

void file_faults_are_usage(const std::string& where, const std::function<void()>& read) {
  try {
    read();
  } catch (const json::exception& e) {
    throw UsageError(where + "a value of the wrong type or out of range (" + e.what() + ")");
  } catch (const YAML::Exception& e) {
    throw UsageError(where + "a value of the wrong type (" + e.what() + ")");
  } catch (const std::invalid_argument& e) {
    throw UsageError(where + "a value that is not a number (" + e.what() + ")");
  } catch (const std::out_of_range& e) {
    throw UsageError(where + "a number out of range (" + e.what() + ")");
  }
}

std::string file_sha256(const std::string& path) { return sha256_hex(read_config_bytes(path, "config")); }

nlohmann::json sources_json(const ConfigProvenance& p) {
  json sources = json::array();
  for (const auto& s : p.sources) sources.push_back({{"path", s.path}, {"sha256", s.sha256}, {"kind", s.kind}});
  return sources;
}

nlohmann::json provenance_json(const ConfigProvenance& p) {
  return {{"source_files", sources_json(p)},
          {"applied", applied_json(p.notes.applied)},
          {"ignored", ignored_json(p.notes.ignored)},
          {"warnings", p.notes.warnings}};
}

int config_num_processes(const std::string& path, const std::string& flag, bool nproc_given) {
  LoadedConfig d;
  try {
    file_faults_are_usage(flag + " " + path + ": ", [&] { d = load_config(path, flag); });
  } catch (const UsageError& e) {
    throw UsageError(clip_message(e.what()));
  }
  if (!d.accelerate || !d.root.contains("num_processes") || d.root["num_processes"].is_null()) return 0;
  const auto& v = d.root["num_processes"];
  if (!v.is_number_integer())
    throw UsageError(flag + " " + path + ": num_processes " + v.dump() + " is not an integer");
  const int64_t n = v.get<int64_t>();
  if (n == -1 && !nproc_given)
    throw UsageError(flag + " " + path + ": num_processes -1: accelerate then needs --num_processes; pass --nproc");
  if (n < -1 || n == 0 || n > (1 << 20))
    throw UsageError(flag + " " + path + ": num_processes " + std::to_string(n) + " is not a positive count");
  return n > 0 ? int(n) : 0;
}

nlohmann::json read_config_tree(const std::string& path, const std::string& flag, bool* accelerate) {
  try {
    LoadedConfig d;
    file_faults_are_usage(flag + " " + path + ": ", [&] { d = load_config(path, flag); });
    if (accelerate) *accelerate = d.accelerate;
    return std::move(d.root);
  } catch (const UsageError& e) {
    throw UsageError(clip_message(e.what()));
  }
}

}  // namespace zb::config
