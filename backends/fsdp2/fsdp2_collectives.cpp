// fsdp2_collectives.cpp — see fsdp2_collectives.hpp (torch 2.11 _fully_shard/_fsdp_collectives.py,
// _fsdp_param_group.py FSDPCommContext).
//
// On CPU a collective's wait is queued on its stream with Streams::enqueue (as fsdp_engine.cpp
// does): the host blocks in Gloo's wait when a later wait on that stream's event (or the stream)
// is reached, about when CUDA would.
#include "backends/fsdp2/fsdp2_collectives.hpp"

#include <cmath>

namespace zb::backends::fsdp2 {

using common::StreamId;
using common::Streams;

namespace {

std::vector<common::PendingCollective> make_waits(common::PendingCollective p) {
  std::vector<common::PendingCollective> v;
  if (p.pending()) v.push_back(std::move(p));
  return v;
}

// _get_param_all_gather_inputs: each parameter's padded shard (or post-forward shard); with a
// param_dtype, one foreach copy casts them all into a fresh flat buffer first (on the copy-in stream).
std::vector<at::Tensor> get_param_all_gather_inputs(std::vector<at::Tensor> src,
                                                    std::optional<at::ScalarType> param_dtype) {
  if (!param_dtype) return src;
  int64_t total = 0;
  std::vector<int64_t> sizes;
  for (const auto& t : src) {
    sizes.push_back(t.numel());
    total += t.numel();
  }
  auto flat = at::empty({total}, src.front().options().dtype(*param_dtype));  // [sum shard numel] param dtype
  auto splits = flat.split_with_sizes(sizes);
  at::_foreach_copy_(splits, src);
  return splits;
}

// all_gather_copy_in (on the all_gather_copy_in stream): this rank's slot of the output is the
// all-gather input; the inputs are copied into it with one foreach copy.
at::Tensor copy_in_all_gather_input(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                    const std::vector<int64_t>& sizes, int64_t total, int rank) {
  auto input = output.narrow(0, total * rank, total);  // [sum shard numel]
  at::_foreach_copy_(input.split_with_sizes(sizes), inputs);
  return input;
}

}  // namespace

DivideFactors divide_factors(int shard_size, int replicate_size, at::ScalarType reduce_dtype, bool force_sum) {
  const bool overflow_risk = reduce_dtype != at::kFloat && reduce_dtype != at::kBFloat16;
  const int dp = shard_size * replicate_size;
  DivideFactors f;
  if (!overflow_risk && !force_sum) {
    if (dp == 1) return f;  // SUM, SUM
    f.rs_op = c10d::ReduceOp::AVG;
    f.ar_op = c10d::ReduceOp::AVG;
    return f;
  }
  const double factor = dp;
  if (overflow_risk) {
    double pre = 1;
    while (std::fmod(factor, pre) == 0 && factor / pre > pre) pre *= 2;
    f.pre = pre;
    f.post = factor / pre;
  } else {
    f.post = factor;  // "prefer post-multiplying as it operates on less data"
  }
  return f;
}

std::string op_name(c10d::ReduceOp op) { return op == c10d::ReduceOp::AVG ? "AVG" : "SUM"; }

void Collectives::lazy_init() {
  auto& s = streams();
  copy_in_stream = s.create("all_gather_copy_in", /*high_priority=*/true);
  all_gather_stream = s.create("all_gather", true);
  reduce_scatter_stream = s.create("reduce_scatter", true);
  all_reduce_stream = s.create("all_reduce");
}

std::pair<StreamId, StreamId> Collectives::get_all_gather_streams(bool async_op, TrainingState state) {
  if (!async_op && (state == TrainingState::kForward || state == TrainingState::kPreBackward))
    return {copy_in_stream, all_gather_stream};
  return {streams().current(), streams().current()};
}

void Collectives::wait_all_gather_streams_on_event(const common::StreamEvent& e) {
  streams().wait_event(copy_in_stream, e);
  streams().wait_event(all_gather_stream, e);
}

AllGatherResult Collectives::foreach_all_gather(const std::vector<at::Tensor>& sources,
                                                std::optional<at::ScalarType> param_dtype,
                                                at::ScalarType all_gather_dtype, const runtime::World& group,
                                                bool async_op, TrainingState state, const std::string& label,
                                                bool from_host) {
  auto& s = streams();
  AllGatherResult r;
  r.world = group.size;
  r.async_op = async_op;
  const auto [copy_in, all_gather] = get_all_gather_streams(async_op, state);
  at::Tensor input;
  std::vector<at::Tensor> inputs;
  if (from_host && planted_fault == "h2d_on_compute")  // the planted fault: H2D on the compute stream
    inputs = all_gather_inputs(sources, param_dtype, from_host, label);
  {
    // foreach_all_gather: `with device_handle.stream(all_gather_copy_in_stream)`: the inputs
    // (host->device with offload, cast), the output's allocation and all_gather_copy_in.
    Streams::Guard on_copy_in(s, copy_in);
    if (inputs.empty() && from_host) inputs = all_gather_inputs(sources, param_dtype, from_host, label);
    s.op("all_gather copy-in " + label);
    if (inputs.empty()) inputs = all_gather_inputs(sources, param_dtype, from_host, label);
    int64_t total = 0;
    for (const auto& t : inputs) {
      r.split_sizes.push_back(t.numel());
      total += t.numel();
    }
    r.output = at::empty({total * r.world}, at::TensorOptions().dtype(all_gather_dtype).device(comm->world().device));
    input = copy_in_all_gather_input(r.output, inputs, r.split_sizes, total, group.rank);
  }
  // foreach_all_gather: all_gather_stream.wait_stream(all_gather_copy_in_stream).
  s.wait_stream(all_gather, copy_in);
  Streams::Guard on_all_gather(s, all_gather);
  issue_all_gather(r, input, group, all_gather, label);
  return r;
}

std::vector<at::Tensor> Collectives::all_gather_inputs(const std::vector<at::Tensor>& sources,
                                                       std::optional<at::ScalarType> param_dtype, bool from_host,
                                                       const std::string& label) {
  if (!from_host) return get_param_all_gather_inputs(sources, param_dtype);
  // _get_param_all_gather_inputs: use_foreach_copy is False with offload_to_cpu, so each
  // parameter's all_gather_inputs: `_sharded_param_data.to(device, non_blocking=True)`, cast.
  streams().op("offload h2d " + label, sources);
  return offload->all_gather_inputs(sources, param_dtype);
}

// On the all_gather stream (current): one all-gather of the group. foreach_all_gather with
// async_op=False: dist.all_gather_into_tensor makes the all-gather stream wait for the
// collective, then all_gather_event = all_gather_stream.record_event(). With async_op the work
// is kept and waited in the copy-out.
void Collectives::issue_all_gather(AllGatherResult& r, at::Tensor& input, const runtime::World& group,
                                   StreamId all_gather, const std::string& label) {
  auto& s = streams();
  auto work = comm->all_gather_async(r.output, input, label, &group);
  if (r.async_op)
    r.work = std::move(work);
  else
    s.enqueue(
        all_gather, make_waits(std::move(work)), "all_gather wait " + label, [] {}, kDeferAll);
  r.event = s.record(all_gather, "all_gather " + label);
}

void Collectives::foreach_all_gather_copy_out(AllGatherResult& r, const std::vector<Param*>& params,
                                              const std::string& label) {
  auto& s = streams();
  // foreach_all_gather_copy_out: current_stream().wait_event(all_gather_event); with async_op
  // all_gather_work.wait().
  s.wait_event(s.current(), r.event);
  r.work.wait();
  s.op("all_gather copy-out " + label, {r.output});
  std::vector<at::Tensor> outs;
  for (Param* p : params) {
    alloc_all_gather_output(*p);
    outs.push_back(p->all_gather_output.view({r.world, -1}));
  }
  at::split_with_sizes_copy_out(outs, r.output.view({r.world, -1}), r.split_sizes, 1);
}

// _fsdp_collectives.py foreach_reduce: on the current stream the chunk-cat copy-in of the
// group's gradients into one [S, n] input in the reduce dtype (each gradient's dim 0 padded to a
// multiple of S); the reduce-scatter stream waits the current stream; there pre-divide,
// reduce-scatter, reduce_scatter_event; under HSDP the all-reduce stream waits the reduce-scatter
// stream and all-reduces across replicas (all_reduce_event); post-divide, cast and accumulation
// on the last of those streams (post_reduce_event).
StreamId Collectives::foreach_reduce(std::vector<at::Tensor>& grads, int64_t grad_numel,
                                     std::optional<at::ScalarType> reduce_dtype, const std::string& label,
                                     common::HeldTensors& all_reduce_state, common::StreamEvent& post_reduce_event,
                                     std::function<void(at::Tensor)> post_reduce,
                                     std::function<void()> offload_to_host) {
  auto& s = streams();
  const int S = mesh.shard;
  const auto rd = reduce_dtype.value_or(grads.front().scalar_type());
  auto input = at::empty({grad_numel * S}, grads.front().options().dtype(rd));  // [S * sum padded shard numel]
  s.op("reduce_scatter copy-in " + label, {input});
  auto input_2d = input.view({S, -1});
  at::_chunk_cat_out(input_2d, grads, 0, S);  // foreach_reduce_scatter_copy_in
  grads.clear();                              // "Only after the copy-in finishes can we free the gradients"
  // foreach_reduce: reduce_scatter_stream.wait_stream(current_stream).
  s.wait_stream(reduce_scatter_stream, s.current());
  at::Tensor output;
  common::StreamEvent reduce_scatter_event;
  StreamId post_reduce_stream = reduce_scatter_stream;
  {
    Streams::Guard on_reduce_scatter(s, reduce_scatter_stream);  // with stream(reduce_scatter_stream)
    output = at::empty({grad_numel}, input.options());
    issue_reduce_scatter(input, output, label);
    reduce_scatter_event = s.record(reduce_scatter_stream, "reduce_scatter " + label);
    if (mesh.replicate > 1) {
      // HSDP: post_reduce_stream = all_reduce_stream; all_reduce_stream.wait_stream(
      // reduce_scatter_stream); the all-reduce and all_reduce_event on it.
      post_reduce_stream = all_reduce_stream;
      s.wait_stream(all_reduce_stream, reduce_scatter_stream);
      Streams::Guard on_all_reduce(s, all_reduce_stream);
      issue_all_reduce(output, label);
      all_reduce_state = common::HeldTensors{{output}, s.record(all_reduce_stream, "all_reduce " + label)};
    }
  }
  // `with device_handle.stream(post_reduce_stream)`: post-divide, cast, accumulate; then
  // post_reduce_event. Queued behind the collective on CPU.
  s.enqueue(
      post_reduce_stream, make_waits(common::PendingCollective()), "post-reduce " + label,
      [post_reduce = std::move(post_reduce), output] { post_reduce(output); }, kDeferAll);
  // With offload_to_cpu the same loop copies each new sharded gradient to the host
  // (`.to(torch.device("cpu"), non_blocking=...)`), still on the post-reduce stream.
  if (offload_to_host)
    s.enqueue(post_reduce_stream, make_waits(common::PendingCollective()), "grad offload d2h " + label,
              std::move(offload_to_host), kDeferAll);
  post_reduce_event = s.record(post_reduce_stream, "post_reduce " + label);
  // comm_ctx.reduce_scatter_state = ReduceScatterState(reduce_scatter_input, reduce_scatter_event):
  // the input stays alive until the next post-backward (or the final callback) waits the event.
  reduce_scatter_state = common::HeldTensors{{input}, reduce_scatter_event};
  return post_reduce_stream;
}

// On the reduce-scatter stream (current): pre-divide, reduce-scatter (async_op=False: the stream
// waits for it; queued on CPU), or the world-size-1 copy.
void Collectives::issue_reduce_scatter(at::Tensor& input, at::Tensor& output, const std::string& label) {
  if (factors.pre && *factors.pre != 1) input.div_(*factors.pre);
  if (mesh.shard > 1) {
    auto work = comm->reduce_scatter_async(output, input, factors.rs_op, label, &shard_group);
    streams().enqueue(
        reduce_scatter_stream, make_waits(std::move(work)), "reduce_scatter wait " + label, [] {}, kDeferAll);
  } else {
    output.copy_(input);  // world size 1: no collective
  }
}

// On the all-reduce stream (current): HSDP's all-reduce of the reduce-scatter output across
// replicas (dist.all_reduce, synchronous: the stream waits for it; queued on CPU).
void Collectives::issue_all_reduce(at::Tensor& output, const std::string& label) {
  auto work = comm->all_reduce_async(output, factors.ar_op, label, &replicate_group);
  streams().enqueue(
      all_reduce_stream, make_waits(std::move(work)), "all_reduce wait " + label, [] {}, kDeferAll);
}

}  // namespace zb::backends::fsdp2
