// zero12_step.cpp — the ZeRO-1/2 engine's optimizer step (zero12_engine_impl.hpp), as
// DeepSpeedZeroOptimizer.step (deepspeed/runtime/zero/stage_1_and_2.py, 0.19.8) runs it without
// offload: the overflow check (check_grad_overflow: bf16 by its config, default true; fp16 always ->
// has_overflow: has_overflow_partitioned_grads_serial + all_reduce MAX of one byte), fp16's scale
// update and skipped step (zero12_fp16.cpp), the norm
// (scaled_global_norm -> get_grad_norm_direct over averaged_gradients, combine_grad_norm_groups),
// the fp32 gradient partition (flatten(averaged_gradients).to(fp32)), unscale_and_clip_grads,
// the client optimizer on the fp32 partition, the copy into the model-dtype partition, and
// all_gather_dp_groups (runtime/utils.py). Must not: touch the gradient path (zero12_reduce.cpp).
#include <cmath>
#include <limits>

#include "backends/zero12/zero12_engine_impl.hpp"

namespace zb::backends::zero12 {

// get_flat_partition -> _get_flat_partition_unpadded (no param padding): for each parameter in the
// partition its accumulated gradient, cut at first_offset for the first and at the partition's
// end for the last, then a zero tail if the partition runs into the alignment pad.
std::vector<at::Tensor> Zero12Engine::averaged_gradients() const {
  std::vector<at::Tensor> out;
  const int64_t P = layout_.partition;
  const int64_t lo = int64_t(comm_.rank()) * P;
  int64_t current = 0;
  for (size_t k = 0; k < params_in_partition_.size(); ++k) {
    const auto& p = layout_.params[size_t(params_in_partition_[k])];
    const auto& g = all_grad_tensors_[k];
    const int64_t offset = k == 0 && p.offset < lo ? lo - p.offset : 0;
    const int64_t n = std::min(p.numel - offset, P - current);
    out.push_back(offset > 0 || n < p.numel ? g.narrow(0, offset, n) : g);
    current += n;
  }
  if (current < P)
    out.push_back(at::zeros({P - current}, at::TensorOptions().dtype(dtypes_.model).device(comm_.world().device)));
  return out;
}

// get_grad_norm_direct (norm_type 2): each parameter's slice (zip with params_in_partition drops
// the zero tail) -> vector_norm in fp64 (get_norm_dtype), stack().pow(2).sum().float(), all-reduce
// SUM over the data-parallel group, pow(1/2); inf/NaN -> -1 (mask_nan_or_inf_with_val_inplace);
// combine_grad_norm_groups of the one group: vector_norm([norm]), invalid -> inf.
at::Tensor Zero12Engine::grad_norm(const std::vector<at::Tensor>& grads) {
  std::vector<at::Tensor> norms;
  for (size_t k = 0; k < params_in_partition_.size() && k < grads.size(); ++k)
    norms.push_back(at::linalg_vector_norm(grads[k].to(at::kDouble), 2));
  at::Tensor total = norms.empty() ? at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(comm_.world().device))
                                   : at::stack(norms).pow(2).sum().to(at::kFloat);
  auto flat = total.view({1});
  comm_.all_reduce_sum(flat, "grad_norm");
  total = total.pow(1.0 / 2.0);
  total.masked_fill_(total.isinf().logical_or(total.isnan()), -1.0);
  auto combined = at::linalg_vector_norm(at::stack({total}), 2);
  const auto invalid = (~at::isfinite(total)).logical_or(total < 0);
  return at::where(invalid, at::full_like(combined, std::numeric_limits<double>::infinity()), combined);
}

double Zero12Engine::optimizer_step(const StepHyper& h) {
  if (opts_.offload()) return offload_optimizer_step(h);  // step() with cpu_offload (zero12_offload.cpp)
  micro_step_id_ = -1;  // self.micro_step_id = INITIAL_MICRO_STEP_ID
  at::NoGradGuard no_grad;
  auto& s = comm_.streams();
  const auto dev = comm_.world().device;
  auto grads = averaged_.empty() ? averaged_gradients() : std::move(averaged_);
  averaged_.clear();
  bool overflow = false;
  // engine.py _configure_zero_optimizer: check_grad_overflow = the bf16 config's (default true) for
  // bf16, True for fp16, False for fp32.
  const bool check_overflow = dtypes_.model == at::kBFloat16 || fp16();
  plant_overflow(grads);  // test-only (ZEROBENCH_TEST_FP16_PLANT_INF)
  if (check_overflow) {
    auto count = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(dev));
    for (const auto& g : grads) count += (~at::isfinite(g)).any().to(at::kFloat);  // has_inf_or_nan
    auto flag = count.to(at::kBool).to(at::kByte);  // overflow.byte()
    comm_.all_reduce_async(flag, c10d::ReduceOp::MAX, "overflow").wait();
    overflow = flag.item<int64_t>() != 0;
  }
  at::Tensor norm;
  if (!overflow) {
    norm = grad_norm(grads);
    // is_invalid_grad_norm (bf16 with check_grad_overflow, and every non-bf16 dtype).
    const double v = norm.item<double>();
    if (!std::isfinite(v) || v < 0) overflow = true;
  }
  const double prev_scale = loss_scale();
  update_scale(overflow);  // _update_scale(self.overflow); the skipped-step record (zero12_fp16.cpp)
  if (overflow) {  // zero_grad(set_to_none=True), averaged_gradients / all_grad_tensors = None
    all_grad_tensors_.clear();
    skipped_ = true;
    return std::numeric_limits<double>::infinity();
  }
  skipped_ = false;
  const double norm_value = norm.item<double>() / prev_scale;  // _global_grad_norm = scaled norm / prev_scale
  // flatten(averaged_gradients) (the last rank's partition through flatten_dense_tensors_aligned:
  // the same elements), .to(fp32): a new tensor in both dtypes.
  at::Tensor grad32 = at::cat(grads).to(at::kFloat);
  grads.clear();
  all_grad_tensors_.clear();  // free_grad_in_param_list; averaged_gradients / all_grad_tensors = None
  // unscale_and_clip_grads: returns at once when clip_grad == 0 and loss_scale == 1; else
  // combined_scale = clamp(((norm / 1) + 1e-6) / clip_grad, min=1) and grad.mul_(1. / combined_scale)
  // (fp16: the loss scale in it, zero12_fp16.cpp).
  if (fp16())
    grad32.mul_(unscale_and_clip_factor(norm));
  else if (spec_.train.grad_clip > 0)
    grad32.mul_(1.0 / at::clamp((norm / 1.0 + 1e-6) / spec_.train.grad_clip, 1.0));
  s.op("optimizer step", {master_, grad32});
  optimizer_->step({grad32}, h);
  grad32 = at::Tensor();
  partition_.copy_(master_);  // bit16_partitions[partition_id].data.copy_(fp32_partition.data)
  // all_gather_dp_groups: dist.has_all_gather_into_tensor() (torch >= 1.13) ->
  // all_gather_into_tensor_dp_groups: one all_gather_into_tensor(group_flat, own partition) per
  // group, skipped when the group has one rank. allgather_bucket_size only sizes the shards of the
  // fallback without all_gather_into_tensor.
  if (comm_.size() > 1) {
    s.op("all_gather partitions", {flat_params_});
    comm_.all_gather(flat_params_, partition_, "partitions");
  }
  return norm_value;
}

}  // namespace zb::backends::zero12
