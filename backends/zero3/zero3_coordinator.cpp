// zero3_coordinator.cpp — the ZeRO3-mode engine's fetch and release schedule
// (zero3_engine_impl.hpp): the module hooks of forward and backward, the trace of module order
// recorded in the first micro-batch, fetch_sub_module with its prefetch (stage3_prefetch_bucket_
// size, stage3_max_live_parameters) and release_sub_module (stage3_max_reuse_distance,
// persistence). Upstream: deepspeed/runtime/zero/parameter_offload.py (_post_forward_module_hook,
// PreBackwardFunctionForModule, _pre_backward_module_hook), partitioned_param_coordinator.py
// (fetch_sub_module, release_sub_module, __params_to_release, trace). Must not: issue the
// all-gathers itself (zero3_partition.cpp) or reduce gradients (zero3_optimizer.cpp).
#include <torch/csrc/autograd/engine.h>

#include <algorithm>

#include "backends/zero3/zero3_engine_impl.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::zero3 {

at::Tensor Zero3Engine::module_weight(int unit, int index) {
  const int id = unit_first_[size_t(unit)] + index;
  if (unit == models::kRootUnit && index == 0) begin_micro_batch();
  // "forward unitN" spans a block's modules; the root's ("forward unit0") opens at the
  // embedding and closes after the LM head, so it nests the blocks' (as FSDP-mode's root does).
  if (index == 0) {
    auto& range = unit == models::kRootUnit ? root_forward_range_ : forward_range_;
    range = runtime::nvtx::start("forward unit" + std::to_string(unit));
  }
  release_held();  // the previous module's post-forward
  fetch(id);
  held_.push_back(id);
  return weight_view(id);
}

at::Tensor Zero3Engine::after_module_forward(int unit, int index, at::Tensor output) {
  streams().op("forward module " + module_name(unit, index), {params_[size_t(unit_first_[size_t(unit)] + index)].full});
  // parameter_offload.py _post_forward_module_hook -> PreBackwardFunctionForModule on the
  // outputs: the module's parameters are fetched when its output's gradient arrives.
  if (output.requires_grad())
    output.register_hook([this, unit, index](const at::Tensor&) { pre_backward_module(unit, index); });
  return output;
}

// Activation checkpointing takes a whole block at once: fetch every weight, release them
// together after the block; its recompute in backward needs them all again.
std::vector<at::Tensor> Zero3Engine::unit_weights(int unit) {
  if (forward_range_ == 0) forward_range_ = runtime::nvtx::start("forward unit" + std::to_string(unit));
  release_held();
  std::vector<at::Tensor> out;
  const int n = int(models::unit_specs(spec_.model, unit).size());
  for (int i = 0; i < n; ++i) {
    const int id = unit_first_[size_t(unit)] + i;
    fetch(id);
    held_.push_back(id);
    out.push_back(weight_view(id));
  }
  checkpointed_.push_back(unit);
  return out;
}

at::Tensor Zero3Engine::after_unit_forward(int unit, at::Tensor output) {
  release_held();
  streams().op("forward unit" + std::to_string(unit));
  runtime::nvtx::end(std::exchange(unit == models::kRootUnit ? root_forward_range_ : forward_range_, 0));
  if (output.requires_grad()) output.register_hook([this, unit](const at::Tensor&) { pre_backward(unit); });
  return output;
}

// ---- backward ----
// "backward unitN" spans from the unit's pre-backward to the next one's (or the end of backward).
void Zero3Engine::pre_backward(int unit) {
  runtime::nvtx::end(std::exchange(backward_range_, 0));
  backward_range_ = runtime::nvtx::start("backward unit" + std::to_string(unit));
  if (unit == models::kRootUnit) {
    torch::autograd::Engine::get_default_engine().queue_callback([this] { end_of_backward(); });
    return;
  }
  // A checkpointed block (HF's non-reentrant torch.utils.checkpoint of the layer's forward) is
  // one autograd node here; its weights are fetched in the order DeepSpeed's hooks fetch them:
  // the last module's pre-backward hook fetches it, and its backward's first saved tensor starts
  // the recompute; the recomputed forward's module hooks fetch modules 0..n-2 and release each
  // after its forward (every one while the trace is recorded; with a complete trace those used
  // again within stage3_max_reuse_distance stay) — it stops early inside the last module
  // (torch.utils.checkpoint's early stop), which stays; then each module's pre-backward hook
  // fetches it again, in reverse. While the trace is recorded that is n - 1 all-gathers more than
  // fetching the block once (measured against DeepSpeed 0.19.8, docs/crossval.md); with a
  // complete trace none. Other blocks fetch module by module (pre_backward_module).
  if (std::find(checkpointed_.begin(), checkpointed_.end(), unit) != checkpointed_.end()) {
    const int first = unit_first_[size_t(unit)];
    const int n = int(models::unit_specs(spec_.model, unit).size());
    fetch(first + n - 1);
    for (int i = 0; i < n - 1; ++i) {
      fetch(first + i);
      release_if_allowed(first + i);
    }
    for (int i = n - 2; i >= 0; --i) fetch(first + i);
  }
}

void Zero3Engine::pre_backward_module(int unit, int index) {  // _pre_backward_module_hook: fetch_sub_module
  fetch(unit_first_[size_t(unit)] + index);
}

void Zero3Engine::begin_micro_batch() {
  fetch_step_ = 0;
  prefetch_pos_ = 0;
  if (!trace_complete_) trace_.clear();
  // The model's own fetch (LlamaForCausalLM, no parameters of its own) comes first in
  // DeepSpeed's module trace: with a complete trace it prefetches from the head of the
  // parameter queue, so the first bucket includes the embedding itself
  // (partitioned_param_coordinator.py, _fetch_sub_module_impl).
  if (trace_complete_) prefetch(0);
}

void Zero3Engine::release_held() {
  for (int id : held_) release_if_allowed(id);
  held_.clear();
}

int64_t Zero3Engine::live_numel() const {
  int64_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].available) n += layout_[i].numel;
  return n;
}

// fetch_sub_module (partitioned_param_coordinator.py): all-gather this module's parameter if
// needed (on the all-gather stream), wait for it there, make the compute stream wait for the
// all-gather stream; then (with a complete trace) prefetch the upcoming ones in trace order,
// up to stage3_prefetch_bucket_size elements and within stage3_max_live_parameters, as one
// coalesced all-gather left in flight.
void Zero3Engine::fetch(int id) {
  if (!trace_complete_) trace_.push_back(id);
  const size_t step = fetch_step_++;
  auto& s = streams();
  if (!params_[size_t(id)].available) issue_all_gather({id}, "module", allgather_stream_);
  if (params_[size_t(id)].inflight) {
    Streams::Guard on_allgather(s, allgather_stream_);
    // __ongoing_fetch_events: drop completed ones; with more than two outstanding, the host
    // waits for the oldest before waiting for this parameter.
    while (!fetch_events_.empty() && s.query(fetch_events_.front())) fetch_events_.pop_front();
    if (fetch_events_.size() > kMaxOngoingFetchEvents) {
      s.synchronize(fetch_events_.front());
      fetch_events_.pop_front();
    }
    complete_gather_of(id);  // handle.wait() on the all-gather stream
    fetch_events_.push_back(s.record(allgather_stream_, "fetched"));
  }
  s.wait_stream(s.compute(), allgather_stream_);  // current_stream().wait_stream(__allgather_stream)
  if (trace_complete_) prefetch(step + 1);
}

// Prefetch the upcoming parameters in trace order from position `from`, up to
// stage3_prefetch_bucket_size elements within stage3_max_live_parameters, as one coalesced
// all-gather left in flight on the all-gather stream.
void Zero3Engine::prefetch(size_t from) {
  if (opts_.stage3_prefetch_bucket_size <= 0) return;
  std::vector<int> to_prefetch;
  int64_t prefetching = 0;
  const int64_t live = live_numel();
  size_t pos = std::max(prefetch_pos_, from);
  for (; pos < trace_.size() && prefetching < opts_.stage3_prefetch_bucket_size; ++pos) {
    const int next = trace_[pos];
    if (params_[size_t(next)].available ||
        std::find(to_prefetch.begin(), to_prefetch.end(), next) != to_prefetch.end())
      continue;
    const int64_t n = layout_[size_t(next)].numel;
    if (live + prefetching + n > opts_.stage3_max_live_parameters) break;
    to_prefetch.push_back(next);
    prefetching += n;
  }
  prefetch_pos_ = pos;
  if (!to_prefetch.empty()) issue_all_gather(to_prefetch, "prefetch", allgather_stream_);
}

// __params_to_release: never persistent ones; with a complete trace keep a parameter that
// is used again within stage3_max_reuse_distance elements of upcoming fetches.
// While the trace is being recorded DeepSpeed releases every parameter of a module after
// use, persistent ones included: release_sub_module filters ds_persist only through
// __params_to_release, which needs a complete trace (partitioned_param_coordinator.py).
void Zero3Engine::release_if_allowed(int id) {
  if (layout_[size_t(id)].persistent && trace_complete_) return;
  if (trace_complete_) {
    int64_t traversed = 0;
    for (size_t pos = fetch_step_; pos < trace_.size(); ++pos) {
      if (traversed >= opts_.stage3_max_reuse_distance) break;
      if (trace_[pos] == id) return;
      traversed += layout_[size_t(trace_[pos])].numel;
    }
  }
  release(id);
}

}  // namespace zb::backends::zero3
