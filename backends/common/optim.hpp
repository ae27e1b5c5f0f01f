// optim.hpp — the optimizer pieces engines share, made of the ATen ops their upstream calls:
//  - AdamW = torch.optim.AdamW in each of its three implementations (config/adamw_impl.hpp):
//    fused=True is HF Trainer's default optimizer for torch >= 2.8 (transformers
//    training_args.py `default_optim = "adamw_torch_fused"`; trainer_optimizer.py passes
//    fused=True), for accelerate+FSDP1, FSDP2, DDP, and as DeepSpeed's client optimizer when the
//    DeepSpeed JSON has no "optimizer" section (the blog's): torch/optim/adam.py `_fused_adam`,
//    `_foreach_add_(state_steps, 1)` then `at::_fused_adamw_` over the tensor lists — no
//    full-size temporaries. `--optim adamw_torch` and DeepSpeed's `torch_adam` take torch's
//    foreach=None: `_multi_tensor_adam` on CUDA, `_single_tensor_adam` (one tensor at a time) on
//    CPU, op for op as torch 2.11 writes them, so each is bitwise the reference's.
//  - gradient norms and clipping as each framework computes them (see the functions below).
// Owns: that arithmetic, the LR schedule (and the betas a schedule sets), the lost-update diagnostic. Must not: know how the
// buffers were sharded.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "backends/common/comm.hpp"
#include "backends/engine.hpp"
#include "config/adamw_impl.hpp"

namespace zb::backends::common {

// The settings an AdamW is built with. beta1/beta2 are the constructor's betas (DeepSpeedCPUAdam's
// create_adam keeps them); every step takes that step's betas from its StepHyper.
struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  config::AdamWImpl impl = config::AdamWImpl::kFused;  // kTorchDefault resolves by the parameters' device
};
AdamWOptions adamw_options(const TrainConfig& train);

// torch.optim.AdamW over a list of parameter tensors (views are fine), updated in place by the
// implementation opts.impl names (kTorchDefault resolved by the parameters' device at
// construction: foreach on CUDA, the for-loop elsewhere). States exp_avg/exp_avg_sq are in the
// parameters' dtype (bf16 states for bf16 parameters — FSDP low precision — fp32 otherwise), one
// flat buffer each with a view per parameter (torch keeps a zeros_like per parameter: the same
// bytes); one fp32 step counter per parameter: on the parameters' device for fused
// (_get_scalar_dtype(is_fused=True), device=p.device), on the host otherwise (torch.tensor(0.0)),
// as torch keeps them.
class AdamW {
 public:
  AdamW(std::vector<at::Tensor> params, AdamWOptions opts);
  config::AdamWImpl impl() const { return opts_.impl; }  // resolved: never kTorchDefault
  // grads[i]: same numel and dtype as params[i]; h: this step's lr and betas (torch reads
  // group['betas'] at every step, so a scheduler that sets them changes the update and the bias
  // corrections 1 - beta^step from that step on).
  void step(const std::vector<at::Tensor>& grads, const StepHyper& h);
  int64_t state_bytes() const { return int64_t(exp_avg_flat_.nbytes() + exp_avg_sq_flat_.nbytes()); }
  int64_t steps_taken() const { return step_; }
  // Checkpoints: the live state tensors, named prefix + exp_avg / exp_avg_sq (the flat buffers)
  // / step (the per-parameter fp32 step counters, one flat buffer [P] of which each counter is a
  // view); after they are overwritten, state_loaded() re-reads the step count from them.
  std::vector<std::pair<std::string, at::Tensor>> state(const std::string& prefix) const;
  void state_loaded();

  // The precision diagnostic: when on, each step also counts the elements whose update
  // (computed in fp32 from the step's states) is smaller than half an ulp of the weight in the
  // stored dtype, i.e. lost to rounding. Zero weights (padding) are not counted.
  void set_measure_lost_updates(bool on) { measure_ = on; }
  LostUpdates last_lost_updates() const { return lost_; }

 private:
  void step_fused(const std::vector<at::Tensor>& grads, const StepHyper& h);
  void step_foreach(const std::vector<at::Tensor>& grads, const StepHyper& h);
  void step_for_loop(const std::vector<at::Tensor>& grads, const StepHyper& h);
  std::vector<at::Tensor> params_, exp_avgs_, exp_avg_sqs_, state_steps_;
  at::Tensor exp_avg_flat_, exp_avg_sq_flat_, state_steps_flat_;
  AdamWOptions opts_;
  int64_t step_ = 0;
  bool measure_ = false;
  LostUpdates lost_;
};

// Elements of `w` (in its own dtype) for which |delta| < ulp(w)/2 while delta != 0.
LostUpdates count_lost_updates(const at::Tensor& w, const at::Tensor& delta_fp32);

// Learning rate at optimizer step `step` (0-based, counting the steps that advanced the schedule):
// DeepSpeed's scheduler when the config has one (config/deepspeed_scheduler.hpp); the optimizer's
// lr for a scheduler section without a type; otherwise zerobench's own schedule: linear warm-up
// over lr_warmup_steps, then constant or cosine decay to min_lr_ratio * lr at the last step.
double lr_at(const TrainConfig& train, int64_t step);
// Optimizer step `step`'s hyper-parameters (counted as lr_at counts): lr_at's lr and AdamW's betas —
// the configured beta1/beta2, or the (momentum, 0.99) a DeepSpeed OneCycle scheduler with
// cycle_momentum sets (config/deepspeed_scheduler_value.hpp betas()).
StepHyper hyper_at(const TrainConfig& train, int64_t step);
// A step at `lr` with the configured betas (tests; an optimizer step outside the schedule).
inline StepHyper configured_hyper(const TrainConfig& train, double lr) { return {lr, train.beta1, train.beta2}; }

// ---- gradient norms: each returns the global L2 norm as a 0-dim fp32/fp64 tensor (no host
// sync) and clips in place when max_norm > 0 ----

// FSDP1's FullyShardedDataParallel.clip_grad_norm_ (fully_sharded_data_parallel.py, which
// accelerate calls for FSDP1): local norm = vector_norm(stack([vector_norm(g, 2, dtype=fp32) for
// g in grads])) (_get_grad_norm), squared, all-reduced over `group` (none when `replicated`:
// NO_SHARD calls torch's clip_grad_norm_ instead), sqrt; then every grad *= clamp(max_norm /
// (norm + 1e-6), max=1) cast to its dtype. `grads` are the per-original-parameter views
// (use_orig_params=True: the optimizer sees the original parameters).
at::Tensor fsdp1_clip_grad_norm_(const std::vector<at::Tensor>& grads, double max_norm, Comm& comm, bool replicated,
                                 const runtime::World* group = nullptr);

// torch.nn.utils.clip_grad_norm_(foreach=None) (clip_grad.py _get_total_norm and
// _clip_grads_with_norm_; foreach is taken on CPU and CUDA): norms = _foreach_norm(grads, 2),
// total = vector_norm(stack(norms)); grads multiplied by clamp(max_norm / (total + 1e-6), max=1)
// with _foreach_mul_. The gradients are replicated (DDP): no collective.
at::Tensor torch_clip_grad_norm_(const std::vector<at::Tensor>& grads, double max_norm);

// DeepSpeed ZeRO-3's get_grad_norm_direct (stage3.py) for one sub-group: for each gradient
// partition g.to(float64).norm(2) (utils.get_norm_dtype: fp64 where the device has it), sum of
// squares, all-reduced over the data-parallel group, ** 0.5. The engine combines the
// sub-groups' norms (combine_grad_norm_groups); clipping is deepspeed_clip_factor's.
at::Tensor deepspeed_grad_norm(const std::vector<at::Tensor>& partitions, Comm& comm);
// stage3 unscale_and_clip_grads: 1 / clamp((norm + 1e-6) / clip, min=1) (loss scale 1 for bf16).
at::Tensor deepspeed_clip_factor(const at::Tensor& norm, double clip);

}  // namespace zb::backends::common
