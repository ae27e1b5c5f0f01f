// deepspeed_fp16.cpp — see deepspeed_fp16.hpp. Upstream: deepspeed/runtime/precision_config.py
// (DeepSpeedFP16Config and its validators), transformers integrations/deepspeed.py
// (HfTrainerDeepSpeedConfig.trainer_config_process: fill_match("fp16.enabled", args.fp16 or
// args.fp16_full_eval) with the amp backend), accelerate utils/dataclasses.py
// (DeepSpeedPlugin.set_mixed_precision, applied before this reader in accelerate_deepspeed.cpp).
#include "config/deepspeed_fp16.hpp"

#include <cmath>

#include "runtime/errors.hpp"

namespace zb::config {

using json = nlohmann::json;
using namespace deepspeed_values;

namespace {
// _reject_non_integer_scale_params / pydantic int: an integer, not a bool, not a non-finite float.
int64_t as_int(const std::string& key, const json& v) {
  if (v.is_boolean()) throw UsageError(key + " " + text(v) + " must be an integer, not bool (DeepSpeedFP16Config)");
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d))
      throw UsageError(key + " " + text(v) + " must be an integer (DeepSpeedFP16Config)");
    return int64_t(d);
  }
  throw UsageError(key + " " + text(v) + " must be an integer (DeepSpeedFP16Config)");
}
}  // namespace

FP16Section read_fp16_section(const json& f, const TrainerArgs& args, AutoFill mode, ConfigNotes& notes) {
  if (!f.is_object()) throw UsageError("fp16 " + f.dump() + " is not a section");
  FP16Section s;
  if (f.contains("enabled")) {
    const auto& v = f["enabled"];
    if (is_auto(v)) {
      // trainer_config_process: fp16.enabled "auto" <- args.fp16 (--precision fp16); accelerate's
      // set_mixed_precision has already written mixed_precision == "fp16" in its place.
      s.enabled = mode == AutoFill::kHfTrainer && args.precision == "fp16";
      notes.apply("fp16.enabled", "auto",
                  std::string(s.enabled ? "fp16 with loss scaling" : "fp16 off") +
                      (mode == AutoFill::kHfTrainer ? " (--precision, as HF's args.fp16)" : " (accelerate's mixed_precision)"));
    } else {
      s.enabled = as_bool("fp16.enabled", v);
      s.from_file = true;
      notes.apply("fp16.enabled", text(v), s.enabled ? "fp16 with loss scaling" : "fp16 off");
    }
  }
  auto& o = s.scaler;
  for (const auto& [k, v] : f.items()) {
    const std::string key = "fp16." + k;
    if (k == "enabled") continue;
    if (is_auto(v) && k != "auto_cast" && k != "fp16_master_weights_and_grads") {
      // DeepSpeedConfigModel(strict=False) drops "auto" before validation: the field's default.
      notes.ignore(key, "auto", "DeepSpeed drops \"auto\" here: its default");
      continue;
    }
    if (k == "loss_scale") {  // _validate_loss_scale: a finite number >= 0 (not a bool)
      if (v.is_boolean()) throw UsageError(key + " " + text(v) + " must be a number (DeepSpeedFP16Config)");
      const double x = as_number(key, v);
      if (!std::isfinite(x) || x < 0)
        throw UsageError(key + " " + text(v) + " must be >= 0 (0 enables dynamic loss scaling)");
      o.loss_scale = x;
    } else if (k == "initial_scale_power") {
      o.initial_scale_power = as_int(key, v);
    } else if (k == "loss_scale_window") {
      o.loss_scale_window = as_int(key, v);
    } else if (k == "hysteresis") {
      // Unbounded upstream: DynamicLossScaler lowers the scale when delayed_shift or the countdown
      // is 1, so 0 or less never lowers it (each overflow only skips the step).
      o.hysteresis = as_int(key, v);
    } else if (k == "consecutive_hysteresis") {
      o.consecutive_hysteresis = as_bool(key, v);
    } else if (k == "min_loss_scale") {
      o.min_loss_scale = as_int(key, v);
    } else if (k == "auto_cast") {
      if (as_bool(key, v))
        notes.ignore(key, text(v), "casts floating-point inputs to fp16; zerobench's inputs are token ids");
      else
        notes.ignore(key, text(v), "off");
      continue;
    } else if (k == "fp16_master_weights_and_grads") {
      if (as_bool(key, v))
        throw UsageError(key + " true: fp16 master weights and gradients (DeepSpeedCPUAdam only) are not implemented");
      notes.ignore(key, text(v), "off (DeepSpeed's default: fp32 masters)");
      continue;
    } else {
      throw UsageError(key + ": unknown fp16 setting (DeepSpeedFP16Config forbids extra keys)");
    }
    if (s.enabled) notes.apply(key, text(v), "loss scaling " + key);
    else notes.ignore(key, text(v), "fp16 loss-scaling setting; fp16 is off");
  }
  // _validate_dynamic_loss_scale_params: only when enabled with dynamic scaling.
  if (s.enabled && o.loss_scale == 0) {
    if (o.loss_scale_window <= 0)
      throw UsageError("fp16.loss_scale_window " + std::to_string(o.loss_scale_window) +
                       " must be > 0 when dynamic loss scaling is enabled (loss_scale=0)");
    if (o.min_loss_scale <= 0)
      throw UsageError("fp16.min_loss_scale " + std::to_string(o.min_loss_scale) +
                       " must be > 0 when dynamic loss scaling is enabled (loss_scale=0)");
  }
  return s;
}

}  // namespace zb::config
