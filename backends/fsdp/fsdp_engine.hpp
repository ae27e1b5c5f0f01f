// fsdp_engine.hpp — the FSDP-mode engine (PyTorch FSDP1 / FlatParameter semantics), "fsdp".
// Owns: one flat parameter per unit (transformer auto-wrap: the root = embedding + final
// norm + LM head, then one per decoder block; NO_WRAP: the root alone, holding every parameter —
// fsdp_wrap.hpp), padded to a multiple of the shard group and
// chunked; unshard (all-gather) before forward, reshard (storage really freed) after it under
// FULL_SHARD, re-gather before backward, reduce-scatter with FSDP's pre/post divide factors,
// gradient accumulation into the sharded gradient, NO_SHARD and HYBRID_SHARD, backward and
// forward prefetch. Precisions (the blog's Table 2):
//   fp32   flat shard, compute, gradients and AdamW all fp32 (exactness tests)
//   low    flat shard bf16, all-gather bf16, gradients bf16, AdamW states bf16
//   mixed  flat shard upcast to fp32, cast to bf16 (_mp_shard) and all-gathered in bf16,
//          gradients reduced in reduce_dtype (default bf16) and kept fp32, AdamW fp32
// Upstream: torch/distributed/fsdp/_flat_param.py (flatten, _get_shard, _mp_shard,
// _full_param_padded), _runtime_utils.py (_pre_forward, _post_forward_reshard,
// _pre_backward_hook, _post_backward_hook: reshard -> prefetch -> reduce, _should_free_in_backward,
// _cast_grad_to_param_dtype, _post_backward_final_callback), _init_utils.py (divide factors).
#pragma once
#include <functional>

#include "backends/engine.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "backends/topology.hpp"

namespace zb::backends::fsdp {

BackendInfo backend_info();
// BackendInfo::training.expected_bytes (fsdp_engine.cpp) and estimate_peak (fsdp_estimate.cpp).
ModelStateBytes expected_bytes(const EngineSpec& spec, const Topology& topo, int rank);
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo);
// The ranks a unit's FlatParameter is sharded over (BackendInfo::training.shard_layout) are in
// fsdp_layout.hpp: shard_layout(spec, topo).shard_size.

// Test and profiling hook: called at unshard, reshard_begin, reshard, post_forward,
// pre_backward and post_backward
// with the unit and the bytes its unsharded buffer holds right after the event.
using FsdpObserver = std::function<void(const std::string& event, int unit, int64_t unsharded_bytes)>;
// Installs an observer on an engine created by backend_info().training.create (no-op for others).
void set_observer(Engine& engine, FsdpObserver observer);
// Test-only: with offload_params, the gradient copy back to the host is skipped (a planted fault,
// tests/test_fsdp_offload.cpp). No-op for other engines or without offload.
void plant_skip_grad_copy(Engine& engine);

}  // namespace zb::backends::fsdp
