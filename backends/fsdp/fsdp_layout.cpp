// fsdp_layout.cpp — see fsdp_layout.hpp (moved out of fsdp_engine.cpp unchanged, so the engine,
// its closed form and the memory estimate read the same groups and padding).
#include "backends/fsdp/fsdp_layout.hpp"
#include "backends/fsdp/fsdp_padding.hpp"
#include "backends/fsdp/fsdp_wrap.hpp"

#include "runtime/errors.hpp"

namespace zb::backends::fsdp {

Dtypes dtypes_for(const std::string& precision, const FsdpOptions& o) {
  if (precision == "fp32") return {at::kFloat, at::kFloat, at::kFloat};
  if (precision == "low") return {at::kBFloat16, at::kBFloat16, at::kBFloat16};
  if (precision == "mixed")
    return {at::kFloat, at::kBFloat16, o.reduce_dtype == "fp32" ? at::kFloat : at::kBFloat16};
  // fp16: accelerate's FullyShardedDataParallelPlugin.set_mixed_precision("fp16") ->
  // MixedPrecision(param_dtype=fp16, reduce_dtype=fp16, buffer_dtype=fp16) over the fp32 flat parameters.
  if (precision == "fp16") return {at::kFloat, at::kHalf, o.reduce_dtype == "fp32" ? at::kFloat : at::kHalf};
  throw UsageError("--precision for fsdp must be fp32, low, mixed or fp16, got '" + precision + "'");
}

double predivide_factor(int world) {
  int f = 1;
  while (world % f == 0 && world / f > f) f *= 2;
  return double(f);
}

ShardingStrategy effective_strategy(const FsdpOptions& o, int world, int local_size) {
  if (is_hybrid(o.sharding_strategy)) {
    const int s = o.hybrid_shard_group_size > 0 ? o.hybrid_shard_group_size : local_size;
    if (s == 1 && world > 1)
      throw UsageError(to_string(o.sharding_strategy) + " with a shard group of 1 rank: FSDP1 switches to NO_SHARD on that 1-rank group "
                       "(_init_core_state) and would not reduce across the " +
                       std::to_string(world) + " replicas; use --sharding-strategy NO_SHARD");
  }
  return world == 1 ? ShardingStrategy::kNoShard : o.sharding_strategy;
}

void check_offload(const EngineSpec& spec, const FsdpOptions& o) {
  if (o.offload_params && spec.train.sync_each_batch && spec.train.grad_accum > 1)
    throw UsageError("fsdp offload_params true with sync_each_batch and grad_accum " +
                     std::to_string(spec.train.grad_accum) +
                     ": FSDP1 does not support gradient accumulation outside no_sync() with CPU offload (it keeps only "
                     "the last micro-batch's gradient; fully_sharded_data_parallel.py Limitations)");
}

namespace {
// Shard-group size: W for FULL_SHARD/SHARD_GRAD_OP, S for HYBRID_SHARD, 1 for NO_SHARD.
int shard_group_size(ShardingStrategy st, const FsdpOptions& o, int world, int local_size) {
  if (st == ShardingStrategy::kNoShard) return 1;
  if (!is_hybrid(st)) return world;
  const int s = o.hybrid_shard_group_size > 0 ? o.hybrid_shard_group_size : local_size;
  if (s <= 0 || world % s != 0)
    throw UsageError(to_string(st) + " shard group size " + std::to_string(s) + " does not divide world size " +
                     std::to_string(world));
  return s;
}
}  // namespace

ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo) {
  const auto& o = fsdp_options(spec.options);
  const auto st = effective_strategy(o, topo.world, topo.ranks_per_node);
  check_offload(spec, o);
  ShardLayout l;
  l.world = topo.world;
  l.ranks_per_node = topo.ranks_per_node;
  l.shard_size = shard_group_size(st, o, topo.world, topo.ranks_per_node);
  // HYBRID_SHARD builds its own shard and replicate groups (_init_intra_and_inter_node_groups).
  l.separate_groups = is_hybrid(st);
  // fsdp_activation_checkpointing (accelerate's) checkpoint-wraps what the auto-wrap policy wraps
  // (accelerator.py prepare_model: apply_activation_checkpointing(auto_wrap_policy=...)); with no
  // policy that is every module, nested, and with a size-based policy that wraps nothing it is none.
  const Wrapping w = wrapping(o, spec.model);
  if (o.activation_checkpointing && w == Wrapping::kWholeModel)
    throw UsageError("fsdp_activation_checkpointing true with auto_wrap_policy " + o.auto_wrap_policy +
                     (o.auto_wrap_policy == "SIZE_BASED_WRAP" && o.min_num_params > 0
                          ? " wrapping no module: accelerate then checkpoints no module either"
                          : ": accelerate then checkpoint-wraps every module of the model, nested "
                            "(apply_activation_checkpointing with no auto_wrap_policy)") +
                     "; zerobench checkpoints whole decoder blocks: not implemented for this policy (use "
                     "TRANSFORMER_BASED_WRAP, or --activation-checkpointing without fsdp_activation_checkpointing)");
  for (const auto& unit : flat_unit_specs(spec.model, w)) {
    int64_t numel = 0;
    for (const auto& p : unit) numel += p.numel();
    l.unit_numel.push_back(numel);
    // _flat_param.py: pad to a multiple of the shard world size only when sharding.
    l.unit_padded.push_back(padded_flat_numel(numel, l.shard_size, is_sharded(st)));  // fsdp_padding.hpp
  }
  check_layout(l);
  return l;
}

}  // namespace zb::backends::fsdp
