// fsdp_offload_estimate.hpp — the closed forms of FSDP-mode's CPUOffload(offload_params=True)
// (fsdp_offload.hpp runs it): model-state bytes by location, host<->device traffic per optimizer
// step, and the offload terms of the pre-flight peak estimate. Owns: those formulas, derived from
// FSDP1's code (torch/distributed/fsdp/_flat_param.py pre_unshard / init_flat_param_attributes,
// _runtime_utils.py _pre_forward_unshard / _pre_backward_hook / _offload_grad /
// _post_backward_final_callback, fully_sharded_data_parallel.py clip_grad_norm_); docs/backends/
// fsdp.md "Offload" states them. Must not: allocate tensors or run anything.
#pragma once
#include "backends/common/host_offload.hpp"
#include "backends/engine.hpp"
#include "backends/shard_layout.hpp"

namespace zb::backends::fsdp {

// Bytes per rank with offload, `shard_bytes` = sum_u ceil(numel_u / S) * e (the flat shards in the
// flat-parameter dtype): nothing on the device at the end of backward (the sharded gradients are
// dropped in _finalize_params); on the host the shards, _cpu_grad and AdamW's two states, pinned.
ModelStateBytes offloaded_bytes(int64_t shard_bytes);

// Host<->device copies one optimizer step makes on `rank` (A = grad_accum micro-batches, U units,
// n = sum_u ceil(numel_u / S) shard elements in e-byte flat dtype, g = the rank holds a gradient
// element, sharded = S > 1):
//   h2d: 2*A*U copies of 2*A*n*e bytes (every unshard, forward and pre-backward, copies the host
//        shard: pre_unshard never skips with offload), + 1 copy of 4 bytes if sharded and g (the
//        local grad norm to the device);
//   d2h: U copies of n*e bytes (_offload_grad once per unit, at the synchronising micro-batch),
//        + 1 copy of 4 bytes if sharded (total_norm.cpu()).
// Zero without offload.
common::OffloadTraffic offload_traffic_per_step(const EngineSpec& spec, const Topology& topo, int rank);

// The estimate's offload terms, added to fsdp_estimate.cpp's: the
// device's sharded gradients held from their reduce-scatter to the final callback, the device
// copy of the host shard an in-flight prefetch all-gather reads, NO_SHARD's device copies of the
// root and the current block, and the gradient-norm transient moved to the host. No-op without offload.
void add_offload_terms(PeakEstimate& e, const EngineSpec& spec, const Topology& topo, int rank, bool gloo);

}  // namespace zb::backends::fsdp
