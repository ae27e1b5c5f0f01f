// fsdp2_offload.hpp — FSDP2-mode's CPUOffloadPolicy(pin_memory) (torch 2.11
// _fully_shard/_fsdp_api.py CPUOffloadPolicy): the host side of one model's parameters.
// Owns: where an offloaded parameter's padded shard lives (_fsdp_param.py _init_sharded_param:
// `padded_sharded_param.cpu()`, `.pin_memory()` when pin_memory), the host->device copy of the
// shards for an all-gather (_fsdp_param.py FSDPParam.all_gather_inputs: `_sharded_param_data.to(
// device, non_blocking=True)`, then the cast to param_dtype; _fsdp_collectives.py
// _get_param_all_gather_inputs takes that path instead of its foreach copy when offload_to_cpu),
// the device->host copy of a reduced gradient shard (_fsdp_collectives.py foreach_reduce:
// `new_sharded_grad.to(torch.device("cpu"), non_blocking=pin_memory and not to_accumulate_grad)`,
// then `+=` into the host gradient when one exists), the count of what moved, and the closed
// forms of the bytes by location and of the traffic per step.
// Must not: pick streams or schedule anything (fsdp2_collectives.cpp / fsdp2_param_group.cpp run
// these calls on the streams upstream runs them on), or touch the optimizer (fsdp2_engine.cpp).
//
// On a CPU-only run the device is the CPU: the host shards are still separate host buffers and
// every copy still runs and is counted (common::HostCopies), so the data path and the traffic are
// those of a GPU run.
#pragma once
#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "backends/common/host_offload.hpp"
#include "backends/engine.hpp"
#include "backends/topology.hpp"

namespace zb::backends::fsdp2 {

class HostOffload {
 public:
  HostOffload() = default;
  HostOffload(bool pin_memory, at::Device device) : enabled_(true), pin_(pin_memory), device_(device) {}
  bool enabled() const { return enabled_; }
  bool pin_memory() const { return pin_; }

  // Options for a sharded parameter's padded storage: the host, page-locked on a CUDA run when
  // pin_memory (`.cpu().pin_memory()`).
  at::TensorOptions host_options(at::ScalarType dtype) const;

  // FSDPParam.all_gather_inputs with offload_to_cpu: each host shard copied to a fresh device
  // tensor (`.to(device, non_blocking=True)`), then cast to `param_dtype` when set
  // (_to_dtype_if_needed). Runs on the caller's current stream (the all-gather copy-in stream).
  std::vector<at::Tensor> all_gather_inputs(const std::vector<at::Tensor>& host_shards,
                                            std::optional<at::ScalarType> param_dtype);

  // foreach_reduce's post-reduce with offload_to_cpu: the reduced shard `device_grad` (this
  // rank's rows, sharded dtype) copied to the host. Without a host gradient yet it becomes it
  // (allocated pinned when pin_memory: `.to("cpu", non_blocking=True)` allocates page-locked
  // memory); with one (accumulating) it is copied to an ordinary host tensor and added in.
  void grad_to_host(at::Tensor& host_grad, const at::Tensor& device_grad);

  // Whether foreach_reduce's copy would be asynchronous (and the host synchronises on
  // grad_offload_event in finalize_backward) rather than blocking the host at once.
  bool grad_copy_non_blocking(bool accumulating) const { return pin_ && !accumulating; }

  const common::OffloadTraffic& traffic() const { return copies_.traffic(); }

 private:
  bool enabled_ = false, pin_ = true;
  at::Device device_{at::kCPU};
  common::HostCopies copies_;
};

// The closed form of what a CPUOffloadPolicy run keeps where is closed_form_bytes
// (fsdp2_layout.hpp, the backend's expected_bytes): nothing of the model states on the device; on
// the host the padded shards, this rank's unpadded gradient rows and two AdamW states over them.

// The closed form of one optimizer step's host<->device traffic for `rank`. Per micro-batch:
// one host->device copy per parameter for every all-gather issued from the sharded state — each
// group in forward, and again in backward for groups resharded after forward to True (an int N
// re-gathers from the device-resident post-forward shard; False and the root never re-gather)
// — of its padded shard in the sharded dtype. Per synchronised micro-batch (the last, or every
// one with sync_each_batch): one device->host copy per parameter of its rows in the sharded dtype.
common::OffloadTraffic offload_traffic_per_step(const EngineSpec& spec, const Topology& topo, int rank);

// Test hook: a fault planted in an engine made by backend_info().training.create. "h2d_on_compute": the
// host->device copies of the all-gather inputs run on the compute stream instead of the copy-in
// stream (the stream-order test must catch it). "" removes it. No-op for other engines.
void plant_offload_fault(Engine& engine, const std::string& fault);

}  // namespace zb::backends::fsdp2
