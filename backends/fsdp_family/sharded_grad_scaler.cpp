// sharded_grad_scaler.cpp — see sharded_grad_scaler.hpp. Upstream: torch 2.11
// torch/distributed/fsdp/sharded_grad_scaler.py (ShardedGradScaler.unscale_, _unscale_grads_,
// update) and torch/amp/grad_scaler.py (GradScaler.scale, step/_maybe_opt_step, update).
#include "backends/fsdp_family/sharded_grad_scaler.hpp"

#include <map>

namespace zb::backends::fsdp_family {

bool ShardedGradScaler::unscale_(const std::vector<at::Tensor>& grads, common::Comm& comm,
                                 const runtime::World* dtensor_mesh) {
  at::NoGradGuard no_grad;
  const auto device = comm.world().device;
  scale_at_unscale_ = scaler_.scale();
  // GradScaler.unscale_: inv_scale = self._scale.double().reciprocal().float();
  // found_inf = torch.full((), 0.0, dtype=torch.float32, device=self._scale.device).
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  const auto inv_scale = at::full({}, scale_at_unscale_, at::TensorOptions().dtype(at::kDouble).device(device))
                             .reciprocal()
                             .to(at::kFloat);
  auto found_inf = at::zeros({}, opts);
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;  // _unscale_grads_: per device and dtype
  for (const auto& g : grads)
    if (g.defined() && g.numel() > 0) by_dtype[g.scalar_type()].push_back(g);
  for (auto& [dtype, group] : by_dtype) {
    at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf, inv_scale);
    if (dtensor_mesh && dtensor_mesh->size > 1) {  // found_inf_reduce_handler: Partial("max").full_tensor()
      auto f = found_inf.view({1});
      comm.all_reduce_async(f, c10d::ReduceOp::MAX, "found_inf (DTensor)", dtensor_mesh).wait();
    }
  }
  // ShardedGradScaler.unscale_: dist.all_reduce(found_inf, group=self.process_group) (the world).
  auto flat = found_inf.view({1});
  comm.all_reduce_sum(flat, "found_inf");
  found_inf_ = flat.item<float>() != 0;
  return found_inf_;
}

void ShardedGradScaler::update() {
  last_ = {};
  last_.enabled = true;
  last_.kind = "grad_scaler";
  last_.scale = scale_at_unscale_;
  last_.overflow = found_inf_;
  last_.skipped = found_inf_;  // _maybe_opt_step: optimizer.step() only when no found_inf
  scaler_.update(found_inf_);
  last_.next_scale = scaler_.scale();
  found_inf_ = false;
}

}  // namespace zb::backends::fsdp_family
