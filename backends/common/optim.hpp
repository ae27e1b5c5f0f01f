// optim.hpp — the optimizer pieces all engines share: AdamW over one flat (sharded or whole)
// buffer, the learning-rate schedule, and global gradient-norm clipping across ranks.
// Owns: the AdamW arithmetic (torch.optim.AdamW, decoupled weight decay, bias correction) in
// the dtype of its states. Must not: know how the buffer was sharded.
#pragma once
#include <ATen/ATen.h>

#include <vector>

#include "backends/common/comm.hpp"
#include "backends/engine.hpp"

namespace zb::backends::common {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};
AdamWOptions adamw_options(const TrainConfig& train);

// AdamW on a flat parameter buffer, updated in place; states exp_avg/exp_avg_sq share the
// parameter's dtype (bf16 states for a bf16 buffer — FSDP low precision — fp32 otherwise).
// One pass of whole-buffer ops over contiguous memory.
class FlatAdamW {
 public:
  FlatAdamW(at::Tensor param, AdamWOptions opts);
  // grad: same numel as param, any float dtype (cast to the state dtype first).
  void step(const at::Tensor& grad, double lr);
  int64_t state_bytes() const { return int64_t(exp_avg_.nbytes() + exp_avg_sq_.nbytes()); }
  int64_t steps_taken() const { return step_; }

  // The precision diagnostic: when on, each step also counts the elements whose update
  // (computed in fp32 from the step's states) is smaller than half an ulp of the weight in the
  // stored dtype, i.e. lost to rounding. Zero weights (padding) are not counted.
  void set_measure_lost_updates(bool on) { measure_ = on; }
  LostUpdates last_lost_updates() const { return lost_; }

 private:
  at::Tensor param_, exp_avg_, exp_avg_sq_;
  AdamWOptions opts_;
  int64_t step_ = 0;
  bool measure_ = false;
  LostUpdates lost_;
};

// Elements of `w` (in its own dtype) for which |delta| < ulp(w)/2 while delta != 0.
LostUpdates count_lost_updates(const at::Tensor& w, const at::Tensor& delta_fp32);

// Learning rate at optimizer step `step` (0-based): DeepSpeed's schedule when train.lr_schedule
// names one; otherwise linear warm-up over lr_warmup_steps, then
// constant or cosine decay to min_lr_ratio * lr at the last step.
double lr_at(const TrainConfig& train, int64_t step);

// sqrt of the sum of squares of `local_grads` over all ranks; each element of the global
// gradient must live on exactly one rank (shards) unless `replicated` (then no collective).
double global_grad_norm(const std::vector<at::Tensor>& local_grads, Comm& comm, bool replicated,
                        const runtime::World* group = nullptr);
// torch.nn.utils.clip_grad_norm_'s coefficient: min(1, max_norm / (norm + 1e-6)); 1 if max_norm <= 0.
double clip_coefficient(double total_norm, double max_norm);

}  // namespace zb::backends::common
