// loss_scaler.hpp — fp16 loss scaling as the two frameworks run it (issue 24):
//  - DeepSpeed's DynamicLossScaler (deepspeed/runtime/fp16/loss_scaler.py, created by
//    CreateLossScaler in runtime/zero/stage3.py and stage_1_and_2.py from the `fp16` section:
//    runtime/precision_config.py DeepSpeedFP16Config.dynamic_loss_scale_args) and its static
//    LossScaler (`fp16.loss_scale` > 0);
//  - torch's GradScaler update (torch/amp/grad_scaler.py GradScaler.update → the
//    `_amp_update_scale_` kernel; FSDP's ShardedGradScaler, torch/distributed/fsdp/
//    sharded_grad_scaler.py, inherits it), accelerate's `mixed_precision: fp16` with FSDP.
// Owns: the scale's state machine — what the scale is, and how an overflow (a non-finite
// gradient anywhere, all ranks agreeing) moves it; the step is skipped on overflow in both.
// Must not: find the overflow (the engine reduces its own flag) or touch gradients.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace zb::backends::common {

// DeepSpeed's `fp16` section, defaults as DeepSpeedFP16Config's.
struct DeepSpeedLossScaleOptions {
  double loss_scale = 0;  // 0: dynamic; > 0: a static scale (LossScaler)
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;  // DynamicLossScaler's delayed_shift
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
};

// The `fp16` section's loss-scaling keys, as DeepSpeed names them (resolved options, crossval).
nlohmann::json to_json(const DeepSpeedLossScaleOptions& o);

// torch.amp.GradScaler's constructor defaults (ShardedGradScaler's too).
struct GradScalerOptions {
  double init_scale = 65536.0;  // 2**16
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  // DeepSpeed's: DynamicLossScaler when opts.loss_scale == 0, else the static LossScaler.
  static LossScaler deepspeed(const DeepSpeedLossScaleOptions& opts);
  // DeepSpeed's FP16_UnfusedOptimizer scale (runtime/fp16/unfused_optimizer.py _update_scale,
  // LossScaleConfig with the UNFUSED profile; ZeRO stage 0 with a torch optimizer): dynamic when
  // opts.loss_scale == 0 — 2**initial_scale_power, halved on overflow down to min_loss_scale (no
  // hysteresis, no error at the minimum), doubled after loss_scale_window clean steps — else static.
  static LossScaler deepspeed_unfused(const DeepSpeedLossScaleOptions& opts);
  static LossScaler grad_scaler(const GradScalerOptions& opts);

  double scale() const { return scale_; }
  // After a step's gradients are known: `overflow` = some gradient is inf/NaN on some rank. The
  // step is skipped exactly when overflow (dynamic scalers; a static scale never skips).
  // DeepSpeed at its minimum scale with hysteresis spent throws (raise_error_at_min_scale=True,
  // "Current loss scale already at minimum - cannot decrease scale anymore").
  void update(bool overflow);
  bool dynamic() const { return kind_ != Kind::kStatic; }
  nlohmann::json state() const;  // for reports: kind, scale and the counters
  std::string kind_name() const;

 private:
  enum class Kind { kStatic, kDeepSpeed, kGradScaler, kDeepSpeedUnfused } kind_ = Kind::kStatic;
  double scale_ = 1;
  // DeepSpeed
  int64_t cur_iter_ = 0, last_overflow_iter_ = -1, scale_window_ = 1000;
  int delayed_shift_ = 2, cur_hysteresis_ = 2;
  bool consecutive_hysteresis_ = false;
  double min_scale_ = 1;
  // GradScaler
  GradScalerOptions gs_;
  int64_t growth_tracker_ = 0;
};

}  // namespace zb::backends::common
