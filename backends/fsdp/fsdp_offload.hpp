// fsdp_offload.hpp — FSDP-mode's CPUOffload(offload_params=True) data path, as FSDP1 runs it
// (torch/distributed/fsdp/_flat_param.py, _runtime_utils.py, fully_sharded_data_parallel.py).
// Owns: the host buffers — every unit's sharded flat parameter (`flat_param._local_shard`,
// pinned) and its sharded gradient (`flat_param._cpu_grad`, pinned, zeros at init), one
// contiguous buffer each — the counted copies between them and the device (common::HostCopies),
// and clip_grad_norm_ over host gradients (the norm's two scalar copies). Must not: decide when a
// copy happens or on which stream (fsdp_engine.cpp does, at the points FSDP1 does: pre_unshard on
// the pre-unshard stream, _offload_grad on the post-backward / all-reduce stream, the host sync in
// _post_backward_final_callback), or know the unit layout beyond the offsets it is given.
//
// What FSDP1 does with offload_params (torch 2.11):
//  - init_flat_param_attributes: `_local_shard = flat_param.data.pin_memory()` (the flat shard,
//    padding included, in the flat-parameter dtype) and `_cpu_grad = zeros_like(_local_shard,
//    device=cpu).pin_memory()`; the optimizer is built over the host shards, so AdamW's
//    exp_avg / exp_avg_sq (zeros_like) live on the host too (not pinned).
//  - pre_unshard: with offload it never skips: `_use_low_precision_shard` (mixed:
//    `_mp_shard.copy_(_local_shard.to(device, non_blocking=True))`) or `flat_param_to(device,
//    non_blocking=True)` — a new device tensor, the all-gather's input.
//  - _offload_grad: `_cpu_grad.copy_(grad_to_offload, non_blocking=uses_sharded_strategy)`.
//  - clip_grad_norm_: the local norm over the host gradients `.to(compute_device)`, all-reduced
//    there, then `total_norm.cpu()` (fully_sharded_data_parallel.py, _get_grad_norm).
// On a CPU-only run the device is the CPU: the buffers are separate CPU tensors and every copy
// still runs and is counted (backends/common/host_offload.hpp).
#pragma once
#include <ATen/ATen.h>

#include <vector>

#include "backends/common/comm.hpp"
#include "backends/common/host_offload.hpp"
#include "backends/engine.hpp"

namespace zb::backends::fsdp {

class FlatParamOffload {
 public:
  // Host buffers for `local_numel` elements of `dtype` (every unit's shard, contiguous), pinned
  // on a CUDA `device`; both zero-filled (the shard's padding stays zero).
  FlatParamOffload(int64_t local_numel, at::ScalarType dtype, at::Device device);

  // Every unit's `_local_shard`, contiguous [local_numel]: the optimizer's parameters.
  const at::Tensor& host_params() const { return params_; }
  // A unit's `_cpu_grad` [numel] at `offset` of the contiguous gradient buffer.
  at::Tensor host_grad(int64_t offset, int64_t numel) const { return grads_.narrow(0, offset, numel); }

  // pre_unshard: `host_shard` copied to a new device tensor of its dtype (flat_param_to /
  // `_local_shard.to(device)`), on the caller's current stream.
  at::Tensor shard_to_device(const at::Tensor& host_shard);
  // The same copy into an existing device tensor of the same size and dtype.
  void shard_into(const at::Tensor& device_dst, const at::Tensor& host_shard);
  // _offload_grad: `_cpu_grad[offset : offset + numel].copy_(device_grad)` on the current stream.
  void grad_to_host(int64_t offset, const at::Tensor& device_grad);

  // FullyShardedDataParallel.clip_grad_norm_ with cpu_offload.offload_params: the same arithmetic
  // as common::fsdp1_clip_grad_norm_ (bitwise the same value), with the local norm copied to the
  // device for the all-reduce and the total copied back before the host gradients are scaled.
  // `replicated` (every handle NO_SHARD): torch's clip_grad_norm_ on the host gradients, no copy.
  at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& host_grads, double max_norm, common::Comm& comm,
                             bool replicated, const runtime::World* group);

  // Host bytes by category: the shards, their gradients and `optimizer_bytes` of AdamW states.
  HostStateBytes host_bytes(int64_t optimizer_bytes) const;
  const common::OffloadTraffic& traffic() const { return copies_.traffic(); }

  // Test-only fault injection: grad_to_host does nothing (the planted fault the offload tests'
  // parity and traffic gates must catch).
  void plant_skip_grad_copy() { skip_grad_copy_ = true; }

 private:
  at::Device device_;
  at::Tensor params_, grads_;  // [local_numel] each, on the host
  common::HostCopies copies_;
  bool skip_grad_copy_ = false;
};

}  // namespace zb::backends::fsdp
