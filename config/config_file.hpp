// config_file.hpp — a framework's config file read as its framework reads it: an accelerate
// config (YAML, or accelerate's JSON form) or a DeepSpeed JSON, which of the two it is, the
// source files' SHA-256, and the provenance every report carries.
// Owns: reading bytes (bounded), PyYAML's scalar typing for YAML, JSON with comments and
// DeepSpeed's duplicate-key refusal, telling the two formats apart, num_processes.
// Must not: name a backend or pick one (each backend claims the files it runs through its
// descriptor: backends/backend_info.hpp), read a format's keys (config/accelerate_*.cpp,
// config/deepspeed_*.cpp do), or run anything.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "config/config_notes.hpp"

namespace zb::config {

struct ConfigSource {
  std::string path;    // as given (deepspeed_config_file: as resolved)
  std::string sha256;  // of the file's bytes
  std::string kind;    // "accelerate" | "deepspeed"
};

// What the config files said, for the report (config.source_files / applied / ignored / warnings).
struct ConfigProvenance {
  std::vector<ConfigSource> sources;
  ConfigNotes notes;
};
nlohmann::json provenance_json(const ConfigProvenance& p);  // {source_files, applied, ignored, warnings}
nlohmann::json sources_json(const ConfigProvenance& p);     // source_files: [{path, sha256, kind}]

// A config file as read: its bytes, its settings and its format.
struct LoadedConfig {
  std::string path, flag;   // the file and the flag that named it (--config, --accelerate-config, ...)
  std::string bytes;        // at most kMaxConfigFileBytes
  nlohmann::json root;      // the settings (a mapping)
  bool accelerate = false;  // an accelerate config; false: a DeepSpeed JSON
};
// Throws UsageError prefixed "FLAG PATH: ".
LoadedConfig load_config(const std::string& path, const std::string& flag);

// The file's bytes, bounded (config/bounded_readers.hpp); throws UsageError naming `flag` and `path`.
std::string read_config_bytes(const std::string& path, const std::string& flag);
// JSON as DeepSpeed reads it (hjson with dict_raise_error_on_duplicate_keys): comments allowed, a
// key given twice in one object refused. `where` prefixes messages.
nlohmann::json parse_deepspeed_json(const std::string& text, const std::string& where);
// SHA-256 of bytes, lower-case hex (OpenSSL's EVP digest).
std::string sha256_hex(const std::string& bytes);

// Runs `read`; a value of the wrong type or range deep in a reader (nlohmann's type_error /
// out_of_range, a yaml-cpp conversion, std::stoi) is the file's fault: UsageError naming `where`.
void file_faults_are_usage(const std::string& where, const std::function<void()>& read);

// num_processes of an accelerate config (0: absent or a DeepSpeed JSON); -1 is refused unless
// `nproc_given` (accelerate wants --num_processes then).
int config_num_processes(const std::string& path, const std::string& flag, bool nproc_given);

// The file's settings as its framework reads them (PyYAML's typing for YAML; JSON with comments
// and DeepSpeed's duplicate-key refusal), bounded, unresolved: for tools that walk every key
// (bench/translate). `accelerate` (may be null) says whether it is an accelerate config.
// Throws UsageError naming the file.
nlohmann::json read_config_tree(const std::string& path, const std::string& flag, bool* accelerate = nullptr);

// Whether a plain (unquoted) YAML scalar is a boolean to PyYAML's safe_load (YAML 1.1: yes/no,
// true/false, on/off in three spellings each) — what accelerate then reads.
bool is_pyyaml_bool(const std::string& plain);

// SHA-256 of a file's bytes, lower-case hex (OpenSSL's EVP digest); throws UsageError if unreadable.
std::string file_sha256(const std::string& path);

}  // namespace zb::config
