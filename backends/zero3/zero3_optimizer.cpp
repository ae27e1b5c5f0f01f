// zero3_optimizer.cpp — the ZeRO3-mode engine's gradients and step (zero3_engine_impl.hpp), as
// DeepSpeedZeroOptimizer_Stage3 runs them: each gradient into the IPG bucket, the bucket
// reduce-scattered (coalesced, pre-divided by W) on the reduce-and-partition stream and
// accumulated into the gradient partitions, the end of backward, and the optimizer step (norm per
// sub-group, clipping, AdamW on the fp32 masters, copy back, persistent re-gather).
// Upstream: deepspeed/runtime/zero/stage3.py (reduce_partition_and_remove_grads,
// __add_grad_to_ipg_bucket, __reduce_and_partition_ipg_grads, partition_grads,
// independent_gradient_partition_epilogue, step, _optimizer_step, _post_step),
// comm/coalesced_collectives.py (reduce_scatter_coalesced). Must not: fetch parameters
// (zero3_coordinator.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/zero3/zero3_engine_impl.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::zero3 {

// reduce_partition_and_remove_grads -> reduce_independent_p_g_buckets_and_remove_grads: flush
// first if this gradient would overflow the bucket, then __add_grad_to_ipg_bucket.
void Zero3Engine::post_backward(int id, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  const auto& l = layout_[size_t(id)];
  streams().op("backward module " + module_name(l.unit, l.index), {params_[size_t(id)].full, grad});
  if (bucket_numel_ > 0 && bucket_numel_ + l.numel > opts_.reduce_bucket_size) reduce_and_partition_bucket();
  add_grad_to_bucket(id, grad);
  release_if_allowed(id);  // the module's post-backward release
}

// independent_gradient_partition_epilogue: the last bucket, then the host waits for the
// reduce-and-partition stream (`reduce_and_partition_stream.synchronize()`) — the only point
// where backward waits for its reduce-scatters. Then release_and_reset_all.
void Zero3Engine::end_of_backward() {
  reduce_and_partition_bucket();
  streams().synchronize_stream(rp_stream_);
  param_reduce_events_.clear();
  runtime::nvtx::end(std::exchange(backward_range_, 0));
  for (int id = 0; id < int(params_.size()); ++id)
    if (!layout_[size_t(id)].persistent) release(id);
  if (!trace_complete_) trace_complete_ = true;  // the first micro-batch recorded the trace
  held_.clear();
  checkpointed_.clear();
  first_micro_batch_ = false;
}

// __add_grad_to_ipg_bucket: the reduce-and-partition stream waits for the current stream,
// then (contiguous_gradients, and it fits) the gradient is copied into the IPG buffer there
// and the autograd gradient is let go.
void Zero3Engine::add_grad_to_bucket(int id, const at::Tensor& grad) {
  auto& s = streams();
  const auto& l = layout_[size_t(id)];
  s.wait_stream(rp_stream_, s.compute());
  BucketEntry e{id, grad.view({-1})};
  if (ipg_buffer_.defined() && bucket_numel_ + l.numel <= opts_.reduce_bucket_size) {
    // The previous bucket's reduce-scatter may read the IPG buffer in place: on the CPU the
    // host must not overwrite it before that work ran (a stream keeps that order on CUDA).
    if (ipg_in_use_) s.drain(rp_stream_);
    Streams::Guard on_rp(s, rp_stream_);
    s.op("copy grad into IPG bucket " + module_name(l.unit, l.index), {grad});
    auto slot = ipg_buffer_.narrow(0, bucket_numel_, l.numel);
    slot.copy_(e.grad);
    s.record_stream(grad, rp_stream_, "grad " + std::to_string(id));
    e.grad = slot;
  } else if (e.grad.scalar_type() != dtypes_.comm) {
    e.grad = e.grad.to(dtypes_.comm);
  }
  bucket_.push_back(std::move(e));
  bucket_numel_ += l.numel;
}

// __reduce_and_partition_ipg_grads (reduce_scatter=True, DeepSpeed's default: __avg_scatter_grads
// -> reduce_scatter_coalesced): on the reduce-and-partition stream, the gradients (sorted by
// id) are interleaved into one [W, sum P_i] buffer (each padded to its partition size; the
// buffer itself when there is one gradient dividing evenly), divided by W and reduce-scattered
// in place; partition_grads then copies (first micro-batch) or adds each real partition into
// the gradient partitions in grad_accum_dtype. Nothing on the compute stream waits for it.
void Zero3Engine::reduce_and_partition_bucket() {
  if (bucket_.empty()) return;
  at::NoGradGuard no_grad;
  auto& s = streams();
  // param_reduce_events: drop completed ones; with more than two outstanding the host waits
  // for the oldest (stage3.py max_param_reduce_events = 2).
  while (!param_reduce_events_.empty() && s.query(param_reduce_events_.front())) param_reduce_events_.pop_front();
  if (param_reduce_events_.size() > kMaxParamReduceEvents) {
    s.synchronize(param_reduce_events_.front());
    param_reduce_events_.pop_front();
  }
  Streams::Guard on_rp(s, rp_stream_);
  const int W = comm_.size(), rank = comm_.rank();
  // params_in_bucket.sort(key=lambda p: p.ds_id): module.parameters() order, not the layout's
  // (the reduce-scatter buffer's element order).
  std::sort(bucket_.begin(), bucket_.end(), [this](const BucketEntry& a, const BucketEntry& b) {
    return layout_[size_t(a.id)].ds_id < layout_[size_t(b.id)].ds_id;
  });
  int64_t total = 0;
  for (const auto& e : bucket_) {
    total += layout_[size_t(e.id)].part_numel;
    // A gradient that did not go into the IPG buffer is read here, off the stream it was
    // made on (partition_grads: param.grad.record_stream(current_stream())).
    if (!(ipg_buffer_.defined() && e.grad.is_alias_of(ipg_buffer_))) s.record_stream(e.grad, rp_stream_, "grad");
  }
  if (qgz_.active()) return qgz_reduce_and_partition();  // ZeRO++ qgZ over more than one node (zero3_qgz.cpp)
  at::Tensor in;
  bool in_place_on_ipg = false;
  if (bucket_.size() == 1 && layout_[size_t(bucket_[0].id)].numel % W == 0) {
    in = bucket_[0].grad;  // "avoid a memory allocation": the gradient itself
    in_place_on_ipg = ipg_buffer_.defined() && in.is_alias_of(ipg_buffer_);
  } else {
    in = at::empty({W * total}, bucket_.front().grad.options());
    auto grid = in.view({W, total});
    int64_t off = 0;
    for (const auto& e : bucket_) {
      const auto& l = layout_[size_t(e.id)];
      for (int r = 0; r < W; ++r) {
        const int64_t begin = std::min<int64_t>(int64_t(r) * l.part_numel, l.numel);
        const int64_t n = std::min<int64_t>(l.part_numel, l.numel - begin);
        auto dst = grid[r].narrow(0, off, l.part_numel);
        if (n > 0) dst.narrow(0, 0, n).copy_(e.grad.narrow(0, begin, n));
        if (n < l.part_numel) dst.narrow(0, n, l.part_numel - n).zero_();  // padding (torch.empty upstream)
      }
      off += l.part_numel;
    }
  }
  s.op("avg+reduce_scatter bucket");
  in.div_(W);  // tensor_partition_flat_buffer.div_(world_sz): pre-divide
  auto out = in.narrow(0, int64_t(rank) * total, total);  // this rank's chunk, reduced in place
  auto rs = comm_.reduce_scatter_sum_async(out, in, "bucket");
  std::vector<int> ids;
  for (const auto& e : bucket_) ids.push_back(e.id);
  bucket_.clear();
  bucket_numel_ = 0;
  ipg_in_use_ = in_place_on_ipg;
  std::vector<common::PendingCollective> waits;
  waits.push_back(std::move(rs));
  const bool copy = first_micro_batch_, boundary = boundary_;
  // (The work of an enqueue is logged as one entry: with offload_optimizer it holds the copies
  // of the gradient partitions to the host, zero3_offload.cpp offload_grad_partition.)
  s.enqueue(rp_stream_, std::move(waits),
            offload_optimizer() ? "partition_grads (offload: grad partitions to host)" : "partition_grads",
            [this, ids, out, copy, boundary] { partition_grads(ids, out, copy, boundary); });
  param_reduce_events_.push_back(s.record(rp_stream_, "partitioned"));
}

// partition_grads: each parameter's real part of this rank's reduced chunk, cast to
// grad_accum_dtype, copied (first micro-batch) or added into its gradient partition (with
// offload_optimizer, on the host: zero3_offload.cpp offload_grad_partition).
void Zero3Engine::partition_grads(const std::vector<int>& ids, const at::Tensor& out, bool copy, bool boundary) {
  at::NoGradGuard no_grad;
  const int rank = comm_.rank();
  int64_t off = 0;
  for (int id : ids) {
    const auto& l = layout_[size_t(id)];
    const int64_t begin = std::min<int64_t>(int64_t(rank) * l.part_numel, l.numel);
    const int64_t n = std::min<int64_t>(l.part_numel, l.numel - begin);
    if (n > 0) {  // contains_real_data
      auto part = out.narrow(0, off, n);
      if (offload_optimizer()) {
        offload_grad_partition(id, part, copy, boundary);
        off += l.part_numel;
        continue;
      }
      if (part.scalar_type() != dtypes_.grad_accum) part = part.to(dtypes_.grad_accum);
      auto dst = params_[size_t(id)].grad_partition.narrow(0, 0, n);
      if (copy)
        dst.copy_(part);
      else
        dst.add_(part);
    }
    off += l.part_numel;
  }
  ipg_in_use_ = false;
}

double Zero3Engine::optimizer_step(const StepHyper& h) {
  at::NoGradGuard no_grad;
  // step(): _partition_all_parameters() -> release_and_reset_all first releases every
  // parameter, the persistent ones included (stage3.py step; partitioned_param_coordinator.py
  // release_and_reset_all calls __release_param without the ds_persist filter); _post_step
  // re-gathers the persistent ones below.
  for (int id = 0; id < int(params_.size()); ++id) release(id);
  // fp16 (zero3_fp16.cpp): _overflow_check_and_loss_scale_update(update_scale=False) first; an
  // overflow skips the norm.
  bool overflow = fp16() && has_overflow();
  // _get_norm_groups -> get_grad_norm_direct over each sub-group's gradient
  // partitions (one per parameter), combined; is_invalid_grad_norm syncs the host.
  // One get_grad_norm_direct (and all-reduce) per sub-group, then combine_grad_norm_groups.
  at::Tensor norm;
  double norm_value = std::numeric_limits<double>::infinity();
  if (!overflow) {
    std::vector<at::Tensor> group_norms;
    for (const auto& sg : sub_groups_) {
      if (offload_optimizer()) {  // _get_norm_groups -> complete_grad_norm_calculation_for_cpu_offload
        group_norms.push_back(offload_grad_norm(sg));
        continue;
      }
      // averaged_gradients[i] in fp16_groups[i]'s order (ds_id): the order the fp64 squares are
      // summed in (the last fp64 bit of the norm depends on it).
      std::vector<at::Tensor> partitions;
      for (int id : in_ds_id_order(sg.ids, layout_)) partitions.push_back(params_[size_t(id)].grad_partition);
      group_norms.push_back(common::deepspeed_grad_norm(partitions, comm_));
    }
    // combine_grad_norm_groups (runtime/utils.py), for one sub-group too: the vector_norm of the
    // stacked group norms (sqrt(x * x) of a single norm may differ from x in its last fp64 bit),
    // inf when a group norm is non-finite or negative.
    // Stacked in DeepSpeed's sub-group order: its sub-groups follow the optimizer's parameter
    // group (module.parameters(), ds_id order), zerobench's the layout; with one parameter per
    // sub-group (sub_group_size 0, axolotl's files) the two are the same groups, ordered by ds_id.
    std::vector<size_t> by_ds_id(group_norms.size());
    std::vector<int> first_ds_id(group_norms.size(), std::numeric_limits<int>::max());
    for (size_t g = 0; g < by_ds_id.size(); ++g) {
      by_ds_id[g] = g;
      for (int id : sub_groups_[g].ids) first_ds_id[g] = std::min(first_ds_id[g], layout_[size_t(id)].ds_id);
    }
    std::stable_sort(by_ds_id.begin(), by_ds_id.end(), [&](size_t a, size_t b) { return first_ds_id[a] < first_ds_id[b]; });
    std::vector<at::Tensor> ordered;
    for (size_t g : by_ds_id) ordered.push_back(group_norms[g]);
    const auto stacked = at::stack(ordered);
    const auto combined = at::linalg_vector_norm(stacked, 2);
    const auto invalid = (~at::isfinite(stacked)).logical_or(stacked < 0).any();
    norm = at::where(invalid, at::full_like(combined, std::numeric_limits<double>::infinity()), combined);
    group_norms.clear();
    norm_value = norm.item<double>();
    if (fp16() && !std::isfinite(norm_value)) overflow = true;  // is_invalid_grad_norm
  }
  // _loss_scale_update_and_overflow_cleanup: the scale updated; an overflowed step returns here
  // (_global_grad_norm = inf, no optimizer step, no _post_step).
  if (fp16() && loss_scale_update_and_overflow_cleanup(overflow)) return std::numeric_limits<double>::infinity();
  // fp16: _global_grad_norm = scaled norm / loss_scale, and unscale_and_clip_grads' one combined
  // factor (both with the scale after its update); else the clip factor alone.
  const auto clip = fp16() ? unscale_and_clip_factor(norm) : common::deepspeed_clip_factor(norm, spec_.train.grad_clip);
  if (fp16()) norm_value /= loss_scale();
  for (auto& sg : sub_groups_) {
    if (offload_optimizer()) {
      host_optimizer_step(sg, clip, h);  // the kept host fp32 gradient: no _prepare_sub_group copy
      copy_back(sg);
      continue;
    }
    // _prepare_fp32_grad_for_sub_group: flatten(averaged_gradients) (a cat of the sub-group's
    // partitions, a view when it holds one) .to(fp32): the fp32 gradient lives only through
    // this sub-group's step (_release_sub_group sets it to None).
    std::vector<at::Tensor> views;
    for (int id : sg.ids) views.push_back(params_[size_t(id)].grad_partition);
    at::Tensor flat = views.size() == 1 ? views[0].view({-1}) : at::cat(views);
    views.clear();
    at::Tensor grad32 = flat.to(at::kFloat);
    flat = at::Tensor();
    grad32.mul_(clip);  // unscale_and_clip_grads
    sg.optimizer->step({grad32}, h);
    copy_back(sg);  // _reassign_or_swap_out_partitioned_parameters
  }
  for (auto& n : param_grad_norms_) n = at::Tensor();  // _post_step: reset_cpu_buffers
  first_micro_batch_ = true;  // zero_grad: the next micro-batch copies into the partitions
  // _post_step: persistent_parameters[0].all_gather(persistent_parameters) -> Init._all_gather
  // (async_op=False) -> _allgather_params_coalesced, which launches one all_gather_into_tensor
  // per parameter (partition_parameters.py) and waits for them all, on the current stream.
  for (int id = 0; id < int(params_.size()); ++id) {
    if (!layout_[size_t(id)].persistent) continue;
    issue_all_gather({id}, "persistent", streams().compute(), /*zeropp=*/false);  // not quantized, over the world
    if (params_[size_t(id)].inflight) complete_gather_of(id);
  }
  invalidate_secondaries();  // _post_step: invalidate_secondary_tensor (hpZ)
  return norm_value;
}

}  // namespace zb::backends::zero3
