// deepspeed_scheduler.cpp — see deepspeed_scheduler.hpp. The lr of each class is computed in the
// order runtime/lr_schedules.py computes it (Python float = IEEE double; math.log / math.cos /
// math.floor are libm's), so that a schedule agrees with DeepSpeed's to the bit.
#include "config/deepspeed_scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "config/deepspeed_zero_config.hpp"
#include "runtime/errors.hpp"

namespace zb::config {

namespace {
using json = nlohmann::json;
using deepspeed_values::fmt;
using deepspeed_values::is_auto;
using deepspeed_values::text;

const std::set<std::string> kDeepSpeedTypes = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"};
// torch.optim.lr_scheduler's classes: _scheduler_from_config builds one of these for a name
// lr_schedules lacks (hasattr(torch.optim.lr_scheduler, name)).
const std::set<std::string> kTorchTypes = {
    "LambdaLR",   "MultiplicativeLR",   "StepLR",       "MultiStepLR", "ConstantLR",        "LinearLR",
    "ExponentialLR", "SequentialLR",    "PolynomialLR", "CosineAnnealingLR", "ChainedScheduler",
    "ReduceLROnPlateau", "CyclicLR",    "CosineAnnealingWarmRestarts", "OneCycleLR", "LRScheduler"};

// Each class's keyword arguments (its __init__ after `optimizer`): another key is a TypeError.
const std::map<std::string, std::set<std::string>> kParams = {
    {"WarmupLR", {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"}},
    {"WarmupDecayLR",
     {"total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"}},
    {"WarmupCosineLR",
     {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type", "last_batch_iteration"}},
    {"OneCycle",
     {"cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size", "cycle_second_step_size",
      "cycle_first_stair_count", "cycle_second_stair_count", "decay_step_size", "cycle_momentum", "cycle_min_mom",
      "cycle_max_mom", "decay_mom_rate", "last_batch_iteration"}},
    {"LRRangeTest",
     {"lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate", "lr_range_test_staircase",
      "last_batch_iteration"}},
};

// The keys transformers fills when they are "auto" (every other "auto" reaches DeepSpeed as a string).
const std::set<std::string> kFilled = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps"};

const std::set<std::string> kReadAsText = {"warmup_type", "cycle_momentum", "lr_range_test_staircase",
                                           "cycle_min_mom", "cycle_max_mom", "decay_mom_rate"};

// A Python number as DeepSpeed receives it from json.load: a JSON number (a bool is an int in
// Python, but no scheduler file writes one). A string reaches the class's arithmetic and fails there.
double number(const std::string& key, const json& v, const std::string& type) {
  if (v.is_number()) return v.get<double>();
  throw UsageError(key + " " + text(v) + " is not a number: DeepSpeed passes it to " + type +
                   " as it is, whose arithmetic fails on it");
}

// isinstance(v, int) and v > 0: the check WarmupLR, WarmupCosineLR and LRRangeTest make.
int64_t positive_int(const std::string& key, const json& v, const std::string& type, const std::string& what) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    throw UsageError(key + " " + text(v) + ": DeepSpeed's " + type + " raises ValueError (" + what +
                     " must be a positive integer, got " + text(v) + ")");
  return v.get<int64_t>();
}

// Python truthiness, which is how the classes read their flags.
bool truthy(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) return !v.get<std::string>().empty();
  if (v.is_null()) return false;
  return !v.empty();
}

double log_or_linear_gamma(const DeepSpeedScheduler& s, int64_t it, int64_t warmup) {
  if (s.warmup_type == "linear") return double(it) / double(warmup);
  const double inverse_log_warm_up = 1.0 / std::log(double(warmup));  // computed once in __init__
  return inverse_log_warm_up * std::log(double(it + 1));
}

// OneCycle._get_scale_factor at last_batch_iteration `it` (>= 0, inside the cycle): the lr's and
// the momentum's share of their amplitude.
double one_cycle_scale_factor(const DeepSpeedScheduler& s, int64_t it) {
  const double total_size = s.cycle_first_step_size + s.cycle_second_step_size;
  const double step_ratio = s.cycle_first_step_size / total_size;
  const double batch_iteration = double(it + 1);
  const double cycle = std::floor(1 + batch_iteration / total_size);
  const double x = 1. + batch_iteration / total_size - cycle;
  double scale_factor, stair_count;
  if (x <= step_ratio) {
    scale_factor = x / step_ratio;
    stair_count = s.cycle_first_stair_count;
  } else {
    scale_factor = (x - 1) / (step_ratio - 1);
    stair_count = s.cycle_second_stair_count;
  }
  if (stair_count > 0) {
    const double cycle_iteration = std::fmod(batch_iteration, total_size);
    const double stair_position = cycle_iteration <= s.cycle_first_step_size
                                      ? cycle_iteration * stair_count / s.cycle_first_step_size
                                      : (total_size - cycle_iteration) * stair_count / s.cycle_second_step_size;
    scale_factor = std::floor(stair_position) / stair_count;
  }
  return scale_factor;
}
}  // namespace

double DeepSpeedScheduler::lr(double optimizer_lr, int64_t scheduler_steps) const {
  const int64_t it = scheduler_steps - 1;  // last_batch_iteration: -1 until the first scheduler.step()
  if (type == "WarmupLR" || type == "WarmupDecayLR") {
    if (it < 0) return warmup_min_lr;  // get_lr before the schedule started: min_lrs
    const int64_t warmup = std::max<int64_t>(2, warmup_num_steps);
    double gamma = 1.0;
    if (it < warmup) {
      gamma = log_or_linear_gamma(*this, it, warmup);
    } else if (type == "WarmupDecayLR") {
      gamma = std::max(0.0, (total_num_steps - double(it)) / std::max(1.0, total_num_steps - double(warmup)));
    }
    const double delta_lr = warmup_max_lr - warmup_min_lr;
    return warmup_min_lr + delta_lr * gamma;
  }
  if (type == "WarmupCosineLR") {
    if (it < 0) return 0.0;
    const int64_t warmup = std::max<int64_t>(2, warmup_num_steps);
    double ratio;
    if (it < warmup) {
      ratio = log_or_linear_gamma(*this, it, warmup);
      const double ratio_delta = 1. - warmup_min_ratio;
      ratio = warmup_min_ratio + ratio * ratio_delta;
    } else {
      const double real_last_step = double(it - warmup + 1);
      const double real_total_steps = std::max(1.0, total_num_steps - double(warmup));
      const double cosine_progress = std::min(1.0, real_last_step / real_total_steps);
      const double ratio_delta = 1. - cos_min_ratio;
      ratio = (1 + std::cos(M_PI * cosine_progress)) / 2;
      ratio = std::max(0.0, cos_min_ratio + ratio_delta * ratio);
    }
    return optimizer_lr * ratio;
  }
  if (type == "OneCycle") {
    if (it < 0) return cycle_min_lr;  // _initialize_lr: update_lr(param_groups, min_lrs)
    const double total_size = cycle_first_step_size + cycle_second_step_size;
    if (double(it) < total_size) {  // _get_cycle_lr
      const double base_height = (cycle_max_lr - cycle_min_lr) * one_cycle_scale_factor(*this, it);
      return cycle_min_lr + base_height;
    }
    // _get_decay_lr(last_batch_iteration - total_size + 1); skipped when either rate or step size is 0.
    if (decay_step_size == 0 || decay_lr_rate == 0) return cycle_min_lr;
    const double decay_batch_iteration = double(it) - total_size + 1;
    const double decay_interval = decay_batch_iteration / decay_step_size;
    const double lr_decay_factor = (1 + decay_lr_rate * decay_interval);
    return cycle_min_lr / lr_decay_factor;
  }
  if (type == "LRRangeTest") {
    if (it < 0) return lr_range_test_min_lr;  // __init__: update_lr(param_groups, min_lr)
    const double interval = lr_range_test_staircase
                                ? std::floor(double(it + 1) / double(lr_range_test_step_size))
                                : double(it + 1) / double(lr_range_test_step_size);
    const double lr_increase = (1 + lr_range_test_step_rate * interval);
    return lr_range_test_min_lr * lr_increase;
  }
  return optimizer_lr;  // no scheduler
}

DeepSpeedScheduler::Betas DeepSpeedScheduler::betas(int64_t scheduler_steps) const {
  const int64_t it = scheduler_steps - 1;
  // _initialize_momentum: every group's betas = (cycle_min_mom, 0.99) at construction (step 0).
  if (it < 0) return {cycle_min_mom, 0.99};
  const double total_size = cycle_first_step_size + cycle_second_step_size;
  if (double(it) < total_size) {  // _get_cycle_mom: inverse to the lr, from cycle_max_mom down
    const double base_height = (cycle_max_mom - cycle_min_mom) * one_cycle_scale_factor(*this, it);
    return {cycle_max_mom - base_height, 0.99};
  }
  // _get_decay_mom(last_batch_iteration - total_size + 1): max_moms when skip_mom_decay (set by
  // _initialize_cycle when decay_step_size is 0, by _initialize_momentum when decay_mom_rate is 0);
  // otherwise cycle_max_mom times the factor (it grows: DeepSpeed multiplies where the lr divides).
  if (decay_step_size == 0 || decay_mom_rate == 0) return {cycle_max_mom, 0.99};
  const double decay_batch_iteration = double(it) - total_size + 1;
  const double decay_interval = decay_batch_iteration / decay_step_size;
  const double mom_decay_factor = (1 + decay_mom_rate * decay_interval);
  return {cycle_max_mom * mom_decay_factor, 0.99};
}

void DeepSpeedScheduler::scale_lrs(double f) {
  warmup_min_lr *= f;
  warmup_max_lr *= f;
  cycle_min_lr *= f;
  cycle_max_lr *= f;
  lr_range_test_min_lr *= f;
}

DeepSpeedScheduler read_deepspeed_scheduler(const json& s, double optimizer_lr, const SchedulerFill& fill,
                                            const SchedulerFlagCheck& check, ConfigNotes& notes) {
  DeepSpeedScheduler out;
  if (!s.is_object()) throw UsageError("scheduler " + s.dump() + " is not a section");
  for (const auto& [k, v] : s.items())
    if (k != "type" && k != "params") notes.ignore("scheduler." + k, text(v), "not read by DeepSpeed");
  // get_scheduler_name: no "type" (or null) builds no scheduler; transformers passes a
  // DummyScheduler for any "scheduler" section, so the Trainer builds none either.
  if (!s.contains("type") || s["type"].is_null()) {
    notes.apply("scheduler", s.dump(),
                "no scheduler (the section has no type: DeepSpeed builds none and HF's Trainer defers to it); "
                "every step runs at the optimizer's lr " + fmt(optimizer_lr));
    if (s.contains("params")) notes.ignore("scheduler.params", s["params"].dump(), "read only with a scheduler type");
    return out;
  }
  const std::string type = text(s["type"]);
  if (!kDeepSpeedTypes.count(type)) {
    if (kTorchTypes.count(type))
      throw UsageError("scheduler.type " + type + ": DeepSpeed builds torch.optim.lr_scheduler." + type +
                       " for it; zerobench implements DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle "
                       "and LRRangeTest only");
    throw UsageError("scheduler.type " + type + ": DeepSpeed does not recognize LR scheduler " + type +
                     " (engine.py _scheduler_from_config: neither deepspeed.runtime.lr_schedules nor "
                     "torch.optim.lr_scheduler has it)");
  }
  // get_scheduler_params: None without "params", and scheduler(optimizer, **None) is a TypeError.
  if (!s.contains("params") || s["params"].is_null())
    throw UsageError("scheduler.params is missing: DeepSpeed calls " + type +
                     "(optimizer, **None), a TypeError (argument after ** must be a mapping)");
  const json& p = s["params"];
  if (!p.is_object()) throw UsageError("scheduler.params " + p.dump() + " is not a mapping");
  out.type = type;
  notes.apply("scheduler.type", type, "DeepSpeed's lr_schedules." + type + " (config.train.lr_schedule_params)");
  const auto& allowed = kParams.at(type);
  // The constructors' defaults.
  if (type == "WarmupLR") out.warmup_max_lr = optimizer_lr;  // warmup_max_lr=None: the optimizer's lr
  bool has_total = false, has_cycle_min = false, has_cycle_max = false, second_size = false, second_stairs = false;
  bool cycle_momentum = true;
  for (const auto& [k, v] : p.items()) {
    const std::string key = "scheduler.params." + k;
    if (!allowed.count(k))
      throw UsageError(key + " " + text(v) + ": not a parameter of DeepSpeed's " + type +
                       " (its constructor raises TypeError on an unexpected keyword)");
    if (v.is_array())
      throw UsageError(key + " " + v.dump() + ": per-parameter-group values are not implemented (zerobench's "
                       "optimizer steps every parameter at one lr)");
    // warmup_type and the flags are read by name or truthiness ("auto" is an unknown type, or true);
    // the momentum keys after the loop, once cycle_momentum is known.
    if (is_auto(v) && !kFilled.count(k) && !kReadAsText.count(k))
      throw UsageError(key + " \"auto\": transformers fills only warmup_min_lr, warmup_max_lr, warmup_num_steps and "
                       "total_num_steps, so DeepSpeed's " + type + " would get the string \"auto\"");
    if (k == "warmup_min_lr") {
      out.warmup_min_lr = is_auto(v) ? 0.0 : number(key, v, type);  // fill_only(0): "not a trainer arg"
      notes.apply(key, text(v), "warmup_min_lr " + fmt(out.warmup_min_lr));
    } else if (k == "warmup_max_lr") {
      if (is_auto(v)) {
        out.warmup_max_lr = fill.learning_rate;
      } else if (v.is_null()) {
        out.warmup_max_lr = optimizer_lr;  // None: the optimizer's lr
      } else {
        out.warmup_max_lr = number(key, v, type);
        check(key, text(v), "--lr", fmt(fill.learning_rate), out.warmup_max_lr == fill.learning_rate);
      }
      notes.apply(key, text(v), "warmup_max_lr " + fmt(out.warmup_max_lr) + (is_auto(v) ? " (--lr)" : ""));
    } else if (k == "warmup_num_steps") {
      if (is_auto(v)) {
        out.warmup_num_steps = fill.warmup_steps;
        if (out.warmup_num_steps <= 0)
          throw UsageError(key + " \"auto\": transformers fills it with get_warmup_steps = 0 (" + fill.warmup_flag +
                           " " + fill.warmup_flag_value + ") and DeepSpeed 0.19.8's " + type +
                           " raises ValueError (warmup_num_steps must be a positive integer, got 0); give "
                           "--lr-warmup-steps N or --lr-warmup-ratio R");
      } else {
        out.warmup_num_steps = positive_int(key, v, type, "warmup_num_steps");
        check(key, text(v), fill.warmup_flag, fill.warmup_flag_value, out.warmup_num_steps == fill.warmup_steps);
      }
      notes.apply(key, text(v), "warmup_num_steps " + std::to_string(out.warmup_num_steps) +
                                    (is_auto(v) ? " (" + fill.warmup_flag + ")" : "") +
                                    (out.warmup_num_steps < 2 ? "; " + type + " warms up over max(2, it) = 2" : ""));
    } else if (k == "total_num_steps") {
      has_total = true;
      // An explicit value stands even beside --steps: the schedule spans the whole training, of
      // which the benchmark runs its first --steps steps.
      out.total_num_steps = is_auto(v) ? double(fill.num_training_steps) : number(key, v, type);
      notes.apply(key, text(v), "total_num_steps " + fmt(out.total_num_steps) +
                                    (is_auto(v) ? " (--steps)" : " (the benchmark runs the first --steps of it)"));
    } else if (k == "warmup_type") {
      const auto w = text(v);
      out.warmup_type = w == "linear" ? "linear" : "log";
      if (w != "linear" && w != "log")
        notes.warn(key + " '" + w + "' is unknown; DeepSpeed's " + type + " warns and uses log");
      notes.apply(key, w, "warmup_type " + out.warmup_type);
    } else if (k == "warmup_min_ratio") {
      out.warmup_min_ratio = number(key, v, type);
      notes.apply(key, text(v), "warmup_min_ratio " + fmt(out.warmup_min_ratio));
    } else if (k == "cos_min_ratio") {
      out.cos_min_ratio = number(key, v, type);
      notes.apply(key, text(v), "cos_min_ratio " + fmt(out.cos_min_ratio));
    } else if (k == "cycle_min_lr" || k == "cycle_max_lr") {
      (k == "cycle_min_lr" ? out.cycle_min_lr : out.cycle_max_lr) = number(key, v, type);
      (k == "cycle_min_lr" ? has_cycle_min : has_cycle_max) = true;
      notes.apply(key, text(v), k + " " + text(v));
    } else if (k == "decay_lr_rate" || k == "decay_step_size") {
      (k == "decay_lr_rate" ? out.decay_lr_rate : out.decay_step_size) = number(key, v, type);
      notes.apply(key, text(v), k + " " + text(v));
    } else if (k == "cycle_first_step_size" || k == "cycle_second_step_size") {
      if (v.is_null() && k == "cycle_second_step_size") {
        notes.apply(key, "null", "cycle_second_step_size = cycle_first_step_size");
        continue;
      }
      (k == "cycle_first_step_size" ? out.cycle_first_step_size : out.cycle_second_step_size) = number(key, v, type);
      if (k == "cycle_second_step_size") second_size = true;
      notes.apply(key, text(v), k + " " + text(v));
    } else if (k == "cycle_first_stair_count" || k == "cycle_second_stair_count") {
      if (v.is_null() && k == "cycle_second_stair_count") {
        notes.apply(key, "null", "cycle_second_stair_count = cycle_first_stair_count");
        continue;
      }
      (k == "cycle_first_stair_count" ? out.cycle_first_stair_count : out.cycle_second_stair_count) = number(key, v, type);
      if (k == "cycle_second_stair_count") second_stairs = true;
      notes.apply(key, text(v), k + " " + text(v));
    } else if (k == "cycle_momentum") {
      cycle_momentum = truthy(v);
      notes.apply(key, text(v),
                  cycle_momentum ? "momentum cycling: AdamW's betas (momentum, 0.99) every step"
                                 : "AdamW's betas stay as configured");
    } else if (k == "cycle_min_mom" || k == "cycle_max_mom" || k == "decay_mom_rate") {
      continue;  // noted below, once cycle_momentum is known
    } else if (k == "lr_range_test_min_lr" || k == "lr_range_test_step_rate") {
      (k == "lr_range_test_min_lr" ? out.lr_range_test_min_lr : out.lr_range_test_step_rate) = number(key, v, type);
      notes.apply(key, text(v), k + " " + text(v));
    } else if (k == "lr_range_test_step_size") {
      out.lr_range_test_step_size = positive_int(key, v, type, "lr_range_test_step_size");
      notes.apply(key, text(v), k + " " + text(v));
    } else if (k == "lr_range_test_staircase") {
      out.lr_range_test_staircase = truthy(v);
      notes.apply(key, text(v), out.lr_range_test_staircase ? "staircase" : "continuous");
    } else if (k == "last_batch_iteration") {
      if (!v.is_number() || v.get<double>() != -1)
        throw UsageError(key + " " + text(v) + ": resuming a schedule is not implemented");
      notes.apply(key, text(v), "a fresh schedule");
    }
  }
  if ((type == "WarmupDecayLR" || type == "WarmupCosineLR") && !has_total)
    throw UsageError("scheduler.params.total_num_steps is missing: DeepSpeed's " + type +
                     " requires it (TypeError: missing argument)");
  if (type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR") {
    if (!p.contains("warmup_num_steps"))
      notes.apply("scheduler.params.warmup_num_steps", "(absent)", "warmup_num_steps 1000 (" + type + "'s default)");
    if (type != "WarmupCosineLR" && !p.contains("warmup_max_lr"))
      notes.apply("scheduler.params.warmup_max_lr", "(absent)",
                  "warmup_max_lr " + fmt(out.warmup_max_lr) +
                      (type == "WarmupLR" ? " (None: the optimizer's lr)" : " (WarmupDecayLR's default)"));
  }
  if (type == "OneCycle") {
    if (!has_cycle_min || !has_cycle_max)
      throw UsageError(std::string("scheduler.params.") + (has_cycle_min ? "cycle_max_lr" : "cycle_min_lr") +
                       " is missing: DeepSpeed's OneCycle requires it (TypeError: missing argument)");
    if (!second_size) out.cycle_second_step_size = out.cycle_first_step_size;
    if (!second_stairs) out.cycle_second_stair_count = out.cycle_first_stair_count;
    if (out.cycle_first_step_size <= 0)
      throw UsageError("scheduler.params.cycle_first_step_size " + fmt(out.cycle_first_step_size) +
                       ": DeepSpeed's OneCycle raises ValueError (cycle_first_step_size must be positive)");
    if (out.cycle_second_step_size < 0)
      throw UsageError("scheduler.params.cycle_second_step_size " + fmt(out.cycle_second_step_size) +
                       ": DeepSpeed's OneCycle raises ValueError (cycle_second_step_size must be non-negative)");
    // _initialize_momentum: zerobench's optimizer is an AdamW, which has "betas" in its defaults, so
    // cycle_momentum (default true) sets every group's betas to (momentum, 0.99) at construction
    // and at every step; the momentum keys are read only then (a string reaches the arithmetic).
    out.cycle_momentum = cycle_momentum;
    if (!p.contains("cycle_momentum"))
      notes.apply("scheduler.params.cycle_momentum", "(absent)",
                  "momentum cycling (OneCycle's default true): AdamW's betas (momentum, 0.99) every step");
    for (const char* name : {"cycle_min_mom", "cycle_max_mom", "decay_mom_rate"}) {
      const std::string k = name, key = "scheduler.params." + k;
      double& field = k == "cycle_min_mom" ? out.cycle_min_mom : k == "cycle_max_mom" ? out.cycle_max_mom : out.decay_mom_rate;
      if (!cycle_momentum) {
        if (p.contains(k)) notes.ignore(key, text(p[k]), "read only with cycle_momentum");
        continue;
      }
      if (!p.contains(k)) {
        notes.apply(key, "(absent)", k + " " + fmt(field) + " (OneCycle's default)");
        continue;
      }
      const json& v = p[k];
      if (is_auto(v))
        throw UsageError(key + " \"auto\": transformers fills only warmup_min_lr, warmup_max_lr, warmup_num_steps and "
                         "total_num_steps, so DeepSpeed's OneCycle would get the string \"auto\"");
      field = number(key, v, type);
      notes.apply(key, text(v), k + " " + text(v) + (k == "decay_mom_rate" ? "" : " (AdamW's beta1; beta2 0.99)"));
    }
  }
  return out;
}

json scheduler_params_json(const DeepSpeedScheduler& s) {
  if (s.type == "WarmupLR" || s.type == "WarmupDecayLR") {
    json j = {{"warmup_min_lr", s.warmup_min_lr},
              {"warmup_max_lr", s.warmup_max_lr},
              {"warmup_num_steps", s.warmup_num_steps},
              {"warmup_type", s.warmup_type}};
    if (s.type == "WarmupDecayLR") j["total_num_steps"] = s.total_num_steps;
    return j;
  }
  if (s.type == "WarmupCosineLR")
    return {{"total_num_steps", s.total_num_steps}, {"warmup_min_ratio", s.warmup_min_ratio},
            {"warmup_num_steps", s.warmup_num_steps}, {"cos_min_ratio", s.cos_min_ratio},
            {"warmup_type", s.warmup_type}};
  if (s.type == "OneCycle") {
    json j = {{"cycle_min_lr", s.cycle_min_lr},
              {"cycle_max_lr", s.cycle_max_lr},
              {"decay_lr_rate", s.decay_lr_rate},
              {"cycle_first_step_size", s.cycle_first_step_size},
              {"cycle_second_step_size", s.cycle_second_step_size},
              {"cycle_first_stair_count", s.cycle_first_stair_count},
              {"cycle_second_stair_count", s.cycle_second_stair_count},
              {"decay_step_size", s.decay_step_size},
              {"cycle_momentum", s.cycle_momentum}};
    if (s.cycle_momentum) {
      j["cycle_min_mom"] = s.cycle_min_mom;
      j["cycle_max_mom"] = s.cycle_max_mom;
      j["decay_mom_rate"] = s.decay_mom_rate;
    }
    return j;
  }
  if (s.type == "LRRangeTest")
    return {{"lr_range_test_min_lr", s.lr_range_test_min_lr},
            {"lr_range_test_step_size", s.lr_range_test_step_size},
            {"lr_range_test_step_rate", s.lr_range_test_step_rate},
            {"lr_range_test_staircase", s.lr_range_test_staircase}};
  return json::object();
}

json filled_scheduler_section(const json& section, const DeepSpeedScheduler& s) {
  json out = section;
  if (!out.is_object() || !out.contains("params") || !out["params"].is_object()) return out;
  json& params = out["params"];
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string& k = it.key();
    json& v = it.value();
    if (!is_auto(v)) continue;
    if (k == "warmup_min_lr") v = s.warmup_min_lr;
    else if (k == "warmup_max_lr") v = s.warmup_max_lr;
    else if (k == "warmup_num_steps") v = s.warmup_num_steps;  // get_warmup_steps: an int
    else if (k == "total_num_steps") v = int64_t(s.total_num_steps);  // num_training_steps: an int
  }
  return out;
}

}  // namespace zb::config
