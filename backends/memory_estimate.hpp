// memory_estimate.hpp — the pre-flight estimate of one rank's peak memory: the terms every
// backend's estimate shares and the moments they are summed at (docs/metrics.md, "Pre-flight
// memory estimate"). Each built-in backend's own terms live in its folder
// (ddp/ddp_estimate.cpp, fsdp/fsdp_estimate.cpp, fsdp2/fsdp2_estimate.cpp,
// zero3/zero3_estimate.cpp, zero12/zero12_estimate.cpp) and reach the program through its
// BackendInfo::training.estimate_peak. Model states come from each backend's closed form; activations
// from models/activation_memory. Owns: the shared terms (model states, batches, RoPE tables,
// activations, the optimizer step's norm transient), the moments, PeakEstimate's sums and JSON.
// Must not: allocate or measure anything, or hold one backend's formulas.
#pragma once
#include "backends/engine.hpp"
#include "backends/shard_layout.hpp"
#include "models/activation_memory.hpp"

namespace zb::backends::estimate {

// The phases a term is held in (PeakEstimate::Term::phase). kResident: all step long;
// kFwdBwd: from forward to the end of the micro-batch's backward; the others are moments.
inline constexpr const char* kResident = "resident";
inline constexpr const char* kFwdBwd = "forward_backward";
inline constexpr const char* kLossHead = "loss_head";
inline constexpr const char* kBackward = "backward";
inline constexpr const char* kEndOfBackward = "end_of_backward";
inline constexpr const char* kOpt = "optimizer_step";
// ZeRO3-mode: the root's largest gradient (the LM head's), the first of backward, before any
// block's backward transients or bucket flush (zero3/zero3_estimate.cpp).
inline constexpr const char* kRootGradient = "root_gradient";

// What every engine holds during a step: its model states (the backend's closed form), the
// step's batches, the RoPE tables, and one micro-batch's activations. Returns the activations.
// `grads_set_to_none`: the engine frees its gradients after each optimizer step
// (zero_grad(set_to_none=True)) and makes them again in backward, so they are not held at the
// loss head; counted whole from a block's backward on (an upper bound while they fill).
// `gloo`: a CPU-only run; otherwise a GPU run, whose attention may differ (the varlen path of
// per-document batches in 16-bit, selective-op keeping SDPA's CUDA output).
models::ActivationMemory add_common(PeakEstimate& e, const EngineSpec& spec, const ModelStateBytes& states, int c,
                                    bool gloo, bool grads_set_to_none = false);

// The optimizer step's largest transient. AdamW is ATen's fused kernel (common/optim.cpp,
// at::_fused_adamw_): nothing full-size. The global norm (torch's clip_grad_norm_ / FSDP1's)
// takes one norm per gradient tensor: for bf16 gradients ATen's CPU reduction first makes an fp32
// copy of that tensor (4 bytes per element; tests/test_fsdp.cpp FsdpMemory.
// OptimizerStepAddsOnlyUpstreamsTransients), so the largest gradient tensor sets it; fp32
// gradients add only scalars.
void add_optimizer_transient(PeakEstimate& e, int64_t largest_grad_numel, int grad_bytes);

// An empty estimate for the run's shard layout, as the backend's engine builds its groups
// (BackendInfo::training.shard_layout): world, ranks per node, shard group.
PeakEstimate for_layout(const ShardLayout& l);

}  // namespace zb::backends::estimate
