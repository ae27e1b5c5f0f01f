// accelerate_fsdp2.hpp — an accelerate config with `fsdp_version: 2` (FSDP2, fully_shard), read as
// accelerate 1.15 reads it: fsdp_config keys (commands/launch.py, utils/dataclasses.py
// FullyShardedDataParallelPlugin.__post_init__), parallelism_config's dp_replicate / dp_shard
// mesh (parallelism_config.py ParallelismConfig), mixed_precision.
// Owns: the keys, accelerate's defaults for absent ones, its refusals, and what it ignores.
// Must not: name a backend or build a backend's options (the backend that claims FSDP version 2
// turns this struct into its options).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace zb::config {

// A key of a config file that zerobench reads but does not act on, and why.
struct IgnoredKey {
  std::string key, value, reason;
};
nlohmann::json to_json(const IgnoredKey& k);

// What an accelerate config with `fsdp_version: 2` says, with accelerate's defaults for absent keys.
struct AccelerateFsdp2Config {
  bool reshard_after_forward = true;              // fsdp_reshard_after_forward (a bool under version 2)
  std::string auto_wrap_policy = "NO_WRAP";       // TRANSFORMER_BASED_WRAP | SIZE_BASED_WRAP | NO_WRAP (FSDP_AUTO_WRAP_POLICY unset)
  int64_t min_num_params = 0;                     // SIZE_BASED_WRAP's (launch --fsdp_min_num_params default 1e8); 0 otherwise
  std::string transformer_layer_cls_to_wrap;      // recorded, not checked
  bool activation_checkpointing = false;
  bool cpu_ram_efficient_loading = true;          // --fsdp_cpu_ram_efficient_loading default "true"
  std::string state_dict_type = "SHARDED_STATE_DICT";
  // fsdp_offload_params: FullyShardedDataParallelPlugin.set_cpu_offload makes True
  // CPUOffloadPolicy() (pin_memory=True, its default) and False OffloadPolicy() for version 2.
  bool offload_params = false;
  // parallelism_config's mesh: 1 and 0 (= world size / the other) when the file has none.
  int dp_replicate_size = 1;
  int dp_shard_size = 0;
  std::string precision;              // "mixed" for mixed_precision bf16, "" for "no" or absent
  int num_processes = 0;              // 0 = not given
  std::vector<std::string> warnings;  // what accelerate itself would warn about
  std::vector<IgnoredKey> ignored;
};

// The fsdp_version a parsed accelerate config asks for (1 when absent, as accelerate's default).
int accelerate_fsdp_version(const YAML::Node& root);
// Self-contained readers: `where` prefixes error messages (e.g. "--config FILE: "). Throw
// UsageError naming the key and value (exit 2), e.g. fsdp_state_dict_type: LOCAL_STATE_DICT.
AccelerateFsdp2Config read_accelerate_fsdp2_config(const YAML::Node& root, const std::string& where);
AccelerateFsdp2Config read_accelerate_fsdp2_config(const std::string& path);
// The file's bytes as read_accelerate_fsdp2_config reads them (a JSON file is YAML too).
AccelerateFsdp2Config read_accelerate_fsdp2_bytes(const std::string& bytes, const std::string& where);
// True when the YAML file at `path` is an accelerate FSDP config with fsdp_version 2.
bool is_accelerate_fsdp2_config(const std::string& path);

}  // namespace zb::config
