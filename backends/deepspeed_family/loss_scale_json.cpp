// loss_scale_json.cpp — see loss_scale_json.hpp.
#include "backends/deepspeed_family/loss_scale_json.hpp"

#include "runtime/errors.hpp"

namespace zb::backends::deepspeed_family {

common::DeepSpeedLossScaleOptions deepspeed_loss_scale_from_json(const nlohmann::json& j) {
  common::DeepSpeedLossScaleOptions o;
  if (!j.is_object()) return o;
  o.loss_scale = j.value("loss_scale", o.loss_scale);
  o.initial_scale_power = j.value("initial_scale_power", o.initial_scale_power);
  o.loss_scale_window = j.value("loss_scale_window", o.loss_scale_window);
  o.hysteresis = j.value("hysteresis", o.hysteresis);
  o.consecutive_hysteresis = j.value("consecutive_hysteresis", o.consecutive_hysteresis);
  o.min_loss_scale = j.value("min_loss_scale", o.min_loss_scale);
  // DeepSpeedFP16Config's bounds (precision_config.py): loss_scale >= 0; loss_scale_window and
  // min_loss_scale > 0 only with dynamic scaling (loss_scale 0); hysteresis unbounded (0 or less:
  // DynamicLossScaler never lowers the scale, update_scale's countdown never reaches 1).
  if (o.loss_scale < 0 || (o.loss_scale == 0 && (o.loss_scale_window <= 0 || o.min_loss_scale <= 0)))
    throw UsageError("fp16 loss scaling " + j.dump() + ": loss_scale >= 0, and with dynamic scaling (loss_scale 0) "
                     "loss_scale_window > 0 and min_loss_scale > 0 are required");
  return o;
}

}  // namespace zb::backends::deepspeed_family
