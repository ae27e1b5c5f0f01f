// fsdp2_param_group.hpp — FSDP2-mode's parameter groups, one per fully_shard call (torch 2.11
// _fully_shard/_fsdp_param_group.py FSDPParamGroup), with the parameters they hold and the
// communication context they share.
// Owns: a group's schedule — unshard (the foreach all-gather issued, after the
// _reshard_after_forward_event), wait_for_unshard (copy-out, the all-gather output held for
// overlap in forward), reshard (True / False / to a smaller post-forward group of N ranks),
// post_forward (_record_post_forward), pre_backward, _backward_prefetch / _prefetch_unshard,
// post_backward (accumulate, reshard, foreach_reduce, or hold the unsharded gradients without
// gradient sync), _wait_for_post_backward, finalize_backward; the post-reduce accumulation into
// the group's sharded gradient buffer; the observer's events.
// Must not: decide when hooks fire (fsdp2_state.cpp), issue collectives itself
// (fsdp2_collectives.cpp), allocate a parameter's storage by hand (fsdp2_param.cpp), or know
// the optimizer / the model's units (fsdp2_engine.cpp).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backends/fsdp2/fsdp2_collectives.hpp"
#include "backends/fsdp2/fsdp2_engine.hpp"
#include "backends/fsdp2/fsdp2_layout.hpp"
#include "backends/fsdp2/fsdp2_param.hpp"

namespace zb::backends::fsdp2 {

struct Group {
  GroupSpec spec;
  std::vector<int> params;
  int reshard_after_forward = kReshardTrue;
  ShardedState sharded = ShardedState::kSharded;
  TrainingState training = TrainingState::kIdle;
  std::optional<AllGatherResult> all_gather;
  std::vector<int> post_forward_indices;
  bool reduce_grads = true;
  int64_t grad_numel = 0;
  at::Tensor grad;  // sharded gradients of the group ([grad_numel], orig dtype); undefined when freed
  std::vector<int> forward_prefetch, backward_prefetch;
  uint64_t forward_range = 0, backward_range = 0;
  common::StreamEvent reshard_after_forward_event;  // _reshard_after_forward_event
  common::StreamEvent post_reduce_event;            // _post_reduce_event
  common::HeldTensors all_reduce_state;             // _all_reduce_state (HSDP): all-reduce input + event
  common::StreamEvent grad_offload_event;           // FSDPParam.grad_offload_event (pinned D2H copies)
};

// Every group of one model, indexed in forward order (groups[0] is the root state). Filled by the
// engine's constructor; its address must not change once hooks or queued work refer to it.
class ParamGroups {
 public:
  Collectives coll;  // the mesh's groups, divide factors, FSDPCommContext
  Dtypes dtypes;
  std::vector<Param> params;
  std::vector<Group> groups;            // forward order; groups[0] is the root state
  std::vector<int> post_forward_order;  // comm_ctx.post_forward_order
  Fsdp2Observer observer;

  common::Streams& streams() { return coll.streams(); }

  void unshard(int gi, bool async_op);
  void wait_for_unshard(int gi);
  void reshard(int gi);
  void post_forward(int gi);
  void pre_backward(int gi, bool default_prefetch);
  void prefetch_unshard(int target, TrainingState state);
  void post_backward(int gi);
  void finalize_backward(int gi);

  // This parameter's rows of its group's sharded gradient (its host gradient under
  // CPUOffloadPolicy); undefined when the gradient is freed.
  at::Tensor grad_view(const Param& p) const;
  bool offloads() const { return coll.offload != nullptr; }

 private:
  const runtime::World& all_gather_group(const Group& g) const;
  int all_gather_world(const Group& g) const { return all_gather_group(g).size; }
  int64_t unsharded_bytes(const Group& g) const;
  void notify(const char* event, int g);
  void backward_prefetch(int gi);
  void to_sharded_post_forward(int gi);
  void wait_for_post_backward(int gi);
  void post_reduce(int gi, at::Tensor output);
  void offload_grads_to_host(int gi);
};

}  // namespace zb::backends::fsdp2
