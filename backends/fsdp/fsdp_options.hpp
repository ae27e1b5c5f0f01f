// fsdp_options.hpp — FSDP-mode options, named as PyTorch FSDP / accelerate name them, and the
// reader for accelerate's config YAML (`fsdp_config:`). Owns: defaults (PyTorch's), parsing and
// validation. Must not: run anything.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "backends/config_notes.hpp"

namespace zb::backends::fsdp {

enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };
enum class BackwardPrefetch { kBackwardPre, kBackwardPost, kNone };

struct FsdpOptions {
  ShardingStrategy sharding_strategy = ShardingStrategy::kFullShard;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;  // FSDP1 default
  bool forward_prefetch = false;
  bool limit_all_gathers = true;       // at most 2 all-gathers in flight (_limiter_utils.py)
  int hybrid_shard_group_size = 0;     // HYBRID_SHARD's shard group; 0 = ranks per node
  std::string reduce_dtype;            // "" = param_dtype (MixedPrecision's default); bf16|fp32
  bool sync_module_states = true;      // broadcast rank 0's weights before sharding
  bool activation_checkpointing = false;
  // Recorded for the report, not acted on (a config file's value is listed in config.ignored).
  std::string state_dict_type = "SHARDED_STATE_DICT";
  std::string auto_wrap_policy = "TRANSFORMER_BASED_WRAP";
  bool use_orig_params = true;
  bool cpu_ram_efficient_loading = true;
  bool offload_params = false;
};

std::string to_string(ShardingStrategy s);
std::string to_string(BackwardPrefetch p);
ShardingStrategy parse_sharding_strategy(const std::string& v);  // names or accelerate's numbers
BackwardPrefetch parse_backward_prefetch(const std::string& v);

nlohmann::json to_json(const FsdpOptions& o);
FsdpOptions fsdp_options_from_json(const nlohmann::json& j);  // keys as in to_json; throws UsageError

// accelerate's `fsdp_config:` block, read as accelerate 1.15 reads it (commands/launch.py copies
// each key into the launch args, adding the `fsdp_` prefix where missing; utils/launch.py
// prepare_multi_gpu_env exports them; utils/dataclasses.py FullyShardedDataParallelPlugin.
// __post_init__ resolves them). Keys a file leaves out take accelerate's defaults, which differ
// from PyTorch's (backward prefetch: none; auto-wrap policy: NO_WRAP). docs/configs.md lists
// every key: honoured, refused or ignored.
struct FsdpConfigBlock {
  FsdpOptions fsdp;
  int fsdp_version = 1;
  ConfigNotes notes;
};
// `block` is the fsdp_config mapping (YAML read with PyYAML's typing, as JSON); `ranks_per_node`
// (num_processes / num_machines, 0 = unknown) sizes HYBRID_SHARD's shard group as torch does.
// Throws UsageError naming the key, its value and why.
FsdpConfigBlock read_fsdp_config(const nlohmann::json& block, int ranks_per_node);

// accelerate's str_to_bool (utils/environment.py): y/yes/t/true/on/1 and n/no/f/false/off/0,
// any case; throws UsageError naming `key` otherwise.
bool accelerate_bool(const std::string& key, const nlohmann::json& v);
// A scalar as the file wrote it (strings unquoted), for messages and the report.
std::string scalar_text(const nlohmann::json& v);

}  // namespace zb::backends::fsdp
