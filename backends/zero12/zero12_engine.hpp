// zero12_engine.hpp — ZeRO stages 1 and 2 as DeepSpeed 0.19.8's DeepSpeedZeroOptimizer runs them,
// registered as "zero1" and "zero2" (one engine; the stage is a constructor argument).
// Owns: the model's parameters whole on every rank in the model dtype, in one flat buffer aligned
// to 2 x W elements (bit16_groups_flat), W equal partitions; this rank's fp32 master partition
// (single_partition_of_fp32_groups) and AdamW(fused) states on it; gradients through the IPG
// bucket (reduce_bucket_size elements, contiguous_gradients) reduced by average_tensor (divide by
// W, one all-reduce per bucket with use_multi_rank_bucket_allreduce, or all-reduce then divide
// without reduce_scatter), this rank's parameters' gradients kept (copy_grads_in_partition) and
// accumulated across micro-batches; stage 2 reduces every micro-batch from the gradient hooks,
// stage 1 accumulates whole gradients and reduces at the boundary (reduce_gradients); the step:
// fp32 gradient partition, global norm (get_grad_norm_direct), clip (unscale_and_clip_grads),
// AdamW on the master, copy into the flat partition, all-gather the partitions
// (all_gather_dp_groups).
// Precisions: fp32 | bf16 (the model dtype). offload_optimizer device cpu: zero12_offload.hpp.
// Upstream: deepspeed/runtime/zero/stage_1_and_2.py, runtime/engine.py (allreduce_gradients,
// _configure_zero_optimizer), runtime/utils.py (all_gather_dp_groups), runtime/zero/config.py.
#pragma once
#include "backends/engine.hpp"
#include "backends/topology.hpp"

namespace zb::backends::zero12 {
// stage 1 -> "zero1", stage 2 -> "zero2".
BackendInfo backend_info(int stage);
// BackendInfo::training.expected_bytes (zero12_engine.cpp) and estimate_peak (zero12_estimate.cpp) of `stage`.
ModelStateBytes expected_bytes_for(const EngineSpec& spec, const Topology& topo, int rank, int stage);
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo, int stage);
// Test-only fault injection (tests/test_zero12.cpp, test_projection.cpp, test_crossval.cpp):
// "skip_copy_back" makes average_tensor keep each rank's own, unreduced gradient slices (the
// all-reduced values are not copied back) while it is planted; "skip_offload_copy_back" skips
// offload's host->device copy of the updated partition (zero12_offload.cpp); "unit_hooks" makes
// the gradient hooks fire in the order of per-unit autograd edges (the root unit's LM head and
// final norm after every block: the IPG buckets are then packed unlike DeepSpeed's);
// "cpp_scalar_mul" multiplies an all-reduced bucket by 1/W with ATen's C++ mul_(Scalar)
// (reduce_scatter false; zero12_reduce.cpp); "" plants nothing. The check must fail. A zerobench
// process (crossval's side) plants ZEROBENCH_TEST_ZERO12_PLANT's value when the engine is built.
void plant_fault(const std::string& fault);
}  // namespace zb::backends::zero12
