// zero0_engine.hpp — DeepSpeed ZeRO stage 0 as DeepSpeed 0.19.8's DeepSpeedEngine runs it without a
// ZeRO optimizer, registered as "zero0".
// Owns: every parameter whole on every rank in the model dtype (rank 0's broadcast:
// _broadcast_model), gradients accumulated in it across micro-batches, and at the boundary the
// engine's all-reduce (allreduce_gradients -> buffered_allreduce_fallback: module.parameters()
// order, buckets of MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements closed once they exceed it; each
// bucket flattened, cast to communication_data_type, summed, then multiplied by 1/W: postscale,
// gradient_predivide_factor 1.0). The step, by precision (engine.py _do_optimizer_sanity_check /
// _configure_optimizer; data_types.grad_accum_dtype must equal the model dtype, else DeepSpeed
// raises NotImplementedError):
//   fp32       the basic optimizer on the parameters themselves (no wrapper); with
//              gradient_clipping > 0 clip_fp32_gradients: runtime/utils.py clip_grad_norm_
//              (per-parameter fp32 norms stacked, squared, summed, ** 0.5, times 1/W and
//              all-reduced, every gradient times min(1, clip / (norm + 1e-6)));
//   bf16/fp16  FP16_UnfusedOptimizer (runtime/fp16/unfused_optimizer.py; the client
//              torch.optim.AdamW is not FusedAdam): fp32 master copies per parameter, one
//              optimizer.step() on zero gradients at construction (initialize_optimizer_states:
//              AdamW's step counters start at 1, weight decay once at the constructed lr); the
//              step: local overflow check, get_weight_norm (fp32 sum of squared per-gradient
//              norms, ** 0.5 in double), get_global_norm, _update_scale, fp32 copies of the
//              gradients times 1 / combined_scale (clip folded in), AdamW on the masters, masters
//              copied into the model. The loss is not multiplied by the scale in backward
//              (engine.py backward scales only for a ZeROOptimizer); the scale (fp16: the
//              UNFUSED profile's dynamic scale, no hysteresis) divides the gradients in the step.
// Upstream: deepspeed/runtime/engine.py (allreduce_gradients, buffered_allreduce_fallback,
// allreduce_bucket, _take_model_step, clip_fp32_gradients), runtime/utils.py, runtime/fp16/.
#pragma once
#include "backends/engine.hpp"
#include "backends/shard_layout.hpp"

namespace zb::backends::zero0 {
BackendInfo backend_info();
// BackendInfo::training.expected_bytes (zero0_engine.cpp) and estimate_peak (zero0_estimate.cpp).
ModelStateBytes expected_bytes(const EngineSpec& spec, const Topology& topo, int rank);
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo);
// Nothing sharded: every rank a replica of the world (as ddp's).
ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo);
// The engine's all-reduce buckets over parameter numels in module order: [begin, end) index
// ranges, each closed once its numel exceeds `elements` (allreduce_no_retain).
std::vector<std::pair<int, int>> allreduce_buckets(const std::vector<int64_t>& numels, int64_t elements);
inline constexpr int64_t kAllreduceBucketElements = 500000000;  // engine.py MEMORY_OPT_ALLREDUCE_SIZE
}  // namespace zb::backends::zero0
