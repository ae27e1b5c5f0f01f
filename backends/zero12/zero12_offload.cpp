// zero12_offload.cpp — the ZeRO-1/2 engine's offload_optimizer device cpu (zero12_engine_impl.hpp;
// the closed forms in zero12_offload.hpp), following the `cpu_offload` branches of DeepSpeed
// 0.19.8's DeepSpeedZeroOptimizer (deepspeed/runtime/zero/stage_1_and_2.py):
//  - __init__: the fp32 master partition made on the host (`.detach().clone().to(device='cpu',
//    dtype=fp32)`, then pinned with pin_memory), a host model-dtype copy of the partition
//    (param_buffer_of_bit16_for_cpu_offload_groups), temp_grad_buffer_for_cpu_offload (host) and
//    temp_grad_buffer_for_gpu_offload (device), both of the largest parameter's numel;
//    initialize_optimizer_states: the fp32 partition's .grad, a zeroed host buffer kept for the run;
//  - copy_grads_in_partition with cpu_offload, for each reduced parameter of this partition:
//    when micro_step_id > 0 or not at the boundary, async_accumulate_grad_in_cpu_via_gpu (the
//    host-accumulated gradient copied into the device temp buffer and added, micro_step_id > 0,
//    then the whole gradient copied to its host buffer, accumulated_grads_in_cpu); at the boundary
//    set_norm_for_param_grad_in_gpu (fp64 norm of the partition's part),
//    update_offload_overflow_tracker_for_param_grad, async_inplace_copy_grad_to_fp32_buffer_from_gpu
//    (the part `.to(fp32)` on the device, copied into the host fp32 gradient) and the grad cleared;
//  - step with cpu_offload: has_overflow from local_overflow (bf16), the norm
//    (complete_grad_norm_calculation_for_cpu_offload), unscale_and_clip_grads on the host fp32
//    gradient, _optimizer_step (DeepSpeedCPUAdam, engine.py get_optimizer_configuration, or
//    torch.optim.AdamW), the fp32 partition cast into the host model-dtype buffer and copied to the
//    device partition (non_blocking), reset_cpu_buffers, all_gather_dp_groups.
// The copies run on the stream that is current: reduce_ipg_grads' (the reduction stream with
// overlap_comm, else the current one — DeepSpeed's copy_grad_stream is disabled) for the gradient
// copies, the compute stream in step. fp16_master_weights_and_gradients (fp16 only) is not
// reachable: zero1/zero2 run fp32 and bf16.
// Must not: change the path without offload (zero12_reduce.cpp, zero12_step.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/zero12/zero12_engine_impl.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero12 {

void Zero12Engine::setup_offload() {
  const auto dev = comm_.world().device;
  const bool pin = opts_.offload_pin_memory;
  const int64_t P = layout_.partition;
  int64_t largest = 0;
  for (const auto& p : layout_.params) largest = std::max(largest, p.numel);
  // weights_partition = bit16 partition .detach().clone().to(device='cpu', dtype=fp32): a blocking
  // copy across the boundary converts on the host, so the model dtype crosses; then pin_memory.
  auto staged = common::host_empty({P}, dtypes_.model, /*pin=*/false, dev);
  host_copies_.to_host(staged, partition_.detach().clone());
  master_ = common::host_empty({P}, at::kFloat, pin, dev);
  master_.copy_(staged);
  bit16_host_ = common::host_empty({P}, dtypes_.model, pin, dev).zero_();      // torch.full(..., 0.0)
  temp_grad_host_ = common::host_empty({largest}, dtypes_.model, pin, dev).zero_();
  temp_grad_device_ = at::zeros({largest}, at::TensorOptions().dtype(dtypes_.model).device(dev));
  grad32_ = common::host_empty({P}, at::kFloat, pin, dev).zero_();  // initialize_optimizer_states
  accumulated_host_.assign(layout_.params.size(), at::Tensor());
  param_norms_.assign(layout_.params.size(), at::Tensor());
  if (opts_.host_optimizer == kCpuAdam) {
    if (spec_.train.measure_lost_updates)
      throw UsageError("--measure-lost-updates with offload_optimizer and DeepSpeedCPUAdam is not implemented");
    cpu_adam_ = std::make_unique<zero3::CpuAdam>(master_, common::adamw_options(spec_.train));
  } else {
    optimizer_ = std::make_unique<common::AdamW>(std::vector<at::Tensor>{master_}, common::adamw_options(spec_.train));
    optimizer_->set_measure_lost_updates(spec_.train.measure_lost_updates);
  }
}

// copy_grads_in_partition with cpu_offload (the compact fp32 buffer path needs grad_accum_dtype
// fp32 with bf16 parameters, refused in zero12_options.cpp).
void Zero12Engine::offload_copy_grads_in_partition(int id) {
  auto& s = comm_.streams();
  const auto& p = layout_.params[size_t(id)];
  const std::string name = std::to_string(id);
  auto& g = grads_[size_t(id)];
  auto flat = g.view({-1});
  if (micro_step_id_ > 0 || !boundary_) {  // async_accumulate_grad_in_cpu_via_gpu
    auto& acc = accumulated_host_[size_t(id)];
    if (!acc.defined())  // buffer_to_accumulate_to_in_cpu: zeros, the param's dtype, pinned with pin_memory
      acc = common::host_empty({p.numel}, dtypes_.model, opts_.offload_pin_memory, comm_.world().device).zero_();
    if (micro_step_id_ > 0) {  // accumulate_gradients: dest_buffer.copy_(acc, non_blocking=True); grad.add_(dest)
      auto dest = temp_grad_device_.narrow(0, 0, p.numel);
      s.op("offload: accumulated grad to device " + name, {acc, dest});
      host_copies_.to_device(dest, acc);
      flat.add_(dest);
    }
    s.op("offload: grad to host " + name, {flat, acc});  // copy_gradients_to_cpu
    host_copies_.to_host(acc, flat);
  }
  if (!boundary_) return;
  // grad_position: [source_offset, dest_offset, num_elements] of the part inside the partition.
  const int64_t lo = int64_t(comm_.rank()) * layout_.partition, hi = lo + layout_.partition;
  const int64_t begin = std::max(p.offset, lo), n = std::min(p.offset + p.numel, hi) - begin;
  auto part = flat.narrow(0, begin - p.offset, n);
  param_norms_[size_t(id)] = part.to(at::kDouble).norm(2);  // set_norm_for_param_grad_in_gpu (get_norm_dtype)
  if ((~at::isfinite(g)).any().item<bool>()) local_overflow_ = true;  // the whole gradient (has_inf_or_nan)
  // async_inplace_copy_grad_to_fp32_buffer_from_gpu: src.to(fp32) on the device, copied out.
  auto src = part.scalar_type() == at::kFloat ? part : part.to(at::kFloat);
  auto dst = grad32_.narrow(0, begin - lo, n);
  s.op("offload: fp32 grad to host " + name, {src, dst});
  host_copies_.to_host(dst, src);
  g = at::Tensor();  // clear_grad_attribute (offload only)
}

double Zero12Engine::offload_optimizer_step(const StepHyper& h) {
  at::NoGradGuard no_grad;
  micro_step_id_ = -1;
  auto& s = comm_.streams();
  const auto dev = comm_.world().device;
  // _wait_for_offload_copies: the host reads what the device->host copies wrote.
  s.synchronize_stream(s.compute());
  if (opts_.overlap_comm) s.synchronize_stream(reduction_stream_);
  bool overflow = false;
  for (const auto& [step, rank] : planted_inf_)  // test-only (ZEROBENCH_TEST_FP16_PLANT_INF)
    if (step == optimizer_steps_ && rank == comm_.rank()) local_overflow_ = true;
  // check_grad_overflow (bf16: its config, default true; fp16: always): has_overflow -> ByteTensor([local_overflow])
  if (dtypes_.model == at::kBFloat16 || fp16()) {
    auto flag = at::full({1}, local_overflow_ ? 1 : 0, at::TensorOptions().dtype(at::kByte).device(dev));
    comm_.all_reduce_async(flag, c10d::ReduceOp::MAX, "overflow").wait();
    overflow = flag.item<int64_t>() != 0;
  }
  double norm_value = 0;
  at::Tensor norm;
  if (!overflow) {
    // complete_grad_norm_calculation_for_cpu_offload: total_norm += param_norm.item()**2 (Python
    // floats), FloatTensor([float(total_norm)]) all-reduced, [0].item()**(1/2), inf/NaN -> -1,
    // torch.tensor(total_norm, dtype=float) on self.device (cpu); then combine_grad_norm_groups.
    double total = 0.0;
    for (int id : params_in_partition_) {
      const auto& pn = param_norms_[size_t(id)];
      if (!pn.defined()) continue;
      const double v = pn.item<double>();
      total += v * v;
    }
    auto t = at::full({1}, double(float(total)), at::TensorOptions().dtype(at::kFloat).device(dev));
    comm_.all_reduce_sum(t, "grad_norm");
    double tn = std::pow(double(t[0].item<float>()), 1.0 / 2.0);
    if (std::isinf(tn) || std::isnan(tn)) tn = -1.0;
    auto group = at::full({}, tn, at::TensorOptions().dtype(at::kFloat));
    auto stacked = at::stack({group});
    const bool invalid = (~at::isfinite(stacked)).logical_or(stacked < 0).any().item<bool>();
    norm = invalid ? at::full({}, std::numeric_limits<double>::infinity(), at::kFloat) : at::linalg_vector_norm(stacked, 2);
    norm_value = norm.item<double>();
    if (!std::isfinite(norm_value) || norm_value < 0) overflow = true;  // is_invalid_grad_norm
  }
  const double prev_scale = loss_scale();
  update_scale(overflow);  // _update_scale(self.overflow); the skipped-step record (zero12_fp16.cpp)
  if (overflow) {  // zero_grad(set_to_none=True); reset_cpu_buffers
    for (auto& g : grads_) g = at::Tensor();
    std::fill(param_norms_.begin(), param_norms_.end(), at::Tensor());
    local_overflow_ = false;
    skipped_ = true;
    return std::numeric_limits<double>::infinity();
  }
  skipped_ = false;
  norm_value /= prev_scale;  // _global_grad_norm = scaled_global_grad_norm / prev_scale
  // unscale_and_clip_grads([single_grad_partition], norm) on the host fp32 gradient (fp16: the
  // loss scale in the factor, zero12_fp16.cpp).
  if (fp16())
    grad32_.mul_(unscale_and_clip_factor(norm));
  else if (spec_.train.grad_clip > 0)
    grad32_.mul_(1.0 / at::clamp((norm / 1.0 + 1e-6) / spec_.train.grad_clip, 1.0));
  s.op("optimizer step (host)", {master_, grad32_});
  if (cpu_adam_) cpu_adam_->step(grad32_, h);
  else optimizer_->step({grad32_}, h);
  // bit16_partition_buffer.data.copy_(fp32_partition.data) on the host, then
  // bit16_partitions[partition_id].data.copy_(bit16_partition_buffer.data, non_blocking=True).
  bit16_host_.copy_(master_);
  s.op("offload: updated partition to device", {bit16_host_, partition_});
  if (!fault_planted("skip_offload_copy_back")) host_copies_.to_device(partition_, bit16_host_);
  std::fill(param_norms_.begin(), param_norms_.end(), at::Tensor());  // reset_cpu_buffers
  local_overflow_ = false;
  if (comm_.size() > 1) {  // all_gather_dp_groups (zero12_step.cpp)
    s.op("all_gather partitions", {flat_params_});
    comm_.all_gather(flat_params_, partition_, "partitions");
  }
  return norm_value;
}

// Storage alive now, by where it lives (distinct storages once).
ModelStateBytes Zero12Engine::offload_state_bytes() const {
  ModelStateBytes b;
  b.params = int64_t(flat_params_.nbytes());
  b.buffers = ipg_bytes_now();
  std::vector<const void*> seen;
  for (const auto& ipg : ipg_buffers_) seen.push_back(ipg.storage().unsafeGetStorageImpl());
  auto add = [&](int64_t& into, const at::Tensor& t) {
    if (!t.defined()) return;
    const void* key = t.storage().unsafeGetStorageImpl();
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) return;
    seen.push_back(key);
    into += int64_t(t.storage().nbytes());
  };
  add(b.grads, temp_grad_device_);
  for (const auto& g : grads_) add(b.grads, g);
  auto& h = b.host;
  add(h.params, bit16_host_);
  add(h.master_params, master_);
  h.optimizer = cpu_adam_ ? cpu_adam_->state_bytes() : optimizer_->state_bytes();
  add(h.grads, grad32_);
  add(h.grads, temp_grad_host_);
  for (const auto& a : accumulated_host_) add(h.grads, a);
  h.pinned = opts_.offload_pin_memory;
  return b;
}

}  // namespace zb::backends::zero12
