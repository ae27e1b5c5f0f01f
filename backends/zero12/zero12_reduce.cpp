// zero12_reduce.cpp — the ZeRO-1/2 engine's gradient path (zero12_engine_impl.hpp), as
// DeepSpeedZeroOptimizer (deepspeed/runtime/zero/stage_1_and_2.py, 0.19.8) runs it with
// contiguous_gradients: the gradient hook (create_gradient_handling_hooks -> process_gradients:
// setup_buckets, then with partition_gradients or overlap_comm reduce_ready_partitions_and_remove_grads),
// the IPG bucket (reduce_independent_p_g_buckets_and_remove_grads: flush when it would overflow,
// copy the gradient into the buffer, or keep it aside when larger than the bucket),
// reduce_ipg_grads, average_tensor, copy_grads_in_partition, reduce_gradients (stage 1) and
// independent_gradient_partition_epilogue. Must not: step the optimizer (zero12_step.cpp).
#include "backends/zero12/zero12_engine_impl.hpp"

#include <ATen/ScalarOps.h>

namespace zb::backends::zero12 {

namespace {
std::string& planted() {
  static std::string fault;
  return fault;
}
}  // namespace

void plant_fault(const std::string& fault) { planted() = fault; }
bool fault_planted(const std::string& fault) { return planted() == fault; }

// grad_handling_hook -> process_gradients(param). The gradient first accumulates into param.grad
// as torch's AccumulateGrad does (the hook is a post-accumulate hook): stage 1 keeps it whole over
// the micro-batches.
void Zero12Engine::post_backward(int id, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  setup_buckets();
  auto& g = grads_[size_t(id)];
  if (!g.defined())
    g = grad.is_contiguous() ? grad : grad.contiguous();
  else
    g.add_(grad);
  comm_.streams().op("grad hook " + std::to_string(id), {g});
  if (opts_.stage == 2 || opts_.overlap_comm) reduce_ready_partitions_and_remove_grads(id);
}

// setup_buckets: the IPG buffer (two with overlap_comm), torch.empty(reduce_bucket_size) in the
// gradient dtype, allocated at the first hook after the epilogue released it.
void Zero12Engine::setup_buckets() {
  if (ready_for_gradients_) return;
  ++micro_step_id_;  // self.micro_step_id += 1 (read by the cpu_offload path)
  const auto opts = at::TensorOptions().dtype(dtypes_.model).device(comm_.world().device);
  ipg_buffers_.clear();
  ipg_buffers_.push_back(at::empty({opts_.reduce_bucket_size}, opts));
  if (opts_.overlap_comm) ipg_buffers_.push_back(at::empty({opts_.reduce_bucket_size}, opts));
  bucket_.index = 0;
  ready_for_gradients_ = true;
}

// reduce_ready_partitions_and_remove_grads: stage 2 always, stage 1 only at the boundary.
void Zero12Engine::reduce_ready_partitions_and_remove_grads(int id) {
  if (opts_.stage == 2 || boundary_) add_to_bucket(id);
}

// reduce_independent_p_g_buckets_and_remove_grads.
void Zero12Engine::add_to_bucket(int id) {
  const auto& p = layout_.params[size_t(id)];
  if (p.numel == 0) return;
  if (bucket_.elements + p.numel > opts_.reduce_bucket_size) {
    reduce_ipg_grads();
    if (opts_.overlap_comm) bucket_.index = 1 - bucket_.index;  // swap the double buffers
  }
  auto& g = grads_[size_t(id)];
  if (p.numel > opts_.reduce_bucket_size) {
    bucket_.extra_large = id;  // extra_large_param_to_reduce: reduced in its own storage
  } else {
    auto slot = ipg_buffers_[size_t(bucket_.index)].narrow(0, bucket_.elements, p.numel);
    slot.copy_(g.view({-1}));
    g = slot.view(g.sizes());  // grad_reduc.data = new_grad_tensor
  }
  bucket_.elements += p.numel;
  bucket_.ids.push_back(id);
}

// reduce_ipg_grads: average_tensor over the bucket (or the extra-large gradient), then on the
// reduction stream (overlap_comm) or the current one: stage 2 drops the gradients of parameters
// outside this rank's partition and copies the others into grads_in_partition; stage 1 copies
// those in the partition (the rest stay until the epilogue clears every param.grad).
void Zero12Engine::reduce_ipg_grads() {
  if (bucket_.extra_large >= 0) {
    average_tensor(grads_[size_t(bucket_.extra_large)].view({-1}));
    bucket_.extra_large = -1;
  } else {
    average_tensor(ipg_buffers_.empty() ? at::Tensor() : ipg_buffers_[size_t(bucket_.index)].narrow(0, 0, bucket_.elements));
  }
  auto& s = comm_.streams();
  Streams::Guard on(s, reduction_stream_);
  for (int id : bucket_.ids) {
    reduced_[size_t(id)] = true;
    if (opts_.stage == 2 && !in_partition_[size_t(id)])
      grads_[size_t(id)] = at::Tensor();  // clear_grad_attribute
    else if (in_partition_[size_t(id)])
      copy_grads_in_partition(id);
  }
  bucket_.ids.clear();
  bucket_.elements = 0;
}

// average_tensor (reduce_scatter, use_multi_rank_bucket_allreduce: zero12_options.cpp refuses
// the per-rank dist.reduce path). With reduce_scatter: the bucket is cut into slices by the rank
// owning each part of each parameter (consecutive slices of one owner merged), divided by W,
// and allreduce_and_scatter all-reduces the slices in groups that close once they pass
// reduce_bucket_size elements (allreduce_bucket: flatten = one new tensor, cast to
// communication_data_type, dist.all_reduce), each owner copying its slices back. Without:
// gradient_reduction_w_predivide: the bucket all-reduced whole, then multiplied by 1/W
// (postscale_gradients with gradient_predivide_factor 1.0).
void Zero12Engine::average_tensor(at::Tensor tensor) {
  auto& s = comm_.streams();
  if (opts_.overlap_comm) {
    s.wait_stream(reduction_stream_, s.compute());  // stream.wait_stream(producer)
    s.wait_stream(s.compute(), reduction_stream_);  // current_stream().wait_stream(stream)
  }
  Streams::Guard on(s, reduction_stream_);
  if (!tensor.defined() || tensor.numel() == 0) return;  // nothing in the bucket: no collective
  const int W = comm_.size(), rank = comm_.rank();
  if (!opts_.reduce_scatter) {
    at::Tensor t = tensor.scalar_type() != dtypes_.comm ? tensor.to(dtypes_.comm) : tensor;
    s.op("all_reduce ipg bucket", {t});
    comm_.all_reduce_sum(t, "ipg_bucket");
    // tensor_to_allreduce.mul_(1.0 / W), a Python float: the fp32 op-math value of 1/W multiplies
    // each element. ATen's C++ mul_(Scalar) is not that call: it puts the scalar first
    // (mul_out(self, wrapped scalar, self)), so the scalar is cast to the tensor's dtype (bf16:
    // 0.333984375 for 1/3, +0.2%) before the multiply. The wrapped-number tensor Python passes
    // keeps it in the second operand, as upstream (bitwise at W=3; exact for W a power of two).
    if (1.0 != double(W) && planted() == "cpp_scalar_mul")
      t.mul_(1.0 / double(W));  // the planted fault: the scalar rounded to the tensor's dtype first
    else if (1.0 != double(W))
      t.mul_(at::native::wrapped_scalar_tensor(at::Scalar(1.0 / double(W))));
    if (!t.is_same(tensor)) tensor.copy_(t);
    return;
  }
  struct Slice {
    int dst;
    int64_t offset, numel;
  };
  std::vector<Slice> slices;
  int64_t curr = 0;
  for (int id : bucket_.ids) {
    const auto& p = layout_.params[size_t(id)];
    // partition_ids_w_offsets sorted by offset: each overlapping rank with grad_start_offset.
    std::vector<std::pair<int, int64_t>> owners;
    for (int r = 0; r < W; ++r) {
      const int64_t lo = int64_t(r) * layout_.partition, hi = lo + layout_.partition;
      if (lo <= p.offset && p.offset < hi)
        owners.push_back({r, 0});
      else if (p.offset < lo && lo < p.offset + p.numel)
        owners.push_back({r, lo - p.offset});
    }
    for (size_t k = 0; k < owners.size(); ++k) {
      const int64_t n = k + 1 == owners.size() ? p.numel - owners[k].second : owners[k + 1].second - owners[k].second;
      if (!slices.empty() && slices.back().dst == owners[k].first)
        slices.back().numel += n;  // merged: same partition, same group, no compact output
      else
        slices.push_back({owners[k].first, curr, n});
      curr += n;
    }
  }
  tensor.div_(double(W));  // gradient_average: tensor.div_(dp world size)
  // allreduce_and_scatter(numel_per_bucket = reduce_bucket_size).
  size_t first = 0;
  int64_t numel = 0;
  auto flush = [&](size_t end) {
    const int64_t begin = slices[first].offset;
    const int64_t n = slices[end - 1].offset + slices[end - 1].numel - begin;
    at::Tensor flat = tensor.narrow(0, begin, n).clone();  // self.flatten(small_bucket)
    at::Tensor t = flat.scalar_type() != dtypes_.comm ? flat.to(dtypes_.comm) : flat;
    s.op("all_reduce ipg slices", {t});
    comm_.all_reduce_sum(t, "ipg_bucket");
    for (size_t k = first; k < end; ++k)
      if (slices[k].dst == rank && planted() != "skip_copy_back")  // copy_to_local_rank: buf.copy_(synced)
        tensor.narrow(0, slices[k].offset, slices[k].numel).copy_(t.narrow(0, slices[k].offset - begin, slices[k].numel));
    first = end;
    numel = 0;
  };
  for (size_t k = 0; k < slices.size(); ++k) {
    numel += slices[k].numel;
    if (numel > opts_.reduce_bucket_size) flush(k + 1);
  }
  if (first < slices.size()) flush(slices.size());
}

// copy_grads_in_partition: grads_in_partition (the summed numel of params_in_partition, model
// dtype) allocated at the first copy after the epilogue released it; the parameter's whole
// gradient copied in at the running offset and param.grad pointed at the copy.
void Zero12Engine::copy_grads_in_partition(int id) {
  if (opts_.offload()) return offload_copy_grads_in_partition(id);  // the cpu_offload branch (zero12_offload.cpp)
  if (!grads_in_partition_.defined()) {
    grads_in_partition_offset_ = 0;
    grads_in_partition_ = at::empty({layout_.grads_in_partition_numel(comm_.rank())},
                                    at::TensorOptions().dtype(dtypes_.model).device(comm_.world().device));
  }
  auto& g = grads_[size_t(id)];
  const int64_t n = layout_.params[size_t(id)].numel;
  auto dst = grads_in_partition_.narrow(0, grads_in_partition_offset_, n);
  dst.copy_(g.view({-1}));
  g = dst.view(g.sizes());
  grads_in_partition_offset_ += n;
}

// reduce_gradients (stage 1, engine.allreduce_gradients at the boundary): without overlap_comm
// every parameter with a gradient goes through the bucket now, in module.parameters() order
// (bit16_groups; the flat order differs under round_robin_gradients); then
// the epilogue.
void Zero12Engine::reduce_gradients() {
  if (!opts_.overlap_comm)
    for (int id : layout_.module_order)  // bit16_groups: module.parameters() order
      if (grads_[size_t(id)].defined()) reduce_ready_partitions_and_remove_grads(id);
  epilogue();
}

// independent_gradient_partition_epilogue: the last bucket, the host waits for the reduction
// stream (overlap_comm on a device that does not resolve data dependencies), the in-partition
// gradients added to those of earlier micro-batches (all_grad_tensors; a missing one is zeros),
// _release_ipg_buffers (the IPG buffers and the grads_in_partition reference dropped), and
// _clear_param_grad_only (every param.grad = None).
void Zero12Engine::epilogue() {
  at::NoGradGuard no_grad;
  reduce_ipg_grads();
  std::fill(reduced_.begin(), reduced_.end(), false);
  auto& s = comm_.streams();
  if (opts_.overlap_comm) s.synchronize_stream(reduction_stream_);
  if (opts_.offload()) {  // `if self.cpu_offload is False:` — the host already holds the gradients
    ipg_buffers_.clear();
    ready_for_gradients_ = false;
    for (auto& g : grads_) g = at::Tensor();
    return;
  }
  const bool first = all_grad_tensors_.empty();
  for (size_t k = 0; k < params_in_partition_.size(); ++k) {
    const int id = params_in_partition_[k];
    at::Tensor g = grads_[size_t(id)];
    if (!g.defined()) {
      const auto& p = layout_.params[size_t(id)];
      g = at::zeros({p.numel}, at::TensorOptions().dtype(dtypes_.model).device(comm_.world().device));
    }
    if (first)
      all_grad_tensors_.push_back(g.view({-1}));
    else
      all_grad_tensors_[k].add_(g.view({-1}));
  }
  // At the boundary: averaged_gradients = get_flat_partition(...) (views, and a zero tail where
  // the partition runs into the alignment pad).
  if (boundary_) averaged_ = averaged_gradients();
  ipg_buffers_.clear();
  grads_in_partition_ = at::Tensor();
  grads_in_partition_offset_ = 0;
  ready_for_gradients_ = false;
  for (auto& g : grads_) g = at::Tensor();
}

}  // namespace zb::backends::zero12
