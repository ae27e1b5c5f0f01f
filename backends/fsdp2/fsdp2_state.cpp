// fsdp2_state.cpp — see fsdp2_state.hpp (torch 2.11 _fully_shard/_fsdp_state.py FSDPState,
// _fsdp_param_group.py RegisterPostBackwardFunction).
#include "backends/fsdp2/fsdp2_state.hpp"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include <utility>

#include "backends/common/autograd_pointer.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::fsdp2 {

namespace {

// _fsdp_param_group.py RegisterPostBackwardFunction: applied to a module's inputs in pre-forward;
// its backward (the gradient w.r.t. the module's inputs, i.e. after the module's whole backward)
// is the group's post-backward.
struct RegisterPostBackward : public torch::autograd::Function<RegisterPostBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, ParamGroups* groups,
                            int64_t group) {
    common::save_pointer(ctx, "groups", groups);
    ctx->saved_data["group"] = group;
    return input.view_as(input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* groups = static_cast<ParamGroups*>(common::load_pointer(ctx, "groups"));
    groups->post_backward(int(ctx->saved_data["group"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

// _root_pre_forward + the pre-forwards that run before the first block: the root state's and,
// under accelerate's grouping, the embedding's.
void State::root_pre_forward() {
  iter_forward_root_ = true;
  // _fsdp_state.py _root_pre_forward ("Wait for optimizer before implicitly prefetched
  // all-gathers"; no post_optim_event is offered): all_gather_copy_in_stream and
  // all_gather_stream .wait_stream(current_stream) — their only stream wait on compute; in forward
  // they otherwise wait only copy-out events.
  auto& s = pg_.streams();
  s.wait_stream(pg_.coll.copy_in_stream, s.current());
  s.wait_stream(pg_.coll.all_gather_stream, s.current());
  pg_.groups[0].forward_range = runtime::nvtx::start("forward " + pg_.groups[0].spec.label);
  pre_forward(0, at::Tensor());
  if (embed_group >= 0) pre_forward(embed_group, at::Tensor());
}

// _fsdp_state.py _pre_forward: the group's pre_forward, then the explicit forward prefetches.
at::Tensor State::pre_forward(int gi, at::Tensor input) {
  auto& g = pg_.groups[size_t(gi)];
  if (!g.params.empty()) {
    g.training = TrainingState::kForward;
    if (gi != 0) g.forward_range = runtime::nvtx::start("forward " + g.spec.label);
    pg_.unshard(gi, /*async_op=*/false);
    pg_.wait_for_unshard(gi);
    // _register_post_backward_hook: on inputs that require grad.
    if (input.defined() && at::GradMode::is_enabled() && input.requires_grad())
      input = RegisterPostBackward::apply(input, &pg_, int64_t(gi));
  }
  for (int t : g.forward_prefetch) pg_.prefetch_unshard(t, TrainingState::kForward);
  return input;
}

// _fsdp_state.py _post_forward for a non-root state: the group's post_forward (reshard, record
// post-forward order), the pre-backward hook on the output, output_dtype.
at::Tensor State::post_forward(int gi, at::Tensor output) {
  pg_.post_forward(gi);
  if (output.requires_grad()) output.register_hook([this, gi](const at::Tensor&) { pre_backward(gi); });
  if (pg_.dtypes.output && output.is_floating_point() && output.scalar_type() != *pg_.dtypes.output)
    output = output.to(*pg_.dtypes.output);
  return output;
}

// _fsdp_state.py _pre_backward.
void State::pre_backward(int gi) {
  if (!final_callback_queued_) {  // _register_root_post_backward_final_callback
    final_callback_queued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { root_post_backward_final_callback(); });
  }
  auto& g = pg_.groups[size_t(gi)];
  if (!g.params.empty()) pg_.pre_backward(gi, /*default_prefetch=*/g.backward_prefetch.empty());
  for (int t : g.backward_prefetch) pg_.prefetch_unshard(t, TrainingState::kPreBackward);
}

// _fsdp_state.py _root_post_backward_final_callback: post-backward for groups autograd did not
// reach (the root and the embedding: their inputs need no gradient), then (is_last_backward,
// the default) each state's finalize_backward; then the current stream waits the last
// reduce-scatter event and reduce_scatter_state is dropped.
void State::root_post_backward_final_callback() {
  auto& s = pg_.streams();
  for (int gi = 0; gi < int(pg_.groups.size()); ++gi) {
    auto& g = pg_.groups[size_t(gi)];
    if (!g.params.empty() && g.training != TrainingState::kPostBackward) pg_.post_backward(gi);
    g.training = TrainingState::kIdle;
    pg_.finalize_backward(gi);
  }
  pg_.post_forward_order.clear();
  pg_.coll.reduce_scatter_state.release(s, {s.current()});
  final_callback_queued_ = false;
}

// The loss: the tail's post-forward (after lm_head) and then the root's.
at::Tensor State::root_post_forward(at::Tensor out) {
  if (tail_group >= 0) pg_.post_forward(tail_group);
  pg_.post_forward(0);
  // Pre-backward hooks: the root's on the model output fires first; the tail's (on the logits
  // upstream) next — both on the loss here, registered in that order.
  if (out.requires_grad()) {
    out.register_hook([this](const at::Tensor&) { pre_backward(0); });
    if (tail_group >= 0) out.register_hook([this](const at::Tensor&) { pre_backward(tail_group); });
  }
  // _fsdp_state.py _post_forward of the iteration's forward root: the all-gather copy-in and
  // all-gather streams wait the last copy-out event, then the all-gather output held for overlap
  // is freed ([Note: Overlapping all-gather copy-in and all-gather]).
  pg_.coll.all_gather_state.release(pg_.streams(), {pg_.coll.copy_in_stream, pg_.coll.all_gather_stream});
  iter_forward_root_ = false;
  runtime::nvtx::end(std::exchange(pg_.groups[0].forward_range, 0));
  if (pg_.dtypes.output && out.scalar_type() != *pg_.dtypes.output) out = out.to(*pg_.dtypes.output);  // output_dtype
  return out;
}

}  // namespace zb::backends::fsdp2
