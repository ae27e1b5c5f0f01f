// zero3_offload.cpp — the ZeRO3-mode engine's offload (zero3_engine_impl.hpp; the closed forms in
// zero3_offload.hpp): DeepSpeed's offload_optimizer and offload_param with device cpu.
//  - offload_param: the model-dtype partitions in one pinned host buffer; before each all-gather
//    each partition is copied to the device on the all-gather stream (partition_parameters.py
//    all_gather_coalesced: `p.ds_tensor.to(current_device)` in _all_gather_sequential and
//    _all_gather_dtype; NoGatherHandle `ds_tensor.to(device, non_blocking=True)` in a world of one).
//  - offload_optimizer: fp32 masters, their Adam states and one fp32 gradient buffer per sub-group
//    on the host (stage3.py _create_fp32_partitions, initialize_optimizer_states), the gradient
//    partitions on the host (_setup_for_real_optimizer: grad_partitions_flat_buffer on self.device
//    = cpu); each reduced gradient partition copied out and, at the boundary micro-batch, its norm
//    taken and its fp32 copy written into the sub-group's gradient buffer (partition_grads,
//    _offload_grad_partition_at_boundary); the norm all-reduced in fp32
//    (complete_grad_norm_calculation_for_cpu_offload); the host optimizer steps; the updated
//    master copied back into the partitions (_reassign_or_swap_out_partitioned_parameters).
// Every copy goes through HostCopies (counted) on the stream that is current, as upstream issues
// it. Dtype conversions across the boundary happen where torch's copy_ makes them
// (aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda: a non_blocking copy converts on the
// device, a blocking one on the host), which sets the bytes that cross.
// Must not: decide when parameters are fetched (zero3_coordinator.cpp) or buckets reduced
// (zero3_optimizer.cpp).
#include "backends/zero3/zero3_offload.hpp"

#include <algorithm>
#include <utility>

#include "backends/common/storage.hpp"
#include "backends/zero3/zero3_engine_impl.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

// _create_fp32_partitions and initialize_optimizer_states for one sub-group.
void Zero3Engine::make_sub_group_state(SubGroup& sg) {
  const auto parts = partitions_.narrow(0, sg.offset, sg.numel);
  const auto dev = comm_.world().device;
  if (!offload_optimizer()) {
    // `fp16_partitioned_groups_flat[i].to(self.device, dtype=fp32).clone()`: on the device; with
    // offload_param the partitions are on the host, so this is a blocking copy (fp32 crosses
    // after the conversion on the host).
    if (offload_param()) {
      sg.master = at::empty({sg.numel}, at::TensorOptions().dtype(at::kFloat).device(dev));
      host_copies_.to_device(sg.master, parts.to(at::kFloat));
    } else {
      sg.master = parts.to(at::kFloat).clone();
    }
    sg.optimizer = std::make_unique<common::AdamW>(std::vector<at::Tensor>{sg.master},
                                                        common::adamw_options(spec_.train));
    sg.optimizer->set_measure_lost_updates(spec_.train.measure_lost_updates);
    return;
  }
  // offload_optimizer: `converted = fp16_flat.to('cpu', dtype=fp32); fp32 = converted.clone()`
  // (a blocking device->host copy: the model dtype crosses, converted on the host), not pinned.
  if (offload_param()) {
    sg.master = parts.to(at::kFloat).clone();
  } else {
    auto staged = common::host_empty({sg.numel}, dtypes_.model, /*pin=*/false, dev);
    host_copies_.to_host(staged, parts);
    sg.master = staged.to(at::kFloat).clone();
  }
  // initialize_optimizer_states: `subgroup_gradient_buffer = torch.zeros(num_elements, fp32, cpu)`,
  // pinned when pin_memory, kept as fp32_partitioned_groups_flat[i].grad for the whole run.
  sg.grad32 = common::host_empty({sg.numel}, at::kFloat, opts_.offload_optimizer.pin_memory, dev).zero_();
  if (opts_.host_optimizer == kCpuAdam) {
    if (spec_.train.measure_lost_updates)
      throw UsageError("--measure-lost-updates with offload_optimizer and DeepSpeedCPUAdam is not implemented");
    sg.cpu_adam = std::make_unique<CpuAdam>(sg.master, common::adamw_options(spec_.train));
  } else {
    sg.optimizer = std::make_unique<common::AdamW>(std::vector<at::Tensor>{sg.master},
                                                        common::adamw_options(spec_.train));
    sg.optimizer->set_measure_lost_updates(spec_.train.measure_lost_updates);
  }
}

// offload_param: `p.ds_tensor.to(current_device)` on the all-gather stream (the caller's), a
// device copy of the partition [P] in the model dtype that the all-gather reads.
at::Tensor Zero3Engine::partition_on_device(int id) {
  const auto& p = params_[size_t(id)];
  const auto& l = layout_[size_t(id)];
  auto t = at::empty({l.part_numel}, at::TensorOptions().dtype(dtypes_.model).device(comm_.world().device));
  streams().op("offload: partition to device " + module_name(l.unit, l.index), {p.partition, t});
  host_copies_.to_device(t, p.partition);
  return t;
}

// partition_grads with offload_optimizer, for one parameter's real elements `part` ([n], the
// communication dtype, on the device), on the reduce-and-partition stream:
//   micro_step 0: grad_buffer.copy_(grad_partition, non_blocking=True)  (device->host, converted
//                 on the device to grad_accum_dtype), then grad_buffer.to(device) (host->device);
//   later:        cuda_grad_buffer = grad_buffer.to(device); add_; grad_buffer.copy_(cuda_...);
//   boundary:     norm_for_param_grads = _constant_buffered_norm2(device copy) (fp64), and
//                 fp32 grad.narrow(dest_offset, n).copy_(device copy.to(fp32), non_blocking=True).
void Zero3Engine::offload_grad_partition(int id, const at::Tensor& part, bool copy, bool boundary) {
  const auto& l = layout_[size_t(id)];
  const int64_t n = part.numel();
  auto host = params_[size_t(id)].grad_partition.narrow(0, 0, n);
  const auto dev_opts = at::TensorOptions().dtype(dtypes_.grad_accum).device(comm_.world().device);
  auto& s = streams();
  s.op("offload: grad partition to host " + module_name(l.unit, l.index), {part, host});
  at::Tensor on_device = at::empty({n}, dev_opts);
  if (copy) {
    host_copies_.to_host(host, part.scalar_type() == dtypes_.grad_accum ? part : part.to(dtypes_.grad_accum));
    host_copies_.to_device(on_device, host);
  } else {
    host_copies_.to_device(on_device, host);
    on_device.add_(part.to(dtypes_.grad_accum));
    host_copies_.to_host(host, on_device);
  }
  if (!boundary) return;
  param_grad_norms_[size_t(id)] = on_device.to(at::kDouble).norm(2).pow(2.0).pow(0.5);
  const auto& sg = sub_groups_[size_t(l.sub_group)];
  auto dst = sg.grad32.narrow(0, l.part_offset - sg.offset, n);
  s.op("offload: fp32 grad to host " + module_name(l.unit, l.index), {on_device, dst});
  host_copies_.to_host(dst, on_device.to(at::kFloat));
}

// complete_grad_norm_calculation_for_cpu_offload for one sub-group: total_norm = 0.0 plus each
// recorded parameter norm squared (fp64), then `get_accelerator().FloatTensor([float(total)])`
// (fp32, the host reads the sum first) all-reduced, [0] ** 0.5, inf/NaN masked to -1, .cpu().
at::Tensor Zero3Engine::offload_grad_norm(const SubGroup& sg) {
  at::Tensor total;
  for (int id : in_ds_id_order(sg.ids, layout_)) {  // `for p in params`: fp16_groups[i], ds_id order
    const auto& norm = param_grad_norms_[size_t(id)];
    if (!norm.defined()) continue;  // no real data on this rank, or no gradient this window
    total = total.defined() ? total + norm.pow(2) : norm.pow(2);
  }
  const double sum = total.defined() ? total.item<double>() : 0.0;
  auto t = at::full({1}, sum, at::TensorOptions().dtype(at::kFloat).device(comm_.world().device));
  comm_.all_reduce_sum(t, "grad_norm");
  auto norm = t[0].pow(0.5);
  norm.masked_fill_(norm.isinf().logical_or(norm.isnan()), -1.0);  // mask_nan_or_inf_with_val_inplace
  return norm.cpu();
}

// The host side of step() for one sub-group under offload_optimizer: unscale_and_clip_grads on
// the kept fp32 gradient buffer, then _optimizer_step (DeepSpeedCPUAdam or torch.optim.AdamW).
void Zero3Engine::host_optimizer_step(SubGroup& sg, const at::Tensor& clip, const StepHyper& h) {
  sg.grad32.mul_(clip);
  if (sg.cpu_adam) sg.cpu_adam->step(sg.grad32, h);
  else sg.optimizer->step({sg.grad32}, h);
}

// _reassign_or_swap_out_partitioned_parameters: `fp16_partitioned_groups_flat[i].data.copy_(
// fp32_partitioned_groups_flat[i].data)`, a blocking copy: across the boundary it converts on
// the host (Copy.cu), so the model dtype goes host->device (offload_optimizer alone) and fp32
// goes device->host (offload_param alone).
void Zero3Engine::copy_back(SubGroup& sg) {
  auto dst = partitions_.narrow(0, sg.offset, sg.numel);
  if (offload_optimizer() == offload_param()) {
    dst.copy_(sg.master);
  } else if (offload_optimizer()) {
    streams().op("offload: updated partitions to device", {sg.master, dst});
    host_copies_.to_device(dst, sg.master.to(dtypes_.model));
  } else {
    auto staged = common::host_empty({sg.numel}, at::kFloat, /*pin=*/false, comm_.world().device);
    streams().op("offload: updated masters to host", {sg.master, dst});
    host_copies_.to_host(staged, sg.master);
    dst.copy_(staged);
  }
}

ModelStateBytes Zero3Engine::split_bytes(const ModelStateBytes& all) const {
  int64_t grad32 = 0;
  for (const auto& sg : sub_groups_)
    if (sg.grad32.defined()) grad32 += int64_t(sg.grad32.nbytes());
  return split_offloaded(all, opts_, int64_t(partitions_.nbytes()), grad32);
}

ModelStateBytes split_offloaded(const ModelStateBytes& all, const Zero3Options& o, int64_t partition_bytes,
                                int64_t grad32_bytes) {
  ModelStateBytes b = all;
  auto& h = b.host;
  if (o.offload_param.enabled()) {
    b.params -= partition_bytes;
    h.params = partition_bytes;
    h.pinned = true;  // _create_param_groups_fp16_flat_cpu_memory pins it
  }
  if (o.offload_optimizer.enabled()) {
    h.master_params = std::exchange(b.master_params, 0);
    h.grads = std::exchange(b.grads, 0) + grad32_bytes;
    h.optimizer = std::exchange(b.optimizer, 0);
    h.pinned = h.pinned || o.offload_optimizer.pin_memory;
  }
  return b;
}

common::OffloadTraffic expected_step_traffic(const EngineSpec& spec, const Topology& topo, int rank) {
  const auto& o = zero3_options(spec.options);
  const auto d = dtypes_for(spec.precision, o);
  const auto sl = shard_layout(spec, topo);
  const int64_t index = sl.shard_index(rank);
  int groups = 1;
  const auto layout = param_layouts(spec.model, sl.shard_size, o, &groups);
  const int64_t ga = int64_t(c10::elementSize(d.grad_accum)), md = int64_t(c10::elementSize(d.model));
  const int64_t G = spec.train.grad_accum;
  common::OffloadTraffic t;
  if (o.offload_optimizer.enabled()) {
    for (const auto& l : layout) {
      const int64_t begin = std::min<int64_t>(index * l.part_numel, l.numel);
      const int64_t n = std::min<int64_t>(l.part_numel, l.numel - begin);
      if (n <= 0) continue;  // contains_real_data
      t.d2h_bytes += G * n * ga + n * 4;
      t.d2h_copies += G + 1;
      t.h2d_bytes += G * n * ga;
      t.h2d_copies += G;
    }
  }
  if (o.offload_optimizer.enabled() != o.offload_param.enabled()) {
    std::vector<int64_t> numel(size_t(groups), 0);
    for (const auto& l : layout) numel[size_t(l.sub_group)] += l.part_numel;
    for (int64_t n : numel) {
      if (o.offload_optimizer.enabled()) {
        t.h2d_bytes += n * md;
        ++t.h2d_copies;
      } else {
        t.d2h_bytes += n * 4;
        ++t.d2h_copies;
      }
    }
  }
  return t;
}

}  // namespace zb::backends::zero3
