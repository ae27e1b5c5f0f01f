// fsdp2_engine.hpp — the FSDP2-mode engine (PyTorch `fully_shard` semantics), "fsdp2".
// Owns: per-parameter Shard(0) sharding with dim-0 padding to a multiple of the shard-group size
// (each rank holds ceil(dim0/S) rows of padded storage; its DTensor local tensor and its AdamW
// states cover only the rows it really owns, so ranks differ in bytes); parameter groups (one
// per fully_shard call: each decoder block and the root, or accelerate 1.15's embedding / blocks
// / [final norm, LM head] carving); per group: foreach copy-in (cast to param_dtype) into this
// rank's slot of one all-gather output, one all-gather, split-with-sizes copy-out into each
// parameter's unsharded buffer, reshard (storage freed) after forward (True / False / to a
// smaller post-forward group of N ranks), implicit backward prefetch in reverse post-forward
// order, explicit forward/backward prefetch lists, post-backward on the module inputs' gradient,
// chunk-cat of the group's gradients into one reduce-scatter input in reduce_dtype, reduce-
// scatter (and the HSDP all-reduce across replicas) with _get_gradient_divide_factors' ops,
// gradients accumulated into the sharded dtype and freed every step, set_requires_gradient_sync
// for non-final micro-batches (unsharded gradients held meanwhile), MixedPrecisionPolicy
// (param_dtype / reduce_dtype / output_dtype). Precisions:
//   fp32   everything fp32 (exactness tests)
//   low    the model loaded in bf16 and sharded as is: bf16 shards, all-gather, gradients, AdamW
//   mixed  accelerate: bf16-loaded weights upcast to fp32 shards, MixedPrecisionPolicy(param_dtype
//          bf16, reduce_dtype bf16, output_dtype bf16) unless --reduce-dtype / --output-dtype say
//          otherwise; fp32 sharded gradients and AdamW
// Upstream (torch 2.11 torch/distributed/fsdp/_fully_shard/): _fsdp_param.py (FSDPParam
// _init_sharded_param, init_dtype_attrs, to_sharded_post_forward, accumulate_unsharded_grad_if_
// needed), _fsdp_param_group.py (unshard, wait_for_unshard, reshard, pre_forward, post_forward,
// pre_backward, post_backward, _backward_prefetch, finalize_backward), _fsdp_collectives.py
// (foreach_all_gather, foreach_all_gather_copy_out, foreach_reduce, _get_gradient_divide_factors),
// _fsdp_state.py (_root_pre_forward, _lazy_init, _pre_forward, _post_forward, _pre_backward,
// _root_post_backward_final_callback), _fully_shard.py (set_requires_gradient_sync,
// set_modules_to_forward_prefetch, set_modules_to_backward_prefetch), _fsdp_init.py
// (_get_post_forward_mesh_info); accelerate 1.15 utils/fsdp_utils.py fsdp2_prepare_model,
// utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision, accelerator.py no_sync.
// Must not: know the model's math (models/) or how the trainer loops (bench/).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "backends/engine.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "backends/topology.hpp"

namespace zb::backends::fsdp2 {

BackendInfo backend_info();
// BackendInfo::training.estimate_peak (fsdp2_estimate.cpp; expected_bytes is fsdp2_layout.hpp's closed_form_bytes).
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo);

// Test and profiling hook, called with the group index (forward order), its label and the bytes
// its unsharded buffers hold right after the event. Events: "unshard" (all-gather issued),
// "wait_for_unshard" (copied out), "reshard", "reshard_post_forward", "post_forward",
// "pre_backward", "post_backward", "reduce_scatter" (issued), "post_reduce" (sharded gradient
// accumulated).
using Fsdp2Observer =
    std::function<void(const std::string& event, int group, const std::string& label, int64_t unsharded_bytes)>;
// Installs an observer on an engine created by backend_info().training.create (no-op for others).
void set_observer(Engine& engine, Fsdp2Observer observer);

// Parameter-group labels in forward (= module registration) order for `spec`: "unit0" (the root
// of the root grouping), "embed", "unit<u>" (block u), "tail" ([final norm, LM head]), "root"
// (accelerate's root when it holds the blocks). Groups without parameters are not listed.
std::vector<std::string> group_labels(const EngineSpec& spec);

}  // namespace zb::backends::fsdp2
