// zero3_cpu_adam.cpp — see zero3_cpu_adam.hpp (DeepSpeedCPUAdam's arithmetic, csrc/includes/
// cpu_adam.h Adam_Optimizer::Step_AVX / IncrementStep / update_state).
#include "backends/zero3/zero3_cpu_adam.hpp"

#include <ATen/Parallel.h>

#include <cmath>

namespace zb::backends::zero3 {

CpuAdam::CpuAdam(at::Tensor param, common::AdamWOptions opts) : param_(std::move(param)), opts_(opts) {
  TORCH_CHECK(param_.device().is_cpu() && param_.scalar_type() == at::kFloat && param_.is_contiguous(),
              "CpuAdam: the parameter must be a contiguous fp32 host tensor");
  // DeepSpeedCPUAdam.step: state created at the first step (zeros_like, fp32); made here so the
  // bytes are there from the start, as the engine's closed form counts them.
  beta1_ = float(opts_.beta1);  // create_adam(lr, betas[0], betas[1], ...): float parameters
  beta2_ = float(opts_.beta2);
  exp_avg_ = at::zeros_like(param_);
  exp_avg_sq_ = at::zeros_like(param_);
  step_tensor_ = at::zeros({}, at::kLong);
}

void CpuAdam::step(const at::Tensor& grad, const StepHyper& h) {
  const double lr = h.lr;
  TORCH_CHECK(grad.device().is_cpu() && grad.scalar_type() == at::kFloat && grad.is_contiguous() &&
                  grad.numel() == param_.numel(),
              "CpuAdam: the gradient must be a contiguous fp32 host tensor of the parameter's size");
  ++step_;
  step_tensor_.fill_(step_);
  // IncrementStep(step, beta1, beta2) with group['betas'] (adam_update's float parameters): new
  // betas restart the products at pow(beta, step) (std::pow(float, size_t): in double); the same
  // betas at the next step multiply the running products in float.
  const float b1 = float(h.beta1), b2 = float(h.beta2);
  if (b1 != beta1_ || b2 != beta2_) {
    ds_step_ = step_;
    beta1_ = b1;
    beta2_ = b2;
    beta1_t_ = float(std::pow(double(b1), double(step_)));
    beta2_t_ = float(std::pow(double(b2), double(step_)));
  } else if (step_ == ds_step_ + 1) {
    ++ds_step_;
    beta1_t_ *= b1;
    beta2_t_ *= b2;
  } else if (step_ != ds_step_) {
    beta1_t_ = float(std::pow(double(b1), double(step_)));
    beta2_t_ = float(std::pow(double(b2), double(step_)));
    ds_step_ = step_;
  }
  // update_state(lr, eps, weight_decay, bias_correction=true).
  const float alpha = float(lr), eps = float(opts_.eps), wd = float(opts_.weight_decay);
  const float bias_correction1 = 1.0f - beta1_t_;
  const float bias_correction2 = 1.0f / std::sqrt(1.0f - beta2_t_);
  // Step_AVX's constants.
  const float b1m = 1.0f - b1, b2m = 1.0f - b2;
  const float step_size = -1.0f * alpha / bias_correction1;
  const float w_decay = -1.0f * alpha * wd;
  float* p = param_.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg_.data_ptr<float>();
  float* v = exp_avg_sq_.data_ptr<float>();
  at::parallel_for(0, param_.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float gi = g[i];
      float mi = m[i] * b1;
      mi = std::fma(gi, b1m, mi);
      float vi = v[i] * b2;
      gi = gi * gi;
      vi = std::fma(gi, b2m, vi);
      gi = std::sqrt(vi);
      gi = std::fma(gi, bias_correction2, eps);
      gi = mi / gi;
      float pi = p[i];
      if (wd > 0) pi = std::fma(pi, w_decay, pi);  // adamw_mode
      pi = std::fma(gi, step_size, pi);
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
    }
  });
}

std::vector<std::pair<std::string, at::Tensor>> CpuAdam::state(const std::string& prefix) const {
  return {{prefix + "exp_avg", exp_avg_}, {prefix + "exp_avg_sq", exp_avg_sq_}, {prefix + "step", step_tensor_}};
}

// IncrementStep with a step that is not the next one: _betta1_t = std::pow(_betta1, step).
void CpuAdam::state_loaded() {
  step_ = step_tensor_.item<int64_t>();
  ds_step_ = step_;
  beta1_t_ = float(std::pow(beta1_, double(step_)));
  beta2_t_ = float(std::pow(beta2_, double(step_)));
}

}  // namespace zb::backends::zero3
