// config_file.hpp — the one place a framework's config file is recognised and dispatched:
// an accelerate config (YAML, or accelerate's JSON form) picks the backend from distributed_type
// (FSDP -> fsdp, or fsdp2 with fsdp_version 2, read by backends/fsdp2's reader; DEEPSPEED ->
// zero3; MULTI_GPU / MULTI_CPU / NO -> ddp), and a DeepSpeed JSON picks zero3.
// Owns: reading a file as its framework reads it (PyYAML's scalar typing for YAML; JSON with
// comments and DeepSpeed's duplicate-key refusal), accelerate's top-level keys
// (commands/config/config_args.py ClusterConfig), deepspeed_config_file path resolution, the
// source files' SHA-256, and the provenance every report carries.
// Must not: read a backend's own keys (backends/<name>/<name>_options.cpp do) or run anything.
#pragma once
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "backends/config_notes.hpp"
#include "backends/engine.hpp"

namespace zb::bench {

struct ConfigSource {
  std::string path;    // as given (deepspeed_config_file: as resolved)
  std::string sha256;  // of the file's bytes
  std::string kind;    // "accelerate" | "deepspeed"
};

// What the config files said, for the report (config.source_files / applied / ignored / warnings).
struct ConfigProvenance {
  std::vector<ConfigSource> sources;
  backends::ConfigNotes notes;
};
nlohmann::json provenance_json(const ConfigProvenance& p);  // {source_files, applied, ignored, warnings}

// The command line's side: which file, through which flag, and the flags a file may not contradict.
struct ConfigRequest {
  std::string path, flag;          // the file and the flag that named it (--config, --accelerate-config, ...)
  std::string backend;             // --backend (meaningful when backend_given)
  bool backend_given = false;
  std::string precision;           // --precision (meaningful when precision_given)
  bool precision_given = false;
  backends::TrainConfig train;     // the flags' values
  std::set<std::string> given;     // flags the command line set ("--micro-batch", ...)
  int world_size = 1;              // the run's world size
  int64_t hidden = 0;              // model hidden size ("auto" bucket sizes)
};

struct ResolvedConfig {
  std::string backend;             // the backend the file picks
  std::string precision;           // the backend's precision name ("" = the file does not say)
  backends::TrainConfig train;     // request.train with the file's settings applied
  nlohmann::json options;          // backend options, framework-named (backend option JSON)
  ConfigProvenance provenance;
};

// Throws UsageError: one line naming the file, the key, its value and why.
ResolvedConfig resolve_config(const ConfigRequest& request);

// num_processes of an accelerate config (0: absent or a DeepSpeed JSON); -1 is refused unless
// `nproc_given` (accelerate wants --num_processes then).
int config_num_processes(const std::string& path, const std::string& flag, bool nproc_given);

// The file's settings as its framework reads them (PyYAML's typing for YAML; JSON with comments
// and DeepSpeed's duplicate-key refusal), bounded, unresolved: for tools that walk every key
// (bench/translate). `accelerate` (may be null) says whether it is an accelerate config.
// Throws UsageError naming the file.
nlohmann::json read_config_tree(const std::string& path, const std::string& flag, bool* accelerate = nullptr);

// SHA-256 of a file's bytes, lower-case hex (OpenSSL's EVP digest); throws UsageError if unreadable.
std::string file_sha256(const std::string& path);

}  // namespace zb::bench
