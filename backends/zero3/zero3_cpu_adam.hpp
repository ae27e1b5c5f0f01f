// zero3_cpu_adam.hpp — DeepSpeedCPUAdam's update (deepspeed/ops/adam/cpu_adam.py, the op in
// csrc/adam/cpu_adam_impl.cpp and csrc/includes/cpu_adam.h), which ZeRO-3 with
// offload_optimizer device cpu runs on each host fp32 sub-group (stage3.py _optimizer_step).
// Owns: that arithmetic, element by element in fp32 and in DeepSpeed's order, and its states
// (exp_avg, exp_avg_sq in fp32: fp32_optimizer_states true; the step a plain counter, as
// state['step'] is a Python int). Must not: know sub-groups, streams or where gradients came from.
//
// The order (Adam_Optimizer::Step_AVX; this machine builds the op with -march=native and
// -D__AVX512__, so every a*b+c below is one fused multiply-add, std::fma here):
//   m = m*b1;  m = fma(g, 1-b1, m)
//   v = v*b2;  v = fma(g*g, 1-b2, v)
//   d = fma(sqrt(v), bc2, eps)       with bc2 = 1/sqrt(1 - b2^t)
//   u = m / d
//   p = fma(p, -lr*wd, p)            (adamw_mode, wd > 0)
//   p = fma(u, -lr/(1 - b1^t), p)
// b1^t, b2^t: running float products (IncrementStep: _betta1_t *= _betta1 each new step), or
// pow(b, t) when a step's betas differ from the last step's (a scheduler that sets group['betas'],
// DeepSpeed's OneCycle with cycle_momentum; the first step compares with the constructor's betas).
// torch.optim.AdamW divides differently (denom = sqrt(v)/sqrt(bc2) + eps, step lr/bc1, decay
// p *= 1 - lr*wd first), so the two agree to rounding, not bitwise.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "backends/common/optim.hpp"

namespace zb::backends::zero3 {

class CpuAdam {
 public:
  // `param`: a contiguous fp32 host tensor (the sub-group's master), updated in place.
  CpuAdam(at::Tensor param, common::AdamWOptions opts);
  // ds_adam_step: one step with the fp32 gradient `grad` (same numel) at h's lr and betas.
  void step(const at::Tensor& grad, const StepHyper& h);
  int64_t state_bytes() const { return int64_t(exp_avg_.nbytes() + exp_avg_sq_.nbytes()); }
  int64_t steps_taken() const { return step_; }
  // Checkpoints: exp_avg, exp_avg_sq and the step (an int64 scalar tensor).
  std::vector<std::pair<std::string, at::Tensor>> state(const std::string& prefix) const;
  void state_loaded();

 private:
  at::Tensor param_, exp_avg_, exp_avg_sq_, step_tensor_;
  common::AdamWOptions opts_;
  int64_t step_ = 0;  // state['step']
  // The C++ Adam_Optimizer's own: _betta1/_betta2 (the constructor's, then the last step's) and
  // _step, which IncrementStep compares with.
  float beta1_ = 0.9f, beta2_ = 0.999f;
  int64_t ds_step_ = 0;
  float beta1_t_ = 1.0f, beta2_t_ = 1.0f;
};

}  // namespace zb::backends::zero3
