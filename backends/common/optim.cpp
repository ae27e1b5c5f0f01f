// optim.cpp — flat AdamW, LR schedule, global-norm clipping (see optim.hpp).
#include "backends/common/optim.hpp"

#include <cmath>

namespace zb::backends::common {

AdamWOptions adamw_options(const TrainConfig& t) { return {t.beta1, t.beta2, t.eps, t.weight_decay}; }

FlatAdamW::FlatAdamW(at::Tensor param, AdamWOptions opts)
    : param_(std::move(param)), exp_avg_(at::zeros_like(param_)), exp_avg_sq_(at::zeros_like(param_)), opts_(opts) {}

void FlatAdamW::step(const at::Tensor& grad_in, double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const auto grad = grad_in.scalar_type() == param_.scalar_type() ? grad_in : grad_in.to(param_.scalar_type());
  // torch/csrc/api/src/optim/adamw.cpp, in the same order.
  if (opts_.weight_decay != 0) param_.mul_(1 - lr * opts_.weight_decay);
  exp_avg_.mul_(opts_.beta1).add_(grad, 1 - opts_.beta1);
  exp_avg_sq_.mul_(opts_.beta2).addcmul_(grad, grad, 1 - opts_.beta2);
  const double bias_correction1 = 1 - std::pow(opts_.beta1, double(step_));
  const double bias_correction2 = 1 - std::pow(opts_.beta2, double(step_));
  if (measure_) {
    // The update this step intends, in fp32: decoupled decay then the Adam step.
    auto w = param_.to(at::kFloat);
    auto denom32 = (exp_avg_sq_.to(at::kFloat).sqrt() / std::sqrt(bias_correction2)).add_(opts_.eps);
    auto delta = exp_avg_.to(at::kFloat) / denom32 * (-lr / bias_correction1);
    if (opts_.weight_decay != 0) delta -= w * (lr * opts_.weight_decay);
    lost_ = count_lost_updates(param_, delta);
  }
  auto denom = (exp_avg_sq_.sqrt() / std::sqrt(bias_correction2)).add_(opts_.eps);
  param_.addcdiv_(exp_avg_, denom, -lr / bias_correction1);
}

LostUpdates count_lost_updates(const at::Tensor& w, const at::Tensor& delta) {
  at::NoGradGuard no_grad;
  // ulp(w) = 2^(floor(log2|w|) - mantissa bits): 7 for bf16, 10 for fp16, 23 for fp32.
  const int mantissa = w.scalar_type() == at::kBFloat16 ? 7 : w.scalar_type() == at::kHalf ? 10 : 23;
  auto a = w.to(at::kFloat).abs();
  auto nonzero = a > 0;
  auto half_ulp = at::exp2(at::floor(at::log2(a.clamp_min(1e-30))) - double(mantissa)) * 0.5;
  auto lost = nonzero & (delta != 0) & (delta.abs() < half_ulp);
  return {lost.sum().item<int64_t>(), nonzero.sum().item<int64_t>()};
}

namespace {
// DeepSpeed's schedulers (runtime/lr_schedules.py WarmupLR, WarmupDecayLR, WarmupCosineLR): the
// engine calls scheduler.step() after each optimizer step, so optimizer step `step` runs with the
// value at last_batch_iteration = step - 1 (-1: the value set at construction).
double deepspeed_lr(const TrainConfig& t, int64_t step) {
  const int64_t it = step - 1;
  const int64_t warmup = std::max<int64_t>(2, t.lr_warmup_steps);
  const bool linear = t.warmup_type == "linear";
  auto warmup_gamma = [&] { return linear ? double(it) / double(warmup) : std::log(double(it + 1)) / std::log(double(warmup)); };
  if (t.lr_schedule == "WarmupCosineLR") {
    if (it < 0) return 0.0;
    double ratio;
    if (it < warmup) {
      ratio = t.warmup_min_ratio + warmup_gamma() * (1.0 - t.warmup_min_ratio);
    } else {
      const double real_last = double(it - warmup + 1);
      const double real_total = double(std::max<int64_t>(1, t.total_num_steps - warmup));
      const double progress = std::min(1.0, real_last / real_total);
      ratio = std::max(0.0, t.cos_min_ratio + (1.0 - t.cos_min_ratio) * (1 + std::cos(M_PI * progress)) / 2);
    }
    return t.lr * ratio;
  }
  if (it < 0) return t.warmup_min_lr;
  double gamma = 1.0;
  if (it < warmup)
    gamma = warmup_gamma();
  else if (t.lr_schedule == "WarmupDecayLR")
    gamma = std::max(0.0, double(t.total_num_steps - it) / double(std::max<int64_t>(1, t.total_num_steps - warmup)));
  return t.warmup_min_lr + (t.lr - t.warmup_min_lr) * gamma;
}
}  // namespace

double lr_at(const TrainConfig& t, int64_t step) {
  if (t.lr_schedule == "WarmupLR" || t.lr_schedule == "WarmupDecayLR" || t.lr_schedule == "WarmupCosineLR")
    return deepspeed_lr(t, step);
  if (t.lr_warmup_steps > 0 && step < t.lr_warmup_steps) return t.lr * double(step + 1) / double(t.lr_warmup_steps);
  if (t.lr_schedule == "constant") return t.lr;
  const int64_t decay_steps = std::max<int64_t>(1, t.steps - t.lr_warmup_steps - 1);
  const double progress = std::min(1.0, double(step - t.lr_warmup_steps) / double(decay_steps));
  const double min_lr = t.min_lr_ratio * t.lr;
  return min_lr + (t.lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

double global_grad_norm(const std::vector<at::Tensor>& local_grads, Comm& comm, bool replicated,
                        const runtime::World* group) {
  at::NoGradGuard no_grad;
  at::Tensor sq;
  for (const auto& g : local_grads) {
    if (!g.defined() || g.numel() == 0) continue;
    auto s = g.to(at::kFloat).pow(2).sum();
    sq = sq.defined() ? sq + s : s;
  }
  if (!sq.defined()) sq = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(comm.world().device));
  sq = sq.reshape({1}).contiguous();
  if (!replicated) comm.all_reduce_sum(sq, "grad_norm", group);
  return std::sqrt(sq.item<double>());
}

double clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

}  // namespace zb::backends::common
