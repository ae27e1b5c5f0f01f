// zero3_engine.cpp — see zero3_engine.hpp for the semantics and the upstream files followed, and
// zero3_engine_impl.hpp for how the engine is split (this file: construction, accessors, bytes,
// options JSON, the closed form, BackendInfo). Every stream wait names the DeepSpeed 0.19 line it
// mirrors; docs/backends/zero3.md has the table.
#include "backends/backend_info.hpp"
#include "backends/zero3/zero3_engine.hpp"
#include "backends/zero3/zero3_config.hpp"
#include "backends/zero3/zero3_checkpoint.hpp"
#include "backends/zero3/zero3_crossval.hpp"
#include "backends/zero3/zero3_offload.hpp"
#include "backends/zero3/zero3_padding.hpp"
#include "backends/zero3/zero3_program.hpp"
#include "backends/zero3/zero3_zeropp.hpp"

#include "backends/common/drain.hpp"
#include "backends/common/forward_backward.hpp"
#include "backends/common/initial_weights.hpp"
#include "backends/common/storage.hpp"
#include "backends/zero3/zero3_engine_impl.hpp"
#include "backends/zero3/zero3_granularity.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

Zero3Engine::Zero3Engine(const EngineSpec& spec, const runtime::World& world)
    : spec_(spec), opts_(zero3_options(spec.options)), comm_(world), dtypes_(dtypes_for(spec.precision, opts_)) {
  at::NoGradGuard no_grad;
  const auto& cfg = spec_.model;
  const auto dev = world.device;
  // The run's layout (zero3_layout.cpp): partitioned over the whole world.
  const auto sl = shard_layout(spec_, Topology(world.size, world.local_size));
  layout_ = param_layouts(cfg, sl.shard_size, opts_, &num_sub_groups_);
  // parameter_offload.py: `__allgather_stream = Stream() if overlap_comm else default_stream()`;
  // stage3.py: `reduce_and_partition_stream = Stream() if overlap_comm else default_stream()`.
  auto& s = streams();
  allgather_stream_ = opts_.overlap_comm ? s.create("allgather") : s.compute();
  rp_stream_ = opts_.overlap_comm ? s.create("reduce_and_partition") : s.compute();
  const int64_t local = layout_.back().part_offset + layout_.back().part_numel;
  // offload_param: the partitions live in one host buffer (stage3.py
  // _create_param_groups_fp16_flat_cpu_memory: get_accelerator().pin_memory(torch.empty(...)),
  // pinned whatever offload_param.pin_memory says), else on the device (defragment).
  partitions_ = offload_param() ? common::host_empty({local}, dtypes_.model, /*pin=*/true, dev).zero_()
                                : at::zeros({local}, at::TensorOptions().dtype(dtypes_.model).device(dev));
  // grad_partitions_flat_buffer: zeros, kept for the whole run; each micro-batch's first
  // reduction copies into it, later ones add (partition_grads, micro_step_id). With
  // offload_optimizer it lives on the host (self.device = cpu), pinned when pin_memory.
  grad_partitions_ = offload_optimizer()
                         ? common::host_empty({local}, dtypes_.grad_accum, opts_.offload_optimizer.pin_memory, dev).zero_()
                         : at::zeros({local}, at::TensorOptions().dtype(dtypes_.grad_accum).device(dev));
  param_grad_norms_.resize(layout_.size());
  const int units = int(models::unit_count(cfg));
  for (int u = 0; u < units; ++u) {
    // A sharded --model-dir load reads only this rank's partition of each parameter.
    const bool sharded_load = common::sharded_load(spec_);
    const auto flat = sharded_load ? at::Tensor() : common::initial_unit(spec_, u);
    int64_t off = 0;
    unit_first_.push_back(int(params_.size()));
    for (const auto& spec_p : models::unit_specs(cfg, u)) {
      const auto& l = layout_[params_.size()];
      const int64_t part_lo = int64_t(sl.shard_index(world.rank)) * l.part_numel;
      const auto part = common::padded_chunk(spec_, u, off, l.numel, part_lo, l.part_numel,
                                             sharded_load ? at::Tensor() : flat.narrow(0, off, l.numel));
      off += spec_p.numel();
      Param p;
      p.partition = partitions_.narrow(0, l.part_offset, l.part_numel);
      p.grad_partition = grad_partitions_.narrow(0, l.part_offset, l.part_numel);
      p.partition.copy_(part);
      p.full = at::empty({l.padded}, at::TensorOptions().dtype(dtypes_.model).device(dev));
      common::free_storage(p.full);
      p.anchor = at::zeros({}, at::kFloat).requires_grad_(true);
      params_.push_back(std::move(p));
    }
  }
  // _create_fp32_partitions: an fp32 master copy of each sub-group's partitions (always a
  // separate copy, even when the model dtype is fp32); the client optimizer (HF's
  // torch.optim.AdamW(fused=True)) steps one fp32 flat tensor per sub-group (_optimizer_step).
  for (int g = 0; g < num_sub_groups_; ++g) {
    int64_t begin = -1, end = 0;
    for (const auto& l : layout_)
      if (l.sub_group == g) {
        if (begin < 0) begin = l.part_offset;
        end = l.part_offset + l.part_numel;
      }
    SubGroup sg;
    sg.offset = begin;
    sg.numel = end - begin;
    for (int id = 0; id < int(layout_.size()); ++id)
      if (layout_[size_t(id)].sub_group == g) sg.ids.push_back(id);
    make_sub_group_state(sg);  // zero3_offload.cpp: the master, its optimizer (and host buffers)
    sub_groups_.push_back(std::move(sg));
  }
  if (opts_.contiguous_gradients)
    ipg_buffer_ = at::empty({opts_.reduce_bucket_size}, at::TensorOptions().dtype(dtypes_.comm).device(dev));
  rope_ = models::make_rope_cache(cfg, spec_.train.seq_len, dtypes_.model, dev);
  init_zeropp();  // zero3_zeropp.cpp: the hpZ groups (collective), qwZ's group checks
  init_qgz();     // zero3_qgz.cpp: qgZ's local/global all-to-all groups (collective), its shape checks
  init_fp16();  // zero3_fp16.cpp: the loss scaler (fp16 only)
  granularity_ = check_module_granularity(opts_.stage3_module_granularity_threshold, spec_.model);  // or exit 2
  comm_.reset_stats();
}

Zero3Engine::~Zero3Engine() { common::drain_before_destroy(streams()); }

// Checkpoints, DeepSpeed's split: the model-dtype partitions (zero_pp_rank_R_*_model_states)
// and per sub-group the fp32 master and its optimizer states (*_optim_states).
std::vector<std::pair<std::string, at::Tensor>> Zero3Engine::state_tensors() {
  std::vector<std::pair<std::string, at::Tensor>> s = {{"partitions", partitions_}};
  for (size_t g = 0; g < sub_groups_.size(); ++g) {
    const auto prefix = "optim." + std::to_string(g) + ".";
    s.push_back({prefix + "fp32_master", sub_groups_[g].master});
    const auto& sg = sub_groups_[g];
    for (auto& t : sg.cpu_adam ? sg.cpu_adam->state(prefix) : sg.optimizer->state(prefix)) s.push_back(std::move(t));
  }
  return s;
}

void Zero3Engine::state_loaded() {
  for (auto& sg : sub_groups_) {
    if (sg.cpu_adam) sg.cpu_adam->state_loaded();
    else sg.optimizer->state_loaded();
  }
}

common::LostUpdates Zero3Engine::lost_updates() const {
  common::LostUpdates total;
  for (const auto& sg : sub_groups_)
    if (sg.optimizer) total += sg.optimizer->last_lost_updates();
  return total;
}

at::Tensor Zero3Engine::forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) {
  // DeepSpeed reduces every micro-batch: no_sync is not supported for ZeRO-2/3 (engine.py), so
  // accelerate does not use it with DeepSpeed and sync_each_batch changes nothing here.
  boundary_ = last_micro_batch;  // engine.is_gradient_accumulation_boundary(): partition_grads offloads then
  // fp16: engine.py backward -> loss / gas, then the optimizer's scale_if_loss: * cur_scale.
  return common::forward_backward(spec_.model, *this, batch, rope_, spec_.train.activation_checkpointing,
                                   loss_scale, this->loss_scale());
}

ModelStateBytes Zero3Engine::model_state_bytes() const {
  ModelStateBytes b;  // every category as if on the device; split_bytes moves what offload keeps on the host
  b.params = int64_t(partitions_.nbytes());
  for (const auto& p : params_) b.params += common::storage_bytes(p.full);  // persisted (and any live) full params
  for (const auto& sg : sub_groups_) {
    b.master_params += int64_t(sg.master.nbytes());
    b.optimizer += sg.cpu_adam ? sg.cpu_adam->state_bytes() : sg.optimizer->state_bytes();
  }
  b.params += secondary_bytes();  // hpZ secondary partitions (zero3_zeropp.hpp: why params)
  b.grads = int64_t(grad_partitions_.nbytes());
  b.buffers = ipg_buffer_.defined() ? int64_t(ipg_buffer_.nbytes()) : 0;
  return split_bytes(b);
}

nlohmann::json Zero3Engine::resolved_options() const {
  Zero3Resolved r;
  r.options = opts_;
  r.precision.communication_data_type = dtypes_.comm;
  r.precision.grad_accum_dtype = dtypes_.grad_accum;
  r.precision.model_dtype = dtypes_.model;
  r.sub_groups = num_sub_groups_;
  for (const auto& l : layout_)
    if (l.persistent) {
      ++r.persistent_params;
      r.persistent_numel += l.numel;
    }
  r.ipg_buffer_bytes = ipg_buffer_bytes(opts_, dtypes_);
  r.optimizer = !offload_optimizer() ? config::adamw_description(spec_.train.adamw_impl, comm_.world().device.is_cuda()) + " on each fp32 sub-group"
                : opts_.host_optimizer == kCpuAdam
                    ? std::string("DeepSpeedCPUAdam on each host fp32 sub-group (offload_optimizer)")
                    : config::adamw_description(spec_.train.adamw_impl, false) + " on each host fp32 sub-group (offload_optimizer)";
  r.hpz_group_size = hpz_;  // effective: min(zero_hpz_partition_size, W), 1 = off
  if (hpz_ > 1) r.hpz_group = hpz_group_ranks(comm_.rank(), hpz_);
  r.module_granularity = granularity_;  // zero3_granularity.hpp
  if (scaler_) r.precision.loss_scaler = scaler_->kind_name();
  return to_json(r);
}

// ZeRO-3 partitions over the run's shard layout: the whole data-parallel group (no hpZ/MiCS).
ModelStateBytes expected_bytes(const EngineSpec& spec, const Topology& topo, int /*rank*/) {
  const auto& o = zero3_options(spec.options);
  const auto d = dtypes_for(spec.precision, o);
  const int world = shard_layout(spec, topo).shard_size;  // the whole world (no hpZ/MiCS)
  int groups = 1;
  const int64_t e = int64_t(c10::elementSize(d.model));
  ModelStateBytes b;
  // Per parameter: its padded partition in the model dtype, the full padded copy of a
  // persistent one (none in a world of one), an fp32 master partition, a gradient partition,
  // two fp32 AdamW states.
  int64_t partitions = 0;
  const auto layouts = param_layouts(spec.model, world, o, &groups);
  // hpZ (zero3_zeropp.hpp): the secondary partitions live at the last backward, of every
  // non-persistent parameter, and of the persistent ones too in a one-step run (the step that
  // records the trace releases them after use).
  b.params += secondary_bytes(layouts, effective_hpz(o, world), e, spec.train.steps == 1);
  for (const auto& l : layouts) {
    // W=1: the partition is the param, unless offload_param keeps it on the host.
    const bool whole_on_device = l.persistent && (world > 1 || o.offload_param.enabled());
    b.params += l.part_numel * e + (whole_on_device ? l.padded * e : 0);
    partitions += l.part_numel;
    b.master_params += l.part_numel * 4;
    b.grads += l.part_numel * int64_t(c10::elementSize(d.grad_accum));
    b.optimizer += 2 * l.part_numel * 4;
  }
  b.buffers = ipg_buffer_bytes(o, d);  // the IPG bucket
  // offload (zero3_offload.hpp): partitions, masters, gradients (+ one fp32 gradient buffer per
  // sub-group, the partitions' size in all) and states move to the host.
  return split_offloaded(b, o, partitions * e, o.offload_optimizer.enabled() ? partitions * 4 : 0);
}

// DeepSpeed ZeRO-3: parameters made by zero.Init in the model dtype (bf16 with "bf16": enabled),
// gradients reduced in communication_data_type and kept in grad_accum_dtype, and an fp32 master
// partition per sub-group that AdamW updates (stage3.py _create_fp32_partitions) in every mode.
PrecisionPlan precision_plan(const EngineSpec& spec) {
  const auto d = dtypes_for(spec.precision, zero3_options(spec.options));
  PrecisionPlan p;
  p.load = p.params = p.compute = d.model;
  p.reduce = d.comm;
  p.grads = d.grad_accum;
  p.master = at::kFloat;
  p.optimizer_states = at::kFloat;
  return p;
}

BackendInfo backend_info() {
  BackendInfo info;
  info.name = "zero3";
  info.description = "ZeRO3-mode: per-parameter partitions, fp32 master, DeepSpeed stage-3 semantics";
  info.precisions = {"fp32", "bf16", "fp16"};
  // -- training (bench/run): engine, closed form, estimate, dtypes, layout, offload
  info.training.create = [](const EngineSpec& s, const runtime::World& w) {
    return std::make_unique<Zero3Engine>(s, w);
  };
  info.training.expected_bytes = expected_bytes;
  info.training.estimate_peak = estimate_peak;  // zero3_estimate.cpp
  info.training.precision_plan = precision_plan;
  info.training.shard_layout = shard_layout;  // zero3_layout.cpp
  // offload (zero3_offload.cpp): DeepSpeed offloads the optimizer and the parameters
  // separately; offload_param does not need offload_optimizer (stage3.py _configure_offloading
  // reads each on its own).
  const nlohmann::json cpu = {{"device", "cpu"}};
  info.training.offload_choices = {
      {"offload_optimizer=cpu", {{"offload_optimizer", cpu}}},
      {"offload_param=cpu", {{"offload_param", cpu}}},
      {"offload_optimizer=cpu + offload_param=cpu", {{"offload_optimizer", cpu}, {"offload_param", cpu}}}};
  // -- config files and CLI flags (zero3_config.cpp)
  info.config.claim = config_claim;
  info.config.claim_text = "DEEPSPEED";
  info.config.read = read_config;
  info.config.flags = cli_flags();
  info.config.flags_title = "ZeRO-3";
  info.config.apply_flags = apply_flags;
  // -- analysis: option effects (zero3_config.cpp), projection program (zero3_program.cpp), study rows
  info.analysis.option_effects = option_effects();
  info.analysis.projection = projection_hooks();
  info.analysis.precision_study_modes = {{"zero3_bf16", "bf16"}, {"zero3_fp16", "fp16"}};
  // -- crossval (zero3_crossval.cpp)
  info.crossval = crossval_reference();
  // -- lifecycle: DeepSpeed's checkpoint files (zero3_checkpoint.cpp)
  info.lifecycle.checkpoint = checkpoint_layout();
  return info;
}

}  // namespace zb::backends::zero3
