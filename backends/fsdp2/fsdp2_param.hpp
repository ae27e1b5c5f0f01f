// fsdp2_param.hpp — one parameter of FSDP2-mode (torch 2.11 _fully_shard/_fsdp_param.py FSDPParam):
// its padded Shard(0) storage and DTensor local view, its unsharded parameter (an autograd leaf
// over the all-gather output's storage), the post-forward shard of a reshard to N ranks, the
// unsharded gradient accumulated without gradient sync; and the state enums.
// Owns: per-parameter allocation / free and the transitions one parameter makes
// (_init_sharded_param, init_unsharded_param, alloc_all_gather_outputs, to_sharded ->
// free_unsharded_param, to_sharded_post_forward, accumulate_unsharded_grad_if_needed,
// to_accumulated_grad_if_needed). Must not: issue collectives, touch streams, or know its group's
// schedule (fsdp2_param_group.cpp) — it is told what to do, in which order.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <vector>

#include "backends/fsdp2/fsdp2_layout.hpp"

namespace zb::backends::fsdp2 {

enum class TrainingState { kIdle, kForward, kPreBackward, kPostBackward };  // _fsdp_common.py TrainingState
enum class ShardedState { kSharded, kShardedPostForward, kUnsharded };      // _fsdp_param.py ShardedState

struct Param {
  ParamLayout l;
  int group = 0;
  int64_t grad_offset = 0;       // this parameter's padded shard in the group's gradient buffer
  at::Tensor sharded_data;       // _sharded_param_data: [chunk_rows * row] padded, orig dtype
  at::Tensor local;              // the DTensor's local tensor (flat view): [local_rows * row]
  at::Tensor all_gather_output;  // all_gather_outputs[0]: [chunk_rows * S * row], param dtype; freed when sharded
  at::Tensor unsharded;          // _unsharded_param: autograd leaf [shape] over all_gather_output's storage
  at::Tensor post_forward_data;  // _sharded_post_forward_param_data (reshard to N ranks)
  at::Tensor accumulated_grad;   // unsharded_accumulated_grad (reduce dtype, no gradient sync)
  at::Tensor host_grad;          // CPUOffloadPolicy: sharded_param.grad on the host, [local_rows * row]
};

// _init_sharded_param: pre-pad the sharded parameter (new_zeros(padded chunk)) and copy this
// rank's rows in — from `load_rows(first element)` (a sharded load, already in the sharded
// dtype) when given, else from `full` (the whole parameter). `local` views the owned rows.
void init_sharded_param(Param& p, int shard_rank, const at::TensorOptions& orig_opts, const at::Tensor& full,
                        const std::function<at::Tensor(int64_t row_lo)>& load_rows);

// init_unsharded_param: the all-gather output of this parameter ([padded dim0 x row] in param
// dtype) and the unsharded parameter (an autograd leaf over its storage, with its own version
// counter: writes through the copy-out are not in-place edits of what autograd saved); the
// storage starts freed.
void init_unsharded_param(Param& p, const at::TensorOptions& param_opts, int shard_size);

// The all-gather input: the padded shard, or the post-forward shard when resharded to N ranks.
const at::Tensor& all_gather_input(const Param& p, ShardedState state);

// alloc_all_gather_outputs: the unsharded storage back at its full size.
void alloc_all_gather_output(Param& p);

// to_sharded -> free_unsharded_param: the unsharded storage (and any post-forward shard) freed.
void free_unsharded_param(Param& p);

// to_sharded_post_forward: keep this rank's 1/N of the unsharded data (a clone), free the rest.
void to_sharded_post_forward(Param& p, int n_ranks, int rank);

// accumulate_unsharded_grad_if_needed: a new unsharded gradient added into the held one.
void accumulate_unsharded_grad_if_needed(Param& p);

// to_accumulated_grad_if_needed: the unsharded gradient upcast to reduce_dtype once.
void to_accumulated_grad_if_needed(Param& p, std::optional<at::ScalarType> reduce_dtype);

// The gradient this parameter hands to the reduce-scatter (the accumulated one, else the
// unsharded one), taken from it; undefined when it has none.
at::Tensor take_unsharded_grad(Param& p);

}  // namespace zb::backends::fsdp2
