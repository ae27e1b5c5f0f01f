// fsdp2_param_group.cpp — see fsdp2_param_group.hpp (torch 2.11 _fully_shard/_fsdp_param_group.py
// FSDPParamGroup). Every stream wait below names the upstream function it mirrors.
#include "backends/fsdp2/fsdp2_param_group.hpp"

#include <utility>

#include "backends/common/storage.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::fsdp2 {

at::Tensor ParamGroups::grad_view(const Param& p) const {
  if (offloads()) return p.host_grad;
  const auto& g = groups[size_t(p.group)];
  if (!g.grad.defined()) return at::Tensor();
  return g.grad.narrow(0, p.grad_offset, p.l.local_numel());
}

const runtime::World& ParamGroups::all_gather_group(const Group& g) const {
  return g.sharded == ShardedState::kShardedPostForward ? coll.post_forward_group : coll.shard_group;
}

int64_t ParamGroups::unsharded_bytes(const Group& g) const {
  int64_t n = 0;
  for (int id : g.params) n += common::storage_bytes(params[size_t(id)].all_gather_output);
  return n;
}

void ParamGroups::notify(const char* event, int g) {
  if (observer) observer(event, g, groups[size_t(g)].spec.label, unsharded_bytes(groups[size_t(g)]));
}

void ParamGroups::post_forward(int gi) {
  auto& g = groups[size_t(gi)];
  if (g.params.empty()) return;
  reshard(gi);
  g.post_forward_indices.push_back(int(post_forward_order.size()));  // _record_post_forward
  post_forward_order.push_back(gi);
  g.training = TrainingState::kIdle;
  notify("post_forward", gi);
  if (gi != 0) runtime::nvtx::end(std::exchange(g.forward_range, 0));
}

void ParamGroups::pre_backward(int gi, bool default_prefetch) {
  auto& g = groups[size_t(gi)];
  if (g.training == TrainingState::kPreBackward) return;
  g.training = TrainingState::kPreBackward;
  g.backward_range = runtime::nvtx::start("backward " + g.spec.label);
  unshard(gi, false);  // no-op if prefetched or never resharded
  wait_for_unshard(gi);
  notify("pre_backward", gi);
  if (default_prefetch) backward_prefetch(gi);
}

// _backward_prefetch: the group before this one in post-forward order (reverse order in backward).
void ParamGroups::backward_prefetch(int gi) {
  auto& g = groups[size_t(gi)];
  if (g.post_forward_indices.empty()) return;
  const int cur = g.post_forward_indices.back();
  g.post_forward_indices.pop_back();
  if (cur - 1 < 0) return;
  prefetch_unshard(post_forward_order[size_t(cur - 1)], TrainingState::kPreBackward);
}

// _prefetch_unshard: the target's unshard under the pass's training state; waited for in its own
// pre-forward / pre-backward.
void ParamGroups::prefetch_unshard(int target, TrainingState state) {
  auto& t = groups[size_t(target)];
  if (t.params.empty()) return;
  const auto saved = std::exchange(t.training, state);
  unshard(target, /*async_op=*/false);
  t.training = saved;
}

// unshard -> foreach_all_gather: on the copy-in stream the copy-in (cast to param_dtype) into
// this rank's slot of the all-gather output; on the all-gather stream the all-gather and its event.
void ParamGroups::unshard(int gi, bool async_op) {
  auto& g = groups[size_t(gi)];
  if (g.all_gather || g.sharded == ShardedState::kUnsharded || g.params.empty()) return;
  auto& s = streams();
  // _fsdp_param_group.py unshard: "Resharded parameter data is allocated in the default stream
  // and used in the all-gather streams" -> _wait_all_gather_streams_on_event(
  // _reshard_after_forward_event).
  if (g.reshard_after_forward_event.recorded()) {
    coll.wait_all_gather_streams_on_event(g.reshard_after_forward_event);
    g.reshard_after_forward_event = common::StreamEvent();
  }
  const int world = all_gather_world(g);
  AllGatherResult r;
  if (world == 1) {
    r.world = world;
    r.async_op = async_op;
    // unshard, world_size == 1: AllGatherResult(all_gather_event=Event().record()) on the current stream.
    r.event = s.record(s.current(), "all_gather " + g.spec.label);
  } else {
    std::vector<at::Tensor> sources;
    for (int id : g.params) sources.push_back(all_gather_input(params[size_t(id)], g.sharded));
    // CPUOffloadPolicy: the sharded state's inputs are host shards (a post-forward shard is not).
    const bool from_host = offloads() && g.sharded == ShardedState::kSharded;
    r = coll.foreach_all_gather(sources, dtypes.param, dtypes.compute(), all_gather_group(g), async_op, g.training,
                                g.spec.label, from_host);
  }
  g.all_gather = std::move(r);
  notify("unshard", gi);
}

// wait_for_unshard -> foreach_all_gather_copy_out: split-with-sizes copy of the output
// ([world, sum] viewed) into every parameter's all-gather output ([world, padded shard] viewed),
// on the current stream.
void ParamGroups::wait_for_unshard(int gi) {
  auto& g = groups[size_t(gi)];
  if (!g.all_gather) return;
  at::NoGradGuard no_grad;
  auto& s = streams();
  auto& r = *g.all_gather;
  const std::string& label = g.spec.label;
  // wait_for_unshard, implicit forward prefetch: the previous group's all-gather output (held in
  // comm_ctx.all_gather_state since its copy-out) is freed after the all-gather streams wait its
  // copy-out event — after this group's copy-in, which therefore wrote into different memory.
  if (g.training == TrainingState::kForward)
    coll.all_gather_state.release(s, {coll.copy_in_stream, coll.all_gather_stream});
  if (r.world == 1) {
    // wait_for_unshard, world_size == 1: each all_gather_inputs[0] (host->device with offload)
    // copied into the parameter's all-gather output.
    std::vector<at::Tensor> sources;
    for (int id : g.params) sources.push_back(all_gather_input(params[size_t(id)], g.sharded));
    const bool from_host = offloads() && g.sharded == ShardedState::kSharded;
    if (from_host) sources = coll.all_gather_inputs(sources, std::nullopt, true, label);
    for (size_t k = 0; k < g.params.size(); ++k) {
      auto& p = params[size_t(g.params[k])];
      alloc_all_gather_output(p);
      p.all_gather_output.copy_(sources[k]);
    }
  } else {
    std::vector<Param*> ps;
    for (int id : g.params) ps.push_back(&params[size_t(id)]);
    coll.foreach_all_gather_copy_out(r, ps, label);
  }
  if (g.sharded == ShardedState::kShardedPostForward)  // to_unsharded frees the post-forward shard
    for (int id : g.params) params[size_t(id)].post_forward_data = at::Tensor();
  g.sharded = ShardedState::kUnsharded;
  const auto copy_out = s.record(s.current(), "all_gather copy-out " + label);  // all_gather_copy_out_event
  if (!r.async_op && g.training == TrainingState::kForward && r.world > 1) {
    // "Defer free to allow for overlap of this copy-out with next all-gather collective":
    // comm_ctx.all_gather_state = AllGatherState(all_gather_result, copy-out event).
    coll.all_gather_state = common::HeldTensors{{r.output}, copy_out};
  } else {
    coll.wait_all_gather_streams_on_event(copy_out);  // then the result is freed below
  }
  g.all_gather.reset();
  notify("wait_for_unshard", gi);
}

void ParamGroups::reshard(int gi) {
  auto& g = groups[size_t(gi)];
  if (g.training == TrainingState::kForward) {
    if (g.reshard_after_forward == kReshardFalse) return;
    if (g.reshard_after_forward > 1) {
      to_sharded_post_forward(gi);
      // reshard: _reshard_after_forward_event recorded on the current stream after the clone;
      // the next unshard's all-gather streams wait it.
      g.reshard_after_forward_event = streams().record(streams().current(), "reshard_after_forward " + g.spec.label);
      return;
    }
  }
  if (g.sharded == ShardedState::kSharded) return;
  for (int id : g.params) free_unsharded_param(params[size_t(id)]);  // to_sharded
  g.sharded = ShardedState::kSharded;
  notify("reshard", gi);
}

// to_sharded_post_forward: keep this rank's 1/N of the unsharded data (a clone), free the rest.
void ParamGroups::to_sharded_post_forward(int gi) {
  auto& g = groups[size_t(gi)];
  if (g.sharded != ShardedState::kUnsharded) return;
  at::NoGradGuard no_grad;
  const int n_ranks = coll.post_forward_group.size, r = coll.post_forward_group.rank;
  for (int id : g.params) fsdp2::to_sharded_post_forward(params[size_t(id)], n_ranks, r);
  g.sharded = ShardedState::kShardedPostForward;
  notify("reshard_post_forward", gi);
}

// post_backward: accumulate / reshard / reduce (or hold the unsharded gradients without sync).
void ParamGroups::post_backward(int gi) {
  auto& g = groups[size_t(gi)];
  if (g.params.empty()) return;
  at::NoGradGuard no_grad;
  streams().op("backward " + g.spec.label);  // the group's gradient computation (current stream)
  g.training = TrainingState::kPostBackward;
  for (int id : g.params) accumulate_unsharded_grad_if_needed(params[size_t(id)]);
  if (!g.reduce_grads) {
    reshard(gi);  // reshard_after_backward
    for (int id : g.params) to_accumulated_grad_if_needed(params[size_t(id)], dtypes.reduce);
    notify("post_backward", gi);
    runtime::nvtx::end(std::exchange(g.backward_range, 0));
    return;
  }
  std::vector<at::Tensor> grads;
  for (int id : g.params) {
    grads.push_back(take_unsharded_grad(params[size_t(id)]));
    // Every parameter of this model gets a gradient; a missing one would shift the buffer.
    TORCH_CHECK(grads.back().defined(), "fsdp2: parameter without gradient in group ", g.spec.label);
  }
  reshard(gi);
  notify("post_backward", gi);
  auto& s = streams();
  // post_backward: current_stream().wait_event(comm_ctx.reduce_scatter_state.event), then
  // reduce_scatter_state = None (the previous group's reduce-scatter input is freed): the compute
  // stream waits a reduce-scatter only here, one group later, and at the end of backward.
  coll.reduce_scatter_state.release(s, {s.current()});
  wait_for_post_backward(gi);
  if (!offloads()) {
    coll.foreach_reduce(grads, g.grad_numel, dtypes.reduce, g.spec.label, g.all_reduce_state, g.post_reduce_event,
                        [this, gi](at::Tensor output) { post_reduce(gi, output); });
  } else {
    // foreach_reduce with offload_to_cpu: to_accumulate_grad when the host gradients exist;
    // non_blocking = pin_memory and not to_accumulate_grad. An asynchronous copy records
    // grad_offload_event, which finalize_backward synchronises on; a blocking one (ordinary host
    // memory, or accumulating) makes the host wait for the post-reduce stream at once.
    const bool accumulating = params[size_t(g.params.front())].host_grad.defined();
    const auto stream = coll.foreach_reduce(
        grads, g.grad_numel, dtypes.reduce, g.spec.label, g.all_reduce_state, g.post_reduce_event,
        [this, gi](at::Tensor output) { post_reduce(gi, output); }, [this, gi] { offload_grads_to_host(gi); });
    auto& s = streams();
    if (coll.offload->grad_copy_non_blocking(accumulating))
      g.grad_offload_event = s.record(stream, "grad_offload " + g.spec.label);
    else
      s.synchronize(s.record(stream, "grad_offload " + g.spec.label));
  }
  notify("reduce_scatter", gi);
  runtime::nvtx::end(std::exchange(g.backward_range, 0));
}

// _wait_for_post_backward: the current stream waits this group's previous post-reduce event and
// its HSDP all-reduce event (all_reduce_state is then dropped).
void ParamGroups::wait_for_post_backward(int gi) {
  auto& g = groups[size_t(gi)];
  auto& s = streams();
  if (g.post_reduce_event.recorded()) {
    s.wait_event(s.current(), g.post_reduce_event);
    g.post_reduce_event = common::StreamEvent();
  }
  g.all_reduce_state.release(s, {s.current()});
}

// The end of foreach_reduce (on the post-reduce stream): post-divide, cast to the sharded dtype,
// accumulate into (or become) the sharded gradient.
void ParamGroups::post_reduce(int gi, at::Tensor output) {
  at::NoGradGuard no_grad;
  auto& g = groups[size_t(gi)];
  if (coll.factors.post && *coll.factors.post != 1) output.div_(*coll.factors.post);
  auto out = output.scalar_type() == dtypes.orig ? output : output.to(dtypes.orig);
  if (g.grad.defined())
    g.grad.add_(out);
  else
    g.grad = out;  // sharded gradients are views into this buffer
  notify("post_reduce", gi);
}

// foreach_reduce's post-reduce loop with offload_to_cpu (on the post-reduce stream, after
// post_reduce): each parameter's new sharded gradient — its rows of the reduce output, the
// `sharded_size` view — copied to the host (or added into the host gradient); the device output
// is dropped ("we can free it here by not keeping a ref").
void ParamGroups::offload_grads_to_host(int gi) {
  at::NoGradGuard no_grad;
  auto& g = groups[size_t(gi)];
  for (int id : g.params) {
    auto& p = params[size_t(id)];
    coll.offload->grad_to_host(p.host_grad, g.grad.narrow(0, p.grad_offset, p.l.local_numel()));
  }
  g.grad = at::Tensor();
}

// finalize_backward: _wait_for_post_backward; a mistargeted unshard without a wait is waited
// (current_stream().wait_event(all_gather_event), and its work with async_op) and dropped.
void ParamGroups::finalize_backward(int gi) {
  auto& g = groups[size_t(gi)];
  wait_for_post_backward(gi);
  if (g.grad_offload_event.recorded()) {  // fsdp_param.grad_offload_event.synchronize()
    streams().synchronize(g.grad_offload_event);
    g.grad_offload_event = common::StreamEvent();
  }
  if (g.all_gather) {
    streams().wait_event(streams().current(), g.all_gather->event);
    g.all_gather->work.wait();
    g.all_gather.reset();
  }
  g.post_forward_indices.clear();
}

}  // namespace zb::backends::fsdp2
