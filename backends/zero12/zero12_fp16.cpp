// zero12_fp16.cpp — the ZeRO-1/2 engine under precision fp16 (zero12_engine_impl.hpp): DeepSpeed's
// loss scaling as DeepSpeedZeroOptimizer runs it.
// Upstream (deepspeed/runtime/zero/stage_1_and_2.py, DeepSpeed 0.19.8):
//   __init__              self.loss_scaler = CreateLossScaler(dtype, static_loss_scale, dynamic_scaling,
//                         dynamic_loss_args) (runtime/fp16/loss_scaler.py), from the `fp16` section
//                         (runtime/precision_config.py DeepSpeedFP16Config.dynamic_loss_scale_args)
//   backward              engine.py backward: loss / gas, then the optimizer's scale_if_loss: * cur_scale
//   step                  check_overflow -> has_overflow (check_grad_overflow: engine.py
//                         _configure_zero_optimizer passes True for fp16): has_overflow_partitioned_
//                         grads_serial over averaged_gradients, the flag as a byte all-reduced with MAX;
//                         the norm (is_invalid_grad_norm also overflows); prev_scale = loss_scale;
//                         _update_scale(overflow) -> loss_scaler.update_scale; on overflow
//                         _global_grad_norm = inf, zero_grad(set_to_none=True), the averaged gradients
//                         dropped, return (no optimizer step: AdamW's counters do not move); else
//                         _global_grad_norm = scaled norm / prev_scale
//   unscale_and_clip_grads  returns when clip_grad == 0 and loss_scale == 1; else combined_scale =
//                         loss_scale (the scale AFTER _update_scale), times clamp(((norm / loss_scale)
//                         + 1e-6) / clip_grad, min=1) when clipping; grad.mul_(1. / combined_scale)
// engine.py _take_model_step: an overflowed step counts in skipped_steps and does not step the LR
// scheduler (bench/run/trainer.cpp follows that from LossScaleStep::skipped).
// bf16/fp32 runs make no scaler (CreateLossScaler gives them a static scale of 1 that never moves);
// a step they skip on overflow is recorded as skipped with that scale (update_scale).
// Must not: scale or unscale anything for bf16/fp32 runs.
#include <limits>

#include "backends/deepspeed_family/planted_overflow.hpp"
#include "backends/zero12/zero12_engine_impl.hpp"

namespace zb::backends::zero12 {

void Zero12Engine::init_fp16() {
  planted_inf_ = deepspeed_family::PlantedOverflows::from_env().at;  // test-only (planted_overflow.hpp); any precision
  if (!fp16()) return;
  scaler_ = std::make_unique<common::LossScaler>(common::LossScaler::deepspeed(opts_.fp16));
}

// Test-only: an inf into this rank's first averaged gradient before step `optimizer_steps_`'s
// overflow check, so the overflow is local to one rank and must reach the others through
// has_overflow's all-reduce.
void Zero12Engine::plant_overflow(std::vector<at::Tensor>& grads) const {
  for (const auto& [step, rank] : planted_inf_)
    if (step == optimizer_steps_ && rank == comm_.rank() && !grads.empty() && grads.front().numel() > 0)
      grads.front().view(-1).narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
}

void Zero12Engine::update_scale(bool overflow) {
  scale_step_ = {};
  if (!scaler_) {
    // bf16 / fp32: CreateLossScaler gives LossScaler(1.0), whose update_scale does nothing; step()
    // still returns on overflow (bf16: has_overflow; both: is_invalid_grad_norm), and engine.py
    // _take_model_step counts it in skipped_steps without stepping the LR scheduler. Only such a
    // step carries a record (a static scale of 1 that never moves), so a run without overflow
    // reports no loss scale at all.
    ++optimizer_steps_;
    if (!overflow) return;
    scale_step_.enabled = true;
    scale_step_.kind = "static";
    scale_step_.scale = scale_step_.next_scale = 1.0;
    scale_step_.overflow = scale_step_.skipped = true;
    return;
  }
  scale_step_.enabled = true;
  scale_step_.kind = opts_.fp16.loss_scale > 0 ? "static" : "dynamic";
  scale_step_.scale = scaler_->scale();
  scale_step_.overflow = overflow;
  ++optimizer_steps_;
  scaler_->update(overflow);  // DeepSpeed raises at the minimum scale: the run ends with its message
  scale_step_.next_scale = scaler_->scale();
  // step() returns on overflow whatever the scaler (a static LossScaler too).
  scale_step_.skipped = overflow;
}

at::Tensor Zero12Engine::unscale_and_clip_factor(const at::Tensor& scaled_norm) const {
  const double scale = loss_scale();
  at::Tensor combined = at::full({}, scale, scaled_norm.options());
  if (spec_.train.grad_clip > 0) combined = at::clamp(((scaled_norm / scale) + 1e-6) / spec_.train.grad_clip, 1.0) * scale;
  return 1.0 / combined;
}

}  // namespace zb::backends::zero12
