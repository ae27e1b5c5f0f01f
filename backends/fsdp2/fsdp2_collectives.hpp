// fsdp2_collectives.hpp — FSDP2-mode's collectives (torch 2.11 _fully_shard/_fsdp_collectives.py)
// and the communication context one model's groups share (_fsdp_param_group.py FSDPCommContext).
// Owns: _get_gradient_divide_factors; the four side streams (FSDPCommContext.lazy_init,
// get_all_gather_streams) and the held all-gather / reduce-scatter states; foreach_all_gather
// (_get_param_all_gather_inputs' cast, all_gather_copy_in, the all-gather and its event),
// foreach_all_gather_copy_out, foreach_reduce (chunk-cat copy-in, pre-divide, reduce-scatter, the
// HSDP all-reduce, the post-reduce work queued on its stream). Must not: decide when a group
// unshards, reshards or reduces (fsdp2_param_group.cpp), nor what a reduced gradient becomes (the
// post-reduce callback it is given).
#pragma once
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/common/comm.hpp"
#include "backends/fsdp2/fsdp2_layout.hpp"
#include "backends/fsdp2/fsdp2_offload.hpp"
#include "backends/fsdp2/fsdp2_param.hpp"

namespace zb::backends::fsdp2 {

struct DivideFactors {
  std::optional<double> pre, post;
  c10d::ReduceOp rs_op = c10d::ReduceOp::SUM, ar_op = c10d::ReduceOp::SUM;
};

// _fsdp_collectives.py _get_gradient_divide_factors (factor=None, device not MTIA). The same on
// Gloo and NCCL: fp32/bf16 reductions use ReduceOp.AVG (SUM when the data-parallel size is 1), no
// pre/post division; fp16 (overflow risk) or force_sum_reduction_for_comms use SUM with divisions.
DivideFactors divide_factors(int shard_size, int replicate_size, at::ScalarType reduce_dtype, bool force_sum);

std::string op_name(c10d::ReduceOp op);

// Collective waits queued on a side stream stay deferred (CPU) until that stream is waited for.
inline constexpr size_t kDeferAll = std::numeric_limits<size_t>::max();

struct AllGatherResult {           // _fsdp_collectives.py AllGatherResult
  at::Tensor output;               // [world * sum of inputs], param dtype (all_gather_input is this rank's slot)
  common::StreamEvent event;       // all_gather_event: recorded after the all-gather on its stream
  common::PendingCollective work;  // all_gather_work: only with async_op (waited in the copy-out)
  std::vector<int64_t> split_sizes;
  int world = 1;
  bool async_op = false;
};

// The mesh's process groups, the divide factors and FSDPCommContext, shared by every group of
// one model. Filled by the engine's constructor; lazy_init creates the streams.
class Collectives {
 public:
  common::Comm* comm = nullptr;
  Mesh mesh;
  DivideFactors factors;
  runtime::World shard_group, replicate_group, post_forward_group;
  common::StreamId copy_in_stream = 0, all_gather_stream = 0, reduce_scatter_stream = 0, all_reduce_stream = 0;
  common::HeldTensors all_gather_state;  // comm_ctx.all_gather_state: last forward all-gather output + copy-out event
  common::HeldTensors reduce_scatter_state;  // comm_ctx.reduce_scatter_state: last reduce-scatter input + its event
  HostOffload* offload = nullptr;            // CPUOffloadPolicy (fsdp2_offload.hpp); null without offload
  std::string planted_fault;                 // plant_offload_fault (tests)

  common::Streams& streams() { return comm->streams(); }

  // FSDPCommContext.lazy_init: all-gather copy-in, all-gather and reduce-scatter streams at high
  // priority, the all-reduce stream at default priority (HSDP's all-reduces use it).
  void lazy_init();

  // FSDPCommContext.get_all_gather_streams: the copy-in and all-gather streams for a synchronous
  // all-gather in forward / pre-backward (implicit prefetching), else the current stream for both.
  std::pair<common::StreamId, common::StreamId> get_all_gather_streams(bool async_op, TrainingState state);

  // FSDPParamGroup._wait_all_gather_streams_on_event.
  void wait_all_gather_streams_on_event(const common::StreamEvent& e);

  // foreach_all_gather over `group` (world > 1): on the copy-in stream the inputs' cast to
  // `param_dtype` (when set), the output's allocation in `all_gather_dtype` and the copy-in into
  // this rank's slot; on the all-gather stream the all-gather and its event. `from_host`: the
  // sources are offloaded host shards, copied to the device first (all_gather_inputs).
  AllGatherResult foreach_all_gather(const std::vector<at::Tensor>& sources, std::optional<at::ScalarType> param_dtype,
                                     at::ScalarType all_gather_dtype, const runtime::World& group, bool async_op,
                                     TrainingState state, const std::string& label, bool from_host = false);

  // _get_param_all_gather_inputs on the current stream: offloaded host shards copied to the
  // device and cast one by one (FSDPParam.all_gather_inputs), else one foreach copy-cast.
  std::vector<at::Tensor> all_gather_inputs(const std::vector<at::Tensor>& sources,
                                            std::optional<at::ScalarType> param_dtype, bool from_host,
                                            const std::string& label);

  // foreach_all_gather_copy_out: the current stream waits the all-gather, then a split-with-sizes
  // copy of the output ([world, sum] viewed) into every parameter's all-gather output ([world,
  // padded shard] viewed), allocated here.
  void foreach_all_gather_copy_out(AllGatherResult& r, const std::vector<Param*>& params, const std::string& label);

  // foreach_reduce of one group's gradients ([grad_numel] per rank after the reduce-scatter).
  // `post_reduce(output)` runs on the post-reduce stream, then `offload_to_host` (when given:
  // the gradients' device->host copies, logged as "grad offload d2h <label>"); `post_reduce_event`
  // is recorded after them; HSDP's all-reduce input and event go to `all_reduce_state`; the
  // reduce-scatter input is held in reduce_scatter_state. Returns the post-reduce stream.
  common::StreamId foreach_reduce(std::vector<at::Tensor>& grads, int64_t grad_numel,
                                  std::optional<at::ScalarType> reduce_dtype, const std::string& label,
                                  common::HeldTensors& all_reduce_state, common::StreamEvent& post_reduce_event,
                                  std::function<void(at::Tensor)> post_reduce,
                                  std::function<void()> offload_to_host = {});

 private:
  void issue_all_gather(AllGatherResult& r, at::Tensor& input, const runtime::World& group,
                        common::StreamId all_gather_stream, const std::string& label);
  void issue_reduce_scatter(at::Tensor& input, at::Tensor& output, const std::string& label);
  void issue_all_reduce(at::Tensor& output, const std::string& label);
};

}  // namespace zb::backends::fsdp2
