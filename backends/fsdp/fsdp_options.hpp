// fsdp_options.hpp — FSDP-mode options, named as PyTorch FSDP / accelerate name them. Owns:
// defaults (PyTorch's), parsing and validation. Must not: run anything, or read a config file's
// format (config/accelerate_fsdp.hpp reads accelerate's fsdp_config; fsdp_config.hpp turns it
// into these options).
#pragma once
#include <nlohmann/json.hpp>

#include "backends/backend_options.hpp"
#include "backends/precision_plan.hpp"

#include <optional>
#include <string>
#include <vector>

namespace zb::backends::fsdp {

// kHybridShardZero2 is torch's ShardingStrategy._HYBRID_SHARD_ZERO2 (accelerate: HYBRID_SHARD_ZERO2,
// number 5): SHARD_GRAD_OP within the shard group, replicated across groups.
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard, kHybridShardZero2 };
enum class BackwardPrefetch { kBackwardPre, kBackwardPost, kNone };
inline bool is_hybrid(ShardingStrategy s) {  // _init_utils.py HYBRID_SHARDING_STRATEGIES
  return s == ShardingStrategy::kHybridShard || s == ShardingStrategy::kHybridShardZero2;
}

struct FsdpOptions {
  ShardingStrategy sharding_strategy = ShardingStrategy::kFullShard;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;  // FSDP1 default
  bool forward_prefetch = false;
  bool limit_all_gathers = true;       // at most 2 all-gathers in flight (_limiter_utils.py)
  int hybrid_shard_group_size = 0;     // HYBRID_SHARD(_ZERO2)'s shard group; 0 = ranks per node
  std::string reduce_dtype;            // "" = param_dtype (MixedPrecision's default); bf16|fp32
  bool sync_module_states = true;      // broadcast rank 0's weights before sharding
  bool activation_checkpointing = false;
  // CPUOffload(offload_params=True) (api.py): flat shards, their gradients and AdamW on the host
  // (backends/fsdp/fsdp_offload.hpp). Checked against the run by check_offload (fsdp_layout.hpp).
  bool offload_params = false;
  // Which modules become FSDP units (backends/fsdp/fsdp_wrap.hpp): TRANSFORMER_BASED_WRAP (one per
  // decoder block), NO_WRAP (the root alone, accelerate's default) or SIZE_BASED_WRAP with
  // min_num_params (run when it wraps nothing or exactly the blocks).
  std::string auto_wrap_policy = "TRANSFORMER_BASED_WRAP";
  int64_t min_num_params = 0;  // SIZE_BASED_WRAP only (accelerate fsdp_min_num_params; <= 0: no policy)
  // Recorded for the report, not acted on (a config file's value is listed in config.ignored).
  std::string state_dict_type = "SHARDED_STATE_DICT";
  bool use_orig_params = true;
  bool cpu_ram_efficient_loading = true;
};

std::string to_string(ShardingStrategy s);
std::string to_string(BackwardPrefetch p);
ShardingStrategy parse_sharding_strategy(const std::string& v);  // names or accelerate's numbers
BackwardPrefetch parse_backward_prefetch(const std::string& v);

nlohmann::json to_json(const FsdpOptions& o);
FsdpOptions fsdp_options_from_json(const nlohmann::json& j);  // keys as in to_json; throws UsageError
void validate(const FsdpOptions& o);  // throws UsageError naming the refused value; resolution calls it once
// The options a spec carries (EngineSpec::options): the struct resolution stored, or a raw object
// parsed once by fsdp_options_from_json. Every reader of a spec's options goes here.
const FsdpOptions& fsdp_options(const BackendOptions& options);

// What the engine resolved (FsdpEngine::resolved_options(), the report's config.backend.options):
// its options with the strategy it runs, and what it worked out. to_json and
// fsdp_resolved_from_json are the one mapping between the record and the report's keys (the
// report writes options.offload_params as cpu_offload.offload_params, CPUOffload's name, and
// reduce_dtype as the dtype resolved); the projection program reads the record.
struct FsdpResolved {
  FsdpOptions options;  // sharding_strategy: the one run; reduce_dtype: not in a report (below)
  // FSDP1 runs NO_SHARD at world size 1 (_init_utils.py _init_core_state): what was asked for.
  std::optional<ShardingStrategy> sharding_strategy_requested;
  std::optional<at::ScalarType> param_dtype, reduce_dtype, flat_param_dtype;  // absent: not known
  int shard_group_size = 0;
  double gradient_predivide_factor = 1, gradient_postdivide_factor = 1;
  bool sync_each_batch = false;
  std::string optimizer;  // what steps the shards (a description)
};
nlohmann::json to_json(const FsdpResolved& r);
FsdpResolved fsdp_resolved_from_json(const nlohmann::json& j);

}  // namespace zb::backends::fsdp
