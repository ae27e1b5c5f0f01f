// fsdp2_state.hpp — FSDP2-mode's module hooks (torch 2.11 _fully_shard/_fsdp_state.py FSDPState):
// the root's pre-forward (streams wait the optimizer, the root's and the embedding's
// pre-forwards), each state's _pre_forward (unshard, wait, the post-backward hook on the inputs,
// explicit forward prefetch), _post_forward (reshard, the pre-backward hook on the output,
// output_dtype), the forward root's post-forward on the loss, _pre_backward (queues the root
// post-backward final callback once per backward, explicit backward prefetch) and
// _root_post_backward_final_callback.
// Owns: when a group's FSDPParamGroup steps run, and the autograd glue that triggers them
// (RegisterPostBackward, tensor hooks, the autograd engine's final callback). Must not: do a
// group's work itself (fsdp2_param_group.cpp), issue collectives, or know the model's units
// (the engine maps units to groups and calls in).
#pragma once
#include <ATen/ATen.h>

#include "backends/fsdp2/fsdp2_param_group.hpp"

namespace zb::backends::fsdp2 {

class State {
 public:
  explicit State(ParamGroups& pg) : pg_(pg) {}
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  int embed_group = -1, tail_group = -1;  // accelerate's embedding / [final norm, LM head] groups, or -1

  // Whether the iteration's forward root has run its pre-forward (reset by root_post_forward).
  bool iter_forward_root() const { return iter_forward_root_; }

  // _root_pre_forward + the pre-forwards that run before the first block.
  void root_pre_forward();
  // _pre_forward / _post_forward of group `gi`'s state around a module.
  at::Tensor pre_forward(int gi, at::Tensor input);
  at::Tensor post_forward(int gi, at::Tensor output);
  // The loss: the tail's and the root's post-forward, their pre-backward hooks, the forward
  // root's release of the held all-gather output, output_dtype.
  at::Tensor root_post_forward(at::Tensor out);
  void pre_backward(int gi);
  void root_post_backward_final_callback();

 private:
  ParamGroups& pg_;
  bool iter_forward_root_ = false;
  bool final_callback_queued_ = false;
};

}  // namespace zb::backends::fsdp2
