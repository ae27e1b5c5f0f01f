// accelerate_fsdp.hpp — accelerate's `fsdp_config:` block for fsdp_version 1, read as accelerate
// 1.15 reads it (commands/launch.py copies each key into the launch args, adding the `fsdp_`
// prefix where missing; utils/launch.py prepare_multi_gpu_env exports them; utils/dataclasses.py
// FullyShardedDataParallelPlugin.__post_init__ resolves them). Keys a file leaves out take
// accelerate's defaults, which differ from PyTorch's (backward prefetch: none; auto-wrap policy:
// NO_WRAP). docs/configs.md lists every key: honoured, refused or ignored.
// Owns: the block's keys, accelerate's value spellings (utils/constants.py names or their 1-based
// numbers) and its refusals. Must not: name a backend or build a backend's options (the backend
// that claims FSDP version 1 turns this struct into its options).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "config/config_notes.hpp"

namespace zb::config {

// FullyShardedDataParallelPlugin's fields as accelerate resolves them (fsdp_version 1); names as
// torch's enums name them (ShardingStrategy, BackwardPrefetch).
struct AccelerateFsdpConfig {
  int fsdp_version = 1;                                   // 2: nothing else is read (accelerate_fsdp2.hpp)
  std::string sharding_strategy = "FULL_SHARD";           // one of kFsdpShardingStrategies
  std::string sharding_strategy_key;                      // as the file spelled it ("" = absent)
  std::string backward_prefetch = "NO_PREFETCH";          // BACKWARD_PRE | BACKWARD_POST | NO_PREFETCH
  bool forward_prefetch = false;
  bool activation_checkpointing = false;
  bool sync_module_states = true;
  bool use_orig_params = true;
  bool cpu_ram_efficient_loading = true;
  bool offload_params = false;                            // CPUOffload(offload_params=...)
  std::string auto_wrap_policy = "NO_WRAP";              // TRANSFORMER_BASED_WRAP | SIZE_BASED_WRAP | NO_WRAP
  int64_t min_num_params = 100000000;                     // SIZE_BASED_WRAP's (launch --fsdp_min_num_params default 1e8)
  std::string state_dict_type = "SHARDED_STATE_DICT";
  int hybrid_shard_group_size = 0;                        // HYBRID_SHARD: ranks per node (0 = unknown)
  ConfigNotes notes;
};

// accelerate's utils/constants.py FSDP_SHARDING_STRATEGY (a key takes a name or its 1-based index).
extern const std::vector<std::string> kFsdpShardingStrategies;
// `value` as one of `names` or its 1-based index; throws UsageError "KEY 'VALUE' is not one of 1/A, 2/B, ...".
std::string accelerate_name_or_number(const std::string& key, const std::string& value,
                                      const std::vector<std::string>& names);
// A backward prefetch as accelerate spells it (a name, its number, or NONE) -> BACKWARD_PRE |
// BACKWARD_POST | NO_PREFETCH.
std::string accelerate_backward_prefetch(const std::string& key, const std::string& value);

// `block` is the fsdp_config mapping (YAML read with PyYAML's typing, as JSON); `ranks_per_node`
// (num_processes / num_machines, 0 = unknown) sizes HYBRID_SHARD's shard group as torch does.
// Throws UsageError naming the key, its value and why.
AccelerateFsdpConfig read_accelerate_fsdp_config(const nlohmann::json& block, int ranks_per_node);

}  // namespace zb::config
