// hf_scheduler.cpp — transformers' get_scheduler schedules, step by step (see hf_scheduler.hpp).
// Each lambda follows transformers 5.24 optimization.py operation for operation in IEEE doubles
// (Python float; int / int is true division, exact here as both ints are exact doubles); built
// with -ffp-contract=off so that no multiply-add is fused. LambdaLR.get_lr: base_lr * lmbda(k).
#include "config/hf_scheduler.hpp"

#include <algorithm>
#include <cmath>

namespace zb::config {

namespace {
constexpr const char* kPrefix = "hf:";

// transformers.trainer_utils.SchedulerType, in its order.
const char* const kTypes[] = {"linear",        "cosine",  "cosine_with_restarts", "polynomial",
                              "constant",      "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau",
                              "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay", "greedy"};

double py_max0(double x) { return x > 0 ? x : 0.0; }  // max(0, x) / max(0.0, x): the first wins ties

// The warm-up every LambdaLR type but cosine_warmup_with_min_lr shares:
// float(current_step) / float(max(1, num_warmup_steps)).
double warmup_factor(int64_t k, int64_t w) { return double(k) / double(std::max<int64_t>(1, w)); }

// _get_cosine_schedule_with_warmup_lr_lambda (its second definition, the one the module binds:
// min_lr_rate 0.0 for "cosine"), num_cycles 0.5.
double cosine_lambda(int64_t k, int64_t w, int64_t n, double min_lr_rate) {
  if (k < w) return warmup_factor(k, w);
  const double progress = double(k - w) / double(std::max<int64_t>(1, n - w));
  double factor = 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress));
  factor = factor * (1 - min_lr_rate) + min_lr_rate;
  return py_max0(factor);
}
}  // namespace

bool is_hf_schedule(const std::string& lr_schedule) { return lr_schedule.rfind(kPrefix, 0) == 0; }

std::string hf_schedule_type(const std::string& lr_schedule) {
  return is_hf_schedule(lr_schedule) ? lr_schedule.substr(3) : "";
}

bool hf_schedule_takes_min_lr_rate(const std::string& name) {
  return name == "cosine_with_min_lr" || name == "cosine_warmup_with_min_lr";
}

std::string hf_scheduler_type_error(const std::string& name) {
  bool known = false;
  std::string all;
  for (const char* t : kTypes) {
    known = known || name == t;
    all += std::string(all.empty() ? "" : ", ") + t;
  }
  if (!known) return "'" + name + "' is not a valid SchedulerType of transformers (one of " + all + ")";
  if (name == "reduce_lr_on_plateau" || name == "greedy")
    return name + " adjusts the lr from evaluation metrics (TrainingArguments requires an eval strategy); not "
                  "implemented: zerobench evaluates nothing";
  if (name == "warmup_stable_decay")
    return name + ": transformers' get_wsd_schedule requires lr_scheduler_kwargs num_decay_steps, which zerobench "
                  "does not take; not implemented";
  return "";
}

std::string hf_schedule_error(const HfSchedule& s) {
  // get_polynomial_decay_schedule_with_warmup: lr_end 1e-7 (its default) must be below lr_init.
  if (s.type == "polynomial" && !(s.lr > 1e-7))
    return "--lr-scheduler-type polynomial: lr_end (1e-07) must be smaller than initial lr (--lr " +
           std::to_string(s.lr) + ") (transformers' ValueError)";
  // Its lambda divides by num_training_steps - num_warmup_steps once the warm-up is over: with a
  // warm-up of the whole run, the Trainer's scheduler.step() after the last optimizer step raises.
  if (s.type == "polynomial" && s.warmup_steps == s.training_steps)
    return "--lr-scheduler-type polynomial with a warm-up of all " + std::to_string(s.training_steps) +
           " steps: transformers' lambda divides by num_training_steps - num_warmup_steps = 0 at the scheduler step "
           "after the last optimizer step (ZeroDivisionError)";
  return "";
}

double hf_schedule_lr(const HfSchedule& s, int64_t k) {
  const int64_t w = s.warmup_steps, n = s.training_steps;
  const std::string& t = s.type;
  double lambda = 1.0;  // "constant": _get_constant_lambda returns 1; base_lr * 1 == base_lr
  if (t == "linear") {
    lambda = k < w ? warmup_factor(k, w) : py_max0(double(n - k) / double(std::max<int64_t>(1, n - w)));
  } else if (t == "cosine") {
    lambda = cosine_lambda(k, w, n, 0.0);
  } else if (t == "cosine_with_min_lr") {
    lambda = cosine_lambda(k, w, n, s.min_lr_rate);
  } else if (t == "constant_with_warmup") {
    lambda = k < w ? double(k) / std::max(1.0, double(w)) : 1.0;
  } else if (t == "cosine_with_restarts") {  // num_cycles 1 (its default)
    if (k < w) {
      lambda = warmup_factor(k, w);
    } else {
      const double progress = double(k - w) / double(std::max<int64_t>(1, n - w));
      lambda = progress >= 1.0 ? 0.0 : py_max0(0.5 * (1.0 + std::cos(M_PI * std::fmod(1.0 * progress, 1.0))));
    }
  } else if (t == "polynomial") {  // lr_end 1e-7, power 1.0 (its defaults), lr_init = the optimizer's lr
    const double lr_end = 1e-7, lr_init = s.lr;
    if (k < w) {
      lambda = warmup_factor(k, w);
    } else if (k > n) {
      lambda = lr_end / lr_init;
    } else {
      const double lr_range = lr_init - lr_end;
      const double pct_remaining = 1 - double(k - w) / double(n - w);
      lambda = (lr_range * std::pow(pct_remaining, 1.0) + lr_end) / lr_init;
    }
  } else if (t == "inverse_sqrt") {  // timescale = num_warmup_steps or 10_000
    const int64_t timescale = w != 0 ? w : 10000;
    lambda = k < w ? warmup_factor(k, w) : 1.0 / std::sqrt(double(k + (timescale - w)) / double(timescale));
  } else if (t == "cosine_warmup_with_min_lr") {  // everything in floats; warmup_lr_rate None, num_cycles 0.5
    const double kf = double(k), wf = double(w), nf = double(n);
    if (kf < wf) {
      lambda = (kf + 1.0) / std::max(1.0, wf);
    } else {
      const double progress = (kf - wf + 1.0) / std::max(1.0, nf - wf);
      double factor = 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress));
      factor = factor * (1 - s.min_lr_rate) + s.min_lr_rate;
      lambda = py_max0(factor);
    }
  }
  return s.lr * lambda;
}

}  // namespace zb::config
