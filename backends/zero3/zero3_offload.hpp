// zero3_offload.hpp — ZeRO3-mode's offload (zero_optimization.offload_optimizer / offload_param,
// device cpu) in closed form: which model-state bytes live on the host, and the host<->device
// traffic of one optimizer step, both derived from DeepSpeed 0.19.8's code (the engine's data path
// is zero3_offload.cpp; docs/backends/zero3.md "Offload" has the formulas).
// Owns: those pure functions. Must not: allocate or copy tensors.
// Upstream: deepspeed/runtime/zero/stage3.py (_configure_offloading, _setup_for_real_optimizer,
// _create_fp32_partitions, initialize_optimizer_states, partition_grads,
// _offload_grad_partition_at_boundary, _reassign_or_swap_out_partitioned_parameters),
// partition_parameters.py (all_gather_coalesced: `ds_tensor.to(device)` before every all-gather).
#pragma once
#include "backends/common/host_offload.hpp"
#include "backends/engine.hpp"
#include "backends/zero3/zero3_layout.hpp"

namespace zb::backends::zero3 {

// Moves what offload keeps on the host out of the device categories of `all` (every category
// counted as if on the device): offload_param the model-dtype partitions (`partition_bytes` of
// params), offload_optimizer the fp32 masters, the gradient partitions plus the fp32 gradient
// buffers (`grad32_bytes`), and the optimizer states. host.pinned: any host buffer pinned
// (the partitions always, stage3.py; the gradient buffers with offload_optimizer.pin_memory).
ModelStateBytes split_offloaded(const ModelStateBytes& all, const Zero3Options& o, int64_t partition_bytes,
                                int64_t grad32_bytes);

// The host<->device copies of one optimizer step on `rank` made by offload_optimizer (per
// gradient partition holding real data, per micro-batch: one device->host and one host->device
// copy of its real elements in grad_accum_dtype; at the boundary micro-batch one device->host
// copy of them in fp32) and by the copy of the updated fp32 masters into the partitions (one
// per sub-group: host->device in the model dtype with offload_optimizer alone, device->host in
// fp32 with offload_param alone, none with both). The fetches of offload_param are not in it:
// each all-gather copies its parameters' partitions host->device (model dtype), which is
// param_fetch_traffic of the all-gathers' input.
common::OffloadTraffic expected_step_traffic(const EngineSpec& spec, const Topology& topo, int rank);

}  // namespace zb::backends::zero3
