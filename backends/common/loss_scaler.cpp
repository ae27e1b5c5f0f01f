// loss_scaler.cpp — see loss_scaler.hpp; each branch names the upstream lines it follows.
#include "backends/common/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace zb::backends::common {

nlohmann::json to_json(const DeepSpeedLossScaleOptions& o) {
  return {{"loss_scale", o.loss_scale},
          {"initial_scale_power", o.initial_scale_power},
          {"loss_scale_window", o.loss_scale_window},
          {"hysteresis", o.hysteresis},
          {"consecutive_hysteresis", o.consecutive_hysteresis},
          {"min_loss_scale", o.min_loss_scale}};
}

LossScaler LossScaler::deepspeed(const DeepSpeedLossScaleOptions& o) {
  LossScaler s;
  if (o.loss_scale > 0) {  // CreateLossScaler: LossScaler(scale=static_loss_scale)
    s.kind_ = Kind::kStatic;
    s.scale_ = o.loss_scale;
    return s;
  }
  // DynamicLossScaler(init_scale=2**initial_scale_power, scale_window, min_scale, delayed_shift,
  // consecutive_hysteresis): scale_factor 2, cur_iter 0, last_overflow_iter -1.
  s.kind_ = Kind::kDeepSpeed;
  s.scale_ = std::ldexp(1.0, o.initial_scale_power);
  s.scale_window_ = o.loss_scale_window;
  s.min_scale_ = o.min_loss_scale;
  s.delayed_shift_ = s.cur_hysteresis_ = o.hysteresis;
  s.consecutive_hysteresis_ = o.consecutive_hysteresis;
  return s;
}

LossScaler LossScaler::deepspeed_unfused(const DeepSpeedLossScaleOptions& o) {
  LossScaler s = deepspeed(o);
  if (s.kind_ == Kind::kDeepSpeed) s.kind_ = Kind::kDeepSpeedUnfused;  // LossScaleConfig(dynamic_loss_args=...)
  return s;
}

LossScaler LossScaler::grad_scaler(const GradScalerOptions& o) {
  LossScaler s;
  s.kind_ = Kind::kGradScaler;
  s.scale_ = double(float(o.init_scale));  // an fp32 tensor upstream
  s.gs_ = o;
  return s;
}

void LossScaler::update(bool overflow) {
  switch (kind_) {
    case Kind::kStatic:
      return;  // LossScalerBase.update_scale only logs
    case Kind::kDeepSpeed:
      // DynamicLossScaler.update_scale
      if (overflow) {
        if (delayed_shift_ == 1 || cur_hysteresis_ == 1) {
          if (scale_ == min_scale_)
            throw std::runtime_error(
                "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run. (DeepSpeed "
                "DynamicLossScaler, fp16.min_loss_scale " + std::to_string(min_scale_) + ")");
          scale_ = std::max(scale_ / 2.0, min_scale_);
        } else {
          --cur_hysteresis_;
        }
        last_overflow_iter_ = cur_iter_;
      } else {
        if (consecutive_hysteresis_) cur_hysteresis_ = delayed_shift_;
        const int64_t stable_interval = (cur_iter_ - last_overflow_iter_) - 1;
        if (stable_interval > 0 && stable_interval % scale_window_ == 0) {
          if (!consecutive_hysteresis_) cur_hysteresis_ = delayed_shift_;
          scale_ *= 2.0;
        }
      }
      ++cur_iter_;
      return;
    case Kind::kDeepSpeedUnfused: {
      // FP16_UnfusedOptimizer._update_scale (scale_factor 2.0, the UNFUSED profile's).
      if (overflow) {
        scale_ = std::max(scale_ / 2.0, min_scale_);
        last_overflow_iter_ = cur_iter_;
      } else {
        const int64_t stable_interval = (cur_iter_ - last_overflow_iter_) - 1;
        if (stable_interval > 0 && stable_interval % scale_window_ == 0) scale_ *= 2.0;
      }
      ++cur_iter_;
      return;
    }
    case Kind::kGradScaler: {
      // aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp _amp_update_scale_cpu_: on inf, scale *=
      // backoff and the tracker resets; else the tracker counts, and at growth_interval the scale
      // grows (only if the grown scale is finite) and the tracker resets. The scale is an fp32
      // tensor: each product is taken in double and stored in fp32, as the kernel does.
      float scale = float(scale_);
      if (overflow) {
        scale = float(double(scale) * gs_.backoff_factor);
        growth_tracker_ = 0;
      } else {
        const int64_t successful = growth_tracker_ + 1;
        if (successful == gs_.growth_interval) {
          const float grown = float(double(scale) * gs_.growth_factor);
          if (std::isfinite(grown)) scale = grown;
          growth_tracker_ = 0;
        } else {
          growth_tracker_ = successful;
        }
      }
      scale_ = double(scale);
      return;
    }
  }
}

std::string LossScaler::kind_name() const {
  switch (kind_) {
    case Kind::kStatic: return "static";
    case Kind::kDeepSpeed: return "DynamicLossScaler";
    case Kind::kGradScaler: return "GradScaler";
    case Kind::kDeepSpeedUnfused: return "FP16_UnfusedOptimizer";
  }
  return "?";
}

nlohmann::json LossScaler::state() const {
  nlohmann::json j = {{"kind", kind_name()}, {"scale", scale_}};
  if (kind_ == Kind::kDeepSpeedUnfused) {
    j["cur_iter"] = cur_iter_;
    j["last_overflow_iter"] = last_overflow_iter_;
  } else if (kind_ == Kind::kDeepSpeed) {
    j["cur_iter"] = cur_iter_;
    j["last_overflow_iter"] = last_overflow_iter_;
    j["cur_hysteresis"] = cur_hysteresis_;
  } else if (kind_ == Kind::kGradScaler) {
    j["growth_tracker"] = growth_tracker_;
  }
  return j;
}

}  // namespace zb::backends::common
