// accelerate_config.hpp — the top level of an accelerate config (commands/config/config_args.py
// ClusterConfig, versions 0.20-1.15): which distributed_type, mixed_precision, num_processes /
// num_machines, and every launcher key noted (applied or ignored, and why).
// Owns: accelerate's top-level keys, its value spellings (str_to_bool, scalar text) and its
// refusals of a file ("had unknown keys", a missing distributed_type). Must not: name a backend
// or pick one (backends claim files through their descriptor), or read fsdp_config /
// deepspeed_config (config/accelerate_fsdp*.cpp, config/accelerate_deepspeed.cpp do).
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "config/config_notes.hpp"

namespace zb::config {

// What an accelerate config's top level says about the launch.
struct AccelerateLaunch {
  std::string distributed_type;         // upper case: FSDP, DEEPSPEED, MULTI_GPU, MULTI_CPU, NO, ...
  // fsdp_config's fsdp_version (or version) with distributed_type FSDP: 2 when it says "2", else 1
  // (launch.py's default; a bad value is refused by the FSDP reader). 0 with another type.
  int fsdp_version = 0;
  std::string mixed_precision = "no";   // the file's: no | fp16 | bf16 | fp8 (accelerate's default no)
  bool mixed_precision_in_file = false; // the file set mixed_precision (not null)
  // The file's mixed_precision is a YAML boolean (an unquoted no/yes) that --precision made moot:
  // `mixed_precision` is then a placeholder "no" the run's --precision overrides.
  bool mixed_precision_unread = false;
  int ranks_per_node = 0;               // num_processes / num_machines; 0 = unknown
};

// Reads the top level of `root` (an accelerate config, as JSON), noting each key in `notes`.
// `world_size` is the run's (for the num_processes note); `precision_given`: the run has
// --precision, accelerate launch's --mixed_precision, so the file's mixed_precision is never read
// (a YAML boolean there is then ignored, not refused). Throws UsageError naming the key.
AccelerateLaunch read_accelerate_launch(const nlohmann::json& root, int world_size, bool nproc_given, ConfigNotes& notes,
                                        bool precision_given = false);

// The note on mixed_precision (or the old fp16 key), once the run's precision is known:
// `precision_as` is what it became ("mixed", "bf16 (--precision)", ...), `mixed_precision` the
// accelerate value in force. Nothing when the file sets neither key, or when its mixed_precision is
// a YAML boolean read_accelerate_launch already noted as ignored.
void note_mixed_precision(const nlohmann::json& root, const std::string& precision_as,
                          const std::string& mixed_precision, ConfigNotes& notes);

// accelerate's str_to_bool (utils/environment.py): y/yes/t/true/on/1 and n/no/f/false/off/0,
// any case; throws UsageError naming `key` otherwise.
bool accelerate_bool(const std::string& key, const nlohmann::json& v);
// A scalar as the file wrote it (strings unquoted), for messages and the report.
std::string scalar_text(const nlohmann::json& v);

}  // namespace zb::config
