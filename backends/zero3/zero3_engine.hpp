// zero3_engine.hpp — the ZeRO3-mode engine (DeepSpeed ZeRO stage 3 semantics), "zero3".
// Owns: per-parameter partitions (each padded to a multiple of W) kept in the model dtype in
// one defragmented buffer; fp32 master partitions per sub-group (_create_fp32_partitions);
// fetch/release per module (each Linear/Embedding/Norm weight) with coalesced all-gathers; a
// trace of module order recorded in the first micro-batch and used afterwards for prefetch
// (stage3_prefetch_bucket_size, stage3_max_live_parameters) and release
// (stage3_max_reuse_distance); persistent parameters (numel <= stage3_param_persistence_
// threshold) never released and re-gathered after each step; gradients copied into a reduce
// bucket in communication_data_type, divided by W and reduce-scattered (coalesced) when the
// bucket fills and at the end of backward, accumulated into the gradient partition in
// grad_accum_dtype; at the step fp32 gradients per sub-group, clipping, AdamW on the fp32
// master, copy back to the model-dtype partition.
// Precisions: bf16 (the DeepSpeed behaviour above) and fp32 (everything fp32, exactness tests).
// Upstream: deepspeed/runtime/zero/stage3.py (_create_fp16_sub_groups, _create_fp32_partitions,
// __add_grad_to_ipg_bucket, __reduce_and_partition_ipg_grads, _optimizer_step, _post_step),
// partition_parameters.py (_partition_param, all_gather_coalesced), partitioned_param_
// coordinator.py (fetch_sub_module, release_sub_module, __params_to_release, trace),
// comm/coalesced_collectives.py (reduce_scatter_coalesced), zero/config.py (defaults).
#pragma once
#include "backends/engine.hpp"
#include "backends/topology.hpp"
#include "backends/zero3/zero3_options.hpp"

namespace zb::backends::zero3 {
BackendInfo backend_info();
// BackendInfo::training.expected_bytes (zero3_engine.cpp) and estimate_peak (zero3_estimate.cpp).
ModelStateBytes expected_bytes(const EngineSpec& spec, const Topology& topo, int rank);
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo);
}  // namespace zb::backends::zero3
