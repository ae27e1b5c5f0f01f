// optim.cpp — torch.optim.AdamW (fused, foreach, for-loop), LR schedule, the frameworks' gradient norms (see optim.hpp).
#include "backends/common/optim.hpp"

#include <cmath>

#include "config/hf_scheduler.hpp"

namespace zb::backends::common {

AdamWOptions adamw_options(const TrainConfig& t) { return {t.beta1, t.beta2, t.eps, t.weight_decay, t.adamw_impl}; }

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions opts) : params_(std::move(params)), opts_(opts) {
  TORCH_CHECK(!params_.empty(), "AdamW needs at least one parameter");
  int64_t total = 0;
  for (const auto& p : params_) {
    TORCH_CHECK(p.scalar_type() == params_[0].scalar_type() && p.device() == params_[0].device(),
                "AdamW: every parameter must share one dtype and device");
    total += p.numel();
  }
  opts_.impl = config::resolve_adamw_impl(opts_.impl, params_[0].is_cuda());
  // torch keeps the step on the parameter's device only for fused (and capturable).
  const auto step_device = opts_.impl == config::AdamWImpl::kFused ? params_[0].device() : at::Device(at::kCPU);
  exp_avg_flat_ = at::zeros({total}, params_[0].options());
  exp_avg_sq_flat_ = at::zeros({total}, params_[0].options());
  state_steps_flat_ = at::zeros({int64_t(params_.size())}, at::TensorOptions().dtype(at::kFloat).device(step_device));
  int64_t offset = 0;
  for (const auto& p : params_) {
    exp_avgs_.push_back(exp_avg_flat_.narrow(0, offset, p.numel()).view(p.sizes()));
    exp_avg_sqs_.push_back(exp_avg_sq_flat_.narrow(0, offset, p.numel()).view(p.sizes()));
    state_steps_.push_back(state_steps_flat_.select(0, int64_t(state_steps_.size())));
    offset += p.numel();
  }
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::state(const std::string& prefix) const {
  return {{prefix + "exp_avg", exp_avg_flat_}, {prefix + "exp_avg_sq", exp_avg_sq_flat_}, {prefix + "step", state_steps_flat_}};
}

void AdamW::state_loaded() { step_ = int64_t(state_steps_flat_[0].item<float>()); }

void AdamW::step(const std::vector<at::Tensor>& grads, const StepHyper& h) {
  const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2;
  at::NoGradGuard no_grad;
  TORCH_CHECK(grads.size() == params_.size(), "AdamW: ", grads.size(), " gradients for ", params_.size(),
              " parameters");
  ++step_;
  if (measure_) {
    // The update this step intends, in fp32, from the states before the step (the fused kernel
    // computes in fp32 internally and rounds only what it stores): decay, then the Adam step.
    const double bc1 = 1 - std::pow(beta1, double(step_));
    const double bc2 = 1 - std::pow(beta2, double(step_));
    LostUpdates total;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto g = grads[i].to(at::kFloat);
      auto m = exp_avgs_[i].to(at::kFloat) * beta1 + g * (1 - beta1);
      auto v = exp_avg_sqs_[i].to(at::kFloat) * beta2 + g * g * (1 - beta2);
      auto delta = m / ((v.sqrt() / std::sqrt(bc2)) + opts_.eps) * (-lr / bc1);
      if (opts_.weight_decay != 0) delta -= params_[i].to(at::kFloat) * (lr * opts_.weight_decay);
      total += count_lost_updates(params_[i], delta);
    }
    lost_ = total;
  }
  switch (opts_.impl) {
    case config::AdamWImpl::kFused: return step_fused(grads, h);
    case config::AdamWImpl::kForeach: return step_foreach(grads, h);
    default: return step_for_loop(grads, h);
  }
}

void AdamW::step_fused(const std::vector<at::Tensor>& grads, const StepHyper& h) {
  const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2;
  // torch/optim/adam.py _fused_adam: steps += 1, then one fused kernel over the lists.
  at::_foreach_add_(state_steps_, 1);
  at::_fused_adamw_(params_, grads, exp_avgs_, exp_avg_sqs_, /*max_exp_avg_sqs=*/{}, state_steps_, lr, beta1,
                    beta2, opts_.weight_decay, opts_.eps, /*amsgrad=*/false, /*maximize=*/false);
}

// torch 2.11 adam.py _multi_tensor_adam (capturable=False, amsgrad=False, maximize=False,
// decoupled weight decay), op for op: Python floats are doubles here, the bias corrections are
// computed on the host from each counter's value (_get_value), the step sizes negated as
// `(lr / bc) * -1`, the square root of bias_correction2 as `bc ** 0.5`.
void AdamW::step_foreach(const std::vector<at::Tensor>& grads, const StepHyper& h) {
  const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2;
  at::_foreach_add_(state_steps_, at::scalar_tensor(1.0, at::kFloat), 1.0);  // CPU counters: a CPU tensor
  if (opts_.weight_decay != 0) at::_foreach_mul_(params_, 1 - lr * opts_.weight_decay);
  at::_foreach_lerp_(exp_avgs_, grads, 1 - beta1);
  at::_foreach_mul_(exp_avg_sqs_, beta2);
  at::_foreach_addcmul_(exp_avg_sqs_, grads, grads, 1 - beta2);
  std::vector<at::Scalar> step_size, bc2_sqrt;
  for (const auto& s : state_steps_) {
    const double step = double(s.item<float>());
    step_size.emplace_back((lr / (1 - std::pow(beta1, step))) * -1);
    bc2_sqrt.emplace_back(std::pow(1 - std::pow(beta2, step), 0.5));
  }
  auto denom = at::_foreach_sqrt(exp_avg_sqs_);
  at::_foreach_div_(denom, bc2_sqrt);
  at::_foreach_add_(denom, opts_.eps);
  at::_foreach_addcdiv_(params_, exp_avgs_, denom, step_size);
}

// torch 2.11 adam.py _single_tensor_adam (capturable=False, differentiable=False, amsgrad=False,
// maximize=False, decoupled weight decay), op for op, one parameter at a time.
void AdamW::step_for_loop(const std::vector<at::Tensor>& grads, const StepHyper& h) {
  const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto param = params_[i];
    auto exp_avg = exp_avgs_[i];
    auto exp_avg_sq = exp_avg_sqs_[i];
    auto step_t = state_steps_[i];
    step_t.add_(1);
    if (opts_.weight_decay != 0) param.mul_(1 - lr * opts_.weight_decay);
    exp_avg.lerp_(grads[i], 1 - beta1);
    exp_avg_sq.mul_(beta2).addcmul_(grads[i], grads[i], 1 - beta2);
    const double step = double(step_t.item<float>());
    const double bias_correction1 = 1 - std::pow(beta1, step);
    const double bias_correction2 = 1 - std::pow(beta2, step);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
    auto denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(opts_.eps);
    param.addcdiv_(exp_avg, denom, -step_size);
  }
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

StepHyper hyper_at(const TrainConfig& t, int64_t step) {
  StepHyper h{lr_at(t, step), t.beta1, t.beta2};
  if (t.deepspeed_scheduler.cycles_momentum()) {  // OneCycle sets the betas too
    const auto b = t.deepspeed_scheduler.betas(step);
    h.beta1 = b.beta1;
    h.beta2 = b.beta2;
  }
  return h;
}

double lr_at(const TrainConfig& t, int64_t step) {
  if (t.deepspeed_scheduler.active()) return t.deepspeed_scheduler.lr(t.lr, step);
  if (t.lr_schedule == "none") return t.lr;  // a DeepSpeed scheduler section without a type
  if (config::is_hf_schedule(t.lr_schedule))  // --lr-scheduler-type: transformers' get_scheduler
    return config::hf_schedule_lr({config::hf_schedule_type(t.lr_schedule), t.lr, t.lr_warmup_steps, t.steps,
                                   t.min_lr_ratio},
                                  step);
  if (t.lr_warmup_steps > 0 && step < t.lr_warmup_steps) return t.lr * double(step + 1) / double(t.lr_warmup_steps);
  if (t.lr_schedule == "constant") return t.lr;
  const int64_t decay_steps = std::max<int64_t>(1, t.steps - t.lr_warmup_steps - 1);
  const double progress = std::min(1.0, double(step - t.lr_warmup_steps) / double(decay_steps));
  const double min_lr = t.min_lr_ratio * t.lr;
  return min_lr + (t.lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

namespace {
at::TensorOptions fp32_on(const runtime::World& w) { return at::TensorOptions().dtype(at::kFloat).device(w.device); }
}  // namespace

at::Tensor torch_clip_grad_norm_(const std::vector<at::Tensor>& grads, double max_norm) {
  at::NoGradGuard no_grad;
  if (grads.empty()) return at::zeros({}, at::kFloat);
  // _get_total_norm: one group (every gradient shares device and dtype here).
  const auto norms = at::_foreach_norm(grads, 2);
  auto total = at::linalg_vector_norm(at::stack(norms), 2);
  if (max_norm > 0) {
    // _clip_grads_with_norm_: no `if coef < 1` (it would sync the host).
    auto coef = at::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
    at::_foreach_mul_(grads, coef);
  }
  return total;
}

at::Tensor fsdp1_clip_grad_norm_(const std::vector<at::Tensor>& grads, double max_norm, Comm& comm, bool replicated,
                                 const runtime::World* group) {
  at::NoGradGuard no_grad;
  // FSDP1 with every handle NO_SHARD returns torch.nn.utils.clip_grad_norm_ (all_no_shard).
  if (replicated) return torch_clip_grad_norm_(grads, max_norm);
  at::Tensor local;
  if (grads.empty()) {
    local = at::zeros({}, fp32_on(comm.world()));  // FSDP's _zero_scalar
  } else {
    std::vector<at::Tensor> norms;
    norms.reserve(grads.size());
    for (const auto& g : grads) norms.push_back(at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat));
    local = at::linalg_vector_norm(at::stack(norms), 2, c10::nullopt, false, at::kFloat);
  }
  auto total = local.pow(2);  // local_sharded_norm ** norm_type
  auto flat = total.view({1});
  comm.all_reduce_sum(flat, "grad_norm", group);
  total = total.pow(0.5);  // ** (1 / norm_type)
  if (max_norm > 0) {
    auto coef = at::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
    for (const auto& g : grads) {
      auto g_mut = g;
      g_mut.mul_(coef.to(g.device(), g.scalar_type()));
    }
  }
  return total;
}

at::Tensor deepspeed_grad_norm(const std::vector<at::Tensor>& partitions, Comm& comm) {
  at::NoGradGuard no_grad;
  const auto norm_dtype = at::kDouble;  // get_norm_dtype(): fp64 on CPU and CUDA
  at::Tensor total;
  if (partitions.empty()) {
    total = at::zeros({}, at::TensorOptions().dtype(norm_dtype).device(comm.world().device));
  } else {
    std::vector<at::Tensor> norms;
    norms.reserve(partitions.size());
    for (const auto& g : partitions) norms.push_back(g.to(norm_dtype).norm(2));
    total = at::sum(at::pow(at::stack(norms), 2));
  }
  auto flat = total.view({1});
  comm.all_reduce_sum(flat, "grad_norm");
  return total.pow(0.5);
}

at::Tensor deepspeed_clip_factor(const at::Tensor& norm, double clip) {
  if (clip <= 0) return at::ones({}, norm.options());
  auto c = at::clamp((norm + 1e-6) / clip, 1.0);  // clip = ((total_norm / loss_scale) + 1e-6) / clip_grad
  return 1.0 / c;                                   // grad.mul_(1. / combined_scale)
}

}  // namespace zb::backends::common
