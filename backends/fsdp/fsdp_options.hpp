// fsdp_options.hpp — FSDP-mode options, named as PyTorch FSDP / accelerate name them, and the
// reader for accelerate's config YAML (`fsdp_config:`). Owns: defaults (PyTorch's), parsing and
// validation. Must not: run anything.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

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
  // Recorded for the report, not acted on (warned about when set from a config file).
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

// What an accelerate config file says (accelerate's `config.yaml` with distributed_type FSDP).
struct AccelerateConfig {
  FsdpOptions fsdp;
  std::string precision;      // "mixed" for mixed_precision bf16, "" when the file says "no"
  int num_processes = 0;      // 0 = not given
  std::vector<std::string> warnings;  // keys read but not honoured, by name
};
AccelerateConfig read_accelerate_config(const std::string& path);  // throws UsageError naming key/value

}  // namespace zb::backends::fsdp
