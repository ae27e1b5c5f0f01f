// fsdp_layout.hpp — what FSDP-mode works out before it allocates anything: the dtypes of each
// precision mode, the sharding strategy after FSDP1's world-size-1 switch, the shard group it
// implies and each unit's FlatParameter padding (the run's ShardLayout, BackendInfo::
// shard_layout), the gradient divide factors. Owns: those pure functions, shared by the engine
// (fsdp_engine.cpp), its closed form and the memory estimate (fsdp_estimate.cpp).
// Must not: allocate tensors or create process groups (the engine does, from the ShardLayout).
// Upstream: torch/distributed/fsdp/_init_utils.py (_init_core_state, _init_process_group_state_
// for_hybrid_shard, _get_gradient_predivide_factor via DefaultState), _flat_param.py (padding).
#pragma once
#include <c10/core/ScalarType.h>

#include <string>

#include "backends/engine.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "backends/shard_layout.hpp"

namespace zb::backends::fsdp {

struct Dtypes {
  at::ScalarType storage;  // the flat shard, its gradient and AdamW states
  at::ScalarType param;    // all-gather and compute
  at::ScalarType reduce;   // gradient reduce-scatter / all-reduce
};
// Throws UsageError for a precision FSDP-mode does not offer.
Dtypes dtypes_for(const std::string& precision, const FsdpOptions& o);

// FSDP1 (_init_utils.py, via DefaultState._get_gradient_predivide_factor): pre-divide by f,
// post-divide by W/f, with W the whole data-parallel size.
double predivide_factor(int world);

// _init_utils.py _init_core_state: "We clamp the strategy to NO_SHARD for world size of 1" — the
// size of FSDP's process group (the shard group under HYBRID_SHARD). Throws UsageError for a
// HYBRID_SHARD shard group of one rank in a larger world.
ShardingStrategy effective_strategy(const FsdpOptions& o, int world, int local_size);
inline bool is_sharded(ShardingStrategy s) { return s != ShardingStrategy::kNoShard; }
inline bool reshard_after_forward(ShardingStrategy s) {  // RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES
  return s == ShardingStrategy::kFullShard || s == ShardingStrategy::kHybridShard;
}

// CPUOffload(offload_params=True) refusals, as FSDP1 documents them: gradient accumulation outside
// no_sync() (accelerate's sync_each_batch with grad_accum > 1) — fully_sharded_data_parallel.py
// "Limitations": FSDP "uses the newly-reduced gradient instead of accumulating with any existing
// gradient" (_flat_param.py prepare_gradient_for_backward's TODO), i.e. it would silently drop the
// earlier micro-batches. Throws UsageError naming the option; no-op without offload.
void check_offload(const EngineSpec& spec, const FsdpOptions& o);

// BackendInfo::training.shard_layout: the shard group as the engine builds it — W (FULL_SHARD,
// SHARD_GRAD_OP), the node's ranks or hybrid_shard_group_size (HYBRID_SHARD, its own shard and
// replicate groups), 1 (NO_SHARD, or a world of one) — and each unit's flat parameter padded to a
// multiple of it when sharding (_flat_param.py). Throws UsageError as the engine would.
ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo);

}  // namespace zb::backends::fsdp
