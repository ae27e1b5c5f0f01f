// zero3_fp16.cpp — the ZeRO3-mode engine under precision fp16 (zero3_engine_impl.hpp): DeepSpeed's
// loss scaling as DeepSpeedZeroOptimizer_Stage3 runs it.
// Upstream (deepspeed/runtime/zero/stage3.py, DeepSpeed 0.19.8):
//   __init__              CreateLossScaler(dtype, static_loss_scale, dynamic_scaling, dynamic_loss_args)
//                         (runtime/fp16/loss_scaler.py), from the `fp16` section
//                         (runtime/precision_config.py DeepSpeedFP16Config.dynamic_loss_scale_args)
//   backward              engine.py backward: loss / gas, then scale_if_loss -> loss * cur_scale
//   step                  _overflow_check_and_loss_scale_update(update_scale=False) -> has_overflow;
//                         the norm (is_invalid_grad_norm also overflows);
//                         _loss_scale_update_and_overflow_cleanup: _update_scale(overflow), and on
//                         overflow _global_grad_norm = inf, _overflow_clean_up (zero_grad, the
//                         averaged gradients dropped / reset_cpu_buffers) and return: no optimizer
//                         step (the AdamW step counters do not move), no _post_step
//   has_overflow          isinf/isnan(grad_partitions_flat_buffer).any() on the reduce-and-
//                         partition stream, the flag as uint8 all-reduced with MAX over the dp group
//   unscale_and_clip_grads  one combined factor: loss_scale, times the clip factor computed from the
//                         scaled norm / loss_scale
// engine.py _take_model_step: an overflowed step counts in skipped_steps and does not step the LR
// scheduler (bench/run/trainer.cpp follows that from LossScaleStep::skipped).
// Must not: decide anything for bf16/fp32 runs (no scaler there: DeepSpeed creates none).
#include <cmath>
#include <limits>

#include "backends/deepspeed_family/planted_overflow.hpp"
#include "backends/zero3/zero3_engine_impl.hpp"

namespace zb::backends::zero3 {

void Zero3Engine::init_fp16() {
  if (!fp16()) return;
  scaler_ = std::make_unique<common::LossScaler>(common::LossScaler::deepspeed(opts_.fp16));
  planted_inf_ = deepspeed_family::PlantedOverflows::from_env().at;  // test-only (planted_overflow.hpp)
}

// has_overflow(partition_gradients=True): on the reduce-and-partition stream (whose work the
// end of backward already waited for), the local flag over the whole flat gradient buffer
// (padding included), then all_reduce(MAX) of a uint8 over the data-parallel group.
bool Zero3Engine::has_overflow() {
  at::NoGradGuard no_grad;
  for (const auto& [step, rank] : planted_inf_)
    if (step == optimizer_steps_ && rank == comm_.rank())
      grad_partitions_.narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
  const auto local = at::logical_or(grad_partitions_.isinf().any(), grad_partitions_.isnan().any());
  auto flag = local.to(at::TensorOptions().dtype(at::kByte).device(comm_.world().device)).view({1});
  auto pending = comm_.all_reduce_async(flag, c10d::ReduceOp::MAX, "overflow");
  pending.wait();
  return flag.item<uint8_t>() != 0;
}

// _loss_scale_update_and_overflow_cleanup, and what engine.py records for the step.
bool Zero3Engine::loss_scale_update_and_overflow_cleanup(bool overflow) {
  scale_step_ = {};
  scale_step_.enabled = true;
  scale_step_.kind = opts_.fp16.loss_scale > 0 ? "static" : "dynamic";
  scale_step_.scale = scaler_->scale();
  scale_step_.overflow = overflow;
  ++optimizer_steps_;
  scaler_->update(overflow);  // DeepSpeed raises at the minimum scale: the run ends with its message
  scale_step_.next_scale = scaler_->scale();
  // stage3.py skips on overflow whatever the scaler (a static LossScaler too: the check runs
  // for every fp16 optimizer).
  scale_step_.skipped = overflow;
  if (!overflow) return false;
  // _overflow_clean_up: zero_grad(set_to_none=True) and the averaged gradients dropped; the
  // next micro-batch's partition_grads copies into the partitions instead of adding.
  first_micro_batch_ = true;
  for (auto& n : param_grad_norms_) n = at::Tensor();  // offload: reset_cpu_buffers
  return true;
}

// unscale_and_clip_grads: combined_scale = loss_scale, times clamp(((norm / loss_scale) + 1e-6) /
// clip_grad, min=1) when clipping; the gradients are multiplied by 1 / combined_scale. The
// loss_scale here is the scaler's after its update (stage3.py step updates it first).
at::Tensor Zero3Engine::unscale_and_clip_factor(const at::Tensor& scaled_norm) const {
  const double scale = loss_scale();
  at::Tensor combined = at::full({}, scale, scaled_norm.options());
  if (spec_.train.grad_clip > 0) {
    auto clip = at::clamp(((scaled_norm / scale) + 1e-6) / spec_.train.grad_clip, 1.0);
    combined = clip * scale;
  }
  return 1.0 / combined;
}

}  // namespace zb::backends::zero3
