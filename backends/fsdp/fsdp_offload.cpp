// fsdp_offload.cpp — see fsdp_offload.hpp (the upstream lines each function follows are cited there).
#include "backends/fsdp/fsdp_offload.hpp"

#include "backends/common/optim.hpp"

namespace zb::backends::fsdp {

FlatParamOffload::FlatParamOffload(int64_t local_numel, at::ScalarType dtype, at::Device device) : device_(device) {
  // init_flat_param_attributes: `_local_shard.pin_memory()`, `zeros_like(_local_shard).pin_memory()`.
  params_ = common::host_empty({local_numel}, dtype, /*pin=*/true, device).zero_();
  grads_ = common::host_empty({local_numel}, dtype, /*pin=*/true, device).zero_();
}

at::Tensor FlatParamOffload::shard_to_device(const at::Tensor& host_shard) {
  auto d = at::empty(host_shard.sizes(), at::TensorOptions().dtype(host_shard.scalar_type()).device(device_));
  copies_.to_device(d, host_shard);
  return d;
}

void FlatParamOffload::shard_into(const at::Tensor& device_dst, const at::Tensor& host_shard) {
  copies_.to_device(device_dst, host_shard);
}

void FlatParamOffload::grad_to_host(int64_t offset, const at::Tensor& device_grad) {
  if (skip_grad_copy_) return;
  copies_.to_host(grads_.narrow(0, offset, device_grad.numel()), device_grad);
}

at::Tensor FlatParamOffload::clip_grad_norm_(const std::vector<at::Tensor>& host_grads, double max_norm,
                                             common::Comm& comm, bool replicated, const runtime::World* group) {
  at::NoGradGuard no_grad;
  // all_no_shard: torch.nn.utils.clip_grad_norm_ over the (host) gradients; no collective, no copy.
  if (replicated) return common::torch_clip_grad_norm_(host_grads, max_norm);
  const auto fp32_device = at::TensorOptions().dtype(at::kFloat).device(device_);
  at::Tensor total;
  if (host_grads.empty()) {
    total = at::zeros({}, fp32_device);  // _get_grad_norm returns the device's _zero_scalar
  } else {
    // _get_grad_norm: vector_norm(stack([vector_norm(g, 2, dtype=fp32)])) over the host
    // gradients, then `grad_norm.to(device=device)`.
    std::vector<at::Tensor> norms;
    norms.reserve(host_grads.size());
    for (const auto& g : host_grads) norms.push_back(at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat));
    const auto local = at::linalg_vector_norm(at::stack(norms), 2, c10::nullopt, false, at::kFloat);
    total = at::empty({}, fp32_device);
    copies_.to_device(total, local);
  }
  total = total.pow(2);  // local_sharded_norm ** norm_type
  auto flat = total.view({1});
  comm.all_reduce_sum(flat, "grad_norm", group);
  total = total.pow(0.5);
  // `if self.cpu_offload.offload_params: total_norm = total_norm.cpu()` (a blocking copy into
  // pageable memory).
  auto host_total = common::host_empty({}, at::kFloat, /*pin=*/false, device_);
  copies_.to_host(host_total, total);
  if (max_norm > 0) {
    auto coef = at::clamp(max_norm / (host_total + 1e-6), c10::nullopt, 1.0);
    for (const auto& g : host_grads) {
      auto g_mut = g;
      g_mut.mul_(coef.to(g.device(), g.scalar_type()));
    }
  }
  return host_total;
}

HostStateBytes FlatParamOffload::host_bytes(int64_t optimizer_bytes) const {
  HostStateBytes h;
  h.params = int64_t(params_.nbytes());
  h.grads = int64_t(grads_.nbytes());
  h.optimizer = optimizer_bytes;
  h.pinned = true;  // FSDP1 pins _local_shard and _cpu_grad (AdamW's states are pageable; docs/backends/fsdp.md)
  return h;
}

}  // namespace zb::backends::fsdp
