// sharded_grad_scaler.hpp — torch's ShardedGradScaler (torch/distributed/fsdp/sharded_grad_scaler.py,
// a torch.amp.GradScaler, torch/amp/grad_scaler.py) as accelerate drives it with FSDP1/FSDP2 under
// `mixed_precision: fp16` (accelerator.py: `self.scaler = ShardedGradScaler(**kwargs)`, kwargs from
// GradScalerKwargs: none by default, so torch's defaults), step by step:
//   accelerator.backward        scaler.scale(loss / gas).backward()  -> scale()
//   accelerator.clip_grad_norm_ unscale_gradients() first            -> unscale_()
//   AcceleratedOptimizer.step   scaler.step(opt) skips on found_inf; scaler.update()  -> update()
// Owns: the fp32 scale tensor's value (LossScaler::grad_scaler), the per-rank found_inf from
// `_amp_foreach_non_finite_check_and_unscale_`, its all-reduce over the world (SUM, counted), and
// what the step did (LossScaleStep). Must not: clip, step the optimizer or zero gradients (the
// engine does, skipping its step when unscale_ says so).
// Belongs to the PyTorch-FSDP family (backends/fsdp_family/), used by fsdp, fsdp2.
#pragma once
#include <ATen/ATen.h>

#include <vector>

#include "backends/common/comm.hpp"
#include "backends/common/loss_scaler.hpp"
#include "backends/engine.hpp"

namespace zb::backends::fsdp_family {

class ShardedGradScaler {
 public:
  explicit ShardedGradScaler(const common::GradScalerOptions& o = {}) : scaler_(common::LossScaler::grad_scaler(o)) {}

  double scale() const { return scaler_.scale(); }
  // unscale_: inv_scale = scale.double().reciprocal().float(); every gradient of this rank
  // multiplied by it, found_inf set where any is inf/NaN (per dtype group, as _unscale_grads_
  // groups by device and dtype); then `dist.all_reduce(found_inf)` over the world. True when some
  // rank found one: the optimizer step must be skipped (GradScaler._maybe_opt_step).
  // `dtensor_mesh`: FSDP2's gradients are DTensors, whose dispatch of the unscale op
  // (torch/distributed/tensor/_dispatch.py found_inf_reduce_handler) first all-reduces each dtype
  // group's found_inf with MAX over the mesh (Partial("max") -> full_tensor()): pass the shard group.
  bool unscale_(const std::vector<at::Tensor>& grads, common::Comm& comm, const runtime::World* dtensor_mesh = nullptr);
  // update(): _amp_update_scale_ with the all-reduced found_inf; records the step.
  void update();
  LossScaleStep last_step() const { return last_; }

 private:
  common::LossScaler scaler_;
  bool found_inf_ = false;
  double scale_at_unscale_ = 1;
  LossScaleStep last_;
};

}  // namespace zb::backends::fsdp_family
