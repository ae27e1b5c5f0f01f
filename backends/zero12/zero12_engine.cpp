// zero12_engine.cpp — see zero12_engine.hpp for the semantics and the upstream followed, and
// zero12_engine_impl.hpp for the split (this file: construction, accessors, bytes, options JSON,
// the closed form, BackendInfo).
#include "backends/backend_info.hpp"
#include "backends/zero12/zero12_engine.hpp"
#include "backends/zero12/zero12_config.hpp"
#include "backends/zero12/zero12_crossval.hpp"
#include "backends/zero12/zero12_engine_impl.hpp"

#include <algorithm>
#include <cstdlib>

#include "backends/common/forward_backward.hpp"
#include "backends/common/initial_weights.hpp"
#include "backends/zero12/zero12_offload.hpp"
#include "backends/zero12/zero12_program.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero12 {

Zero12Engine::Zero12Engine(const EngineSpec& spec, const runtime::World& world, int stage)
    : spec_(spec),
      opts_(zero12_options(spec.options, stage)),
      comm_(world),
      dtypes_(dtypes_for(spec.precision, opts_)) {
  at::NoGradGuard no_grad;
  if (const char* fault = std::getenv("ZEROBENCH_TEST_ZERO12_PLANT")) plant_fault(fault);  // test-only
  const auto& cfg = spec_.model;
  const auto dev = world.device;
  layout_ = flat_layout(cfg, world.size, opts_.round_robin_gradients);
  const int units = int(models::unit_count(cfg));
  int count = 0;
  for (int u = 0; u < units; ++u) {
    unit_first_.push_back(count);
    count += int(models::unit_specs(cfg, u).size());
  }
  id_of_.assign(size_t(count), -1);
  for (int k = 0; k < int(layout_.params.size()); ++k) {
    const auto& p = layout_.params[size_t(k)];
    id_of_[size_t(unit_first_[size_t(p.unit)] + p.index)] = k;
  }
  // bit16_groups_flat: every parameter, whole, in the model dtype, then zeros to the alignment
  // (flatten_dense_tensors_aligned). Every rank needs every weight (a sharded --model-dir load
  // reads them all too). DeepSpeedEngine._broadcast_model then broadcasts rank 0's weights.
  flat_params_ = at::zeros({layout_.padded}, at::TensorOptions().dtype(dtypes_.model).device(dev));
  for (int u = 0; u < units; ++u) {
    const auto init = common::initial_unit(spec_, u);
    int64_t off = 0;
    const auto specs = models::unit_specs(cfg, u);
    for (int i = 0; i < int(specs.size()); ++i) {
      const auto& p = layout_.params[size_t(id_of_[size_t(unit_first_[size_t(u)] + i)])];
      flat_params_.narrow(0, p.offset, p.numel).copy_(init.narrow(0, off, p.numel));
      off += p.numel;
    }
  }
  comm_.broadcast(flat_params_, 0, "params");
  // get_data_parallel_partitions: W equal narrows; this rank's fp32 master is a clone
  // (single_partition_of_fp32_groups: .detach().clone().to(fp32)), which the client optimizer
  // (HF's torch.optim.AdamW(fused=True)) steps.
  const int rank = world.rank;
  partition_ = flat_params_.narrow(0, int64_t(rank) * layout_.partition, layout_.partition);
  if (opts_.offload()) {
    setup_offload();  // the master, its states and the fp32 gradient on the host (zero12_offload.cpp)
  } else {
    master_ = partition_.detach().clone().to(at::kFloat);
    optimizer_ = std::make_unique<common::AdamW>(std::vector<at::Tensor>{master_}, common::adamw_options(spec_.train));
    optimizer_->set_measure_lost_updates(spec_.train.measure_lost_updates);
  }
  params_in_partition_ = layout_.params_in_partition(rank);
  in_partition_.assign(layout_.params.size(), false);
  for (int k : params_in_partition_) in_partition_[size_t(k)] = true;
  for (size_t k = 0; k < layout_.params.size(); ++k) anchors_.push_back(at::zeros({}, at::kFloat).requires_grad_(true));
  grads_.resize(layout_.params.size());
  reduced_.assign(layout_.params.size(), false);
  // self.reduction_stream = Stream() (None on a synchronized device: the CPU accelerator); used
  // only with overlap_comm (average_tensor, reduce_ipg_grads).
  auto& s = comm_.streams();
  reduction_stream_ = opts_.overlap_comm ? s.create("reduction") : s.compute();
  rope_ = models::make_rope_cache(cfg, spec_.train.seq_len, dtypes_.model, dev);
  init_fp16();  // zero12_fp16.cpp: the loss scaler (fp16 only)
  comm_.reset_stats();
}

Zero12Engine::~Zero12Engine() = default;  // nothing is deferred on a side stream (collectives are synchronous)

// DeepSpeed registers one post-accumulate-grad hook per parameter (create_gradient_handling_hooks
// -> register_grad_hook); AccumulateGrad runs as soon as a parameter's gradient is complete, so
// the hooks fire in the order autograd produces the gradients: LM head, final norm, each block
// from its down projection to its input norm, the embedding last. The hook order decides what
// shares an IPG bucket (stage 2, and stage 1 with overlap_comm), hence the collective count and,
// at W > 2, the order Gloo sums each element in. An edge made when a whole unit's weights are
// requested has a lower autograd sequence number than every op of the unit, so its backward runs
// only when no later op is ready: the root unit's edges (requested before the embedding) would
// fire after every block. One edge per weight, made right before its use, runs right after the
// backward of the op that consumed it, where DeepSpeed's hook fires.
at::Tensor Zero12Engine::module_weight(int unit, int index) {
  const int id = id_of_[size_t(unit_first_[size_t(unit)] + index)];
  return common::gather_edge(anchors_[size_t(id)], this, id);
}

// A checkpointed block takes its weights at once (models/llama.cpp: CheckpointedBlock).
std::vector<at::Tensor> Zero12Engine::unit_weights(int unit) {
  std::vector<at::Tensor> out;
  const int n = int(models::unit_specs(spec_.model, unit).size());
  for (int i = 0; i < n; ++i) out.push_back(module_weight(unit, i));
  return out;
}

at::Tensor Zero12Engine::gathered_alias(int id) {
  const auto& p = layout_.params[size_t(id)];
  const auto shape = models::unit_specs(spec_.model, p.unit)[size_t(p.index)].shape;  // unit_specs returns a copy
  return flat_params_.narrow(0, p.offset, p.numel).view(shape);
}

at::Tensor Zero12Engine::forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) {
  boundary_ = last_micro_batch;  // engine.is_gradient_accumulation_boundary()
  // fp16: engine.py backward -> loss / gas, then the optimizer's scale_if_loss: * cur_scale.
  auto loss = common::forward_backward(spec_.model, *this, batch, rope_, spec_.train.activation_checkpointing,
                                       loss_scale, this->loss_scale());
  // DeepSpeedEngine._backward_epilogue -> allreduce_gradients: stage 2 runs the epilogue after
  // every micro-batch ("ZeRO stage >= 2 communicates during non gradient accumulation boundaries
  // as well"); stage 1 only at the boundary, through reduce_gradients. (accelerate uses no no_sync
  // with DeepSpeed: sync_each_batch changes nothing.)
  if (opts_.stage == 2)
    epilogue();
  else if (boundary_)
    reduce_gradients();
  return loss;
}

std::vector<std::pair<std::string, at::Tensor>> Zero12Engine::state_tensors() {
  auto s = optimizer_ ? optimizer_->state("optim.") : cpu_adam_->state("optim.");
  s.insert(s.begin(), {"fp32_master", master_});
  s.insert(s.begin(), {"flat_params", flat_params_});
  return s;
}

void Zero12Engine::state_loaded() {
  if (optimizer_) optimizer_->state_loaded();
  else cpu_adam_->state_loaded();
}

int64_t Zero12Engine::ipg_bytes_now() const {
  int64_t b = 0;
  for (const auto& t : ipg_buffers_) b += int64_t(t.nbytes());
  return b;
}

ModelStateBytes Zero12Engine::model_state_bytes() const {
  if (opts_.offload()) return offload_state_bytes();
  ModelStateBytes b;
  b.params = int64_t(flat_params_.nbytes());
  b.master_params = int64_t(master_.nbytes());
  b.optimizer = optimizer_->state_bytes();
  // Gradient storage alive now: the accumulated in-partition gradients (all_grad_tensors /
  // averaged_gradients: views of grads_in_partition buffers), any whole gradient not yet reduced
  // (stage 1 between micro-batches), the current grads_in_partition buffer. Distinct storages
  // counted once.
  std::vector<const void*> seen;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    const void* key = t.storage().unsafeGetStorageImpl();
    for (const void* k : seen)
      if (k == key) return;
    seen.push_back(key);
    b.grads += int64_t(t.storage().nbytes());
  };
  for (const auto& ipg : ipg_buffers_) seen.push_back(ipg.storage().unsafeGetStorageImpl());  // counted as buffers
  for (const auto& t : all_grad_tensors_) add(t);
  for (const auto& t : averaged_) add(t);
  for (const auto& t : grads_) add(t);
  add(grads_in_partition_);
  b.buffers = ipg_bytes_now();
  return b;
}

nlohmann::json Zero12Engine::resolved_options() const {
  Zero12Resolved r;
  r.options = opts_;
  r.precision.communication_data_type = dtypes_.comm;
  r.precision.grad_accum_dtype = dtypes_.model;
  r.precision.model_dtype = dtypes_.model;
  r.flat_numel = layout_.numel;
  r.flat_padded = layout_.padded;
  r.partition_size = layout_.partition;
  r.ipg_buffers = opts_.overlap_comm ? 2 : 1;
  r.optimizer = !opts_.offload() ? config::adamw_description(spec_.train.adamw_impl, comm_.world().device.is_cuda()) + " on the fp32 partition"
               : opts_.host_optimizer == kCpuAdam ? std::string("DeepSpeedCPUAdam(adamw_mode=True) on the host fp32 partition")
                                                  : config::adamw_description(spec_.train.adamw_impl, false) + " on the host fp32 partition";
  r.check_grad_overflow = dtypes_.model == at::kBFloat16 || fp16();
  if (scaler_) r.precision.loss_scaler = scaler_->kind_name();
  return to_json(r);
}

std::vector<at::Tensor> Zero12Engine::full_parameters() {
  std::vector<at::Tensor> out;
  const int units = int(models::unit_count(spec_.model));
  for (int u = 0; u < units; ++u) {
    std::vector<at::Tensor> parts;
    const int n = int(models::unit_specs(spec_.model, u).size());
    for (int i = 0; i < n; ++i) {
      const auto& p = layout_.params[size_t(id_of_[size_t(unit_first_[size_t(u)] + i)])];
      parts.push_back(flat_params_.narrow(0, p.offset, p.numel));
    }
    out.push_back(at::cat(parts).to(at::kFloat).cpu());
  }
  return out;
}

// What the engine owns at the end of the last micro-batch's backward (after the epilogue):
// the whole flat buffer with its alignment pad, the fp32 master partition, two fp32 AdamW states
// on it, and the gradients of this rank's params_in_partition (the grads_in_partition buffer
// copy_grads_in_partition filled: every parameter touching the partition, whole) plus, where the
// partition runs into the alignment pad, get_flat_partition's zero tail for it. The IPG
// bucket lives only during backward (setup_buckets allocates it at the first gradient hook,
// _release_ipg_buffers drops it in the epilogue): buffers 0.
ModelStateBytes expected_bytes_for(const EngineSpec& spec, const Topology& topo, int rank, int stage) {
  const auto& o = zero12_options(spec.options, stage);
  if (o.offload()) return expected_offload_bytes(spec, topo, rank, stage);  // zero12_offload_form.cpp
  const auto d = dtypes_for(spec.precision, o);
  const auto l = flat_layout(spec.model, topo.world, o.round_robin_gradients);
  const int64_t e = int64_t(c10::elementSize(d.model));
  ModelStateBytes b;
  b.params = l.padded * e;
  b.master_params = l.partition * 4;
  const int64_t lo = int64_t(rank) * l.partition, hi = lo + l.partition;
  const int64_t tail = hi - std::min(std::max(l.numel, lo), hi);  // partition elements past the last parameter
  b.grads = (l.grads_in_partition_numel(rank) + tail) * e;
  b.optimizer = 2 * l.partition * 4;
  return b;
}

namespace {

// DeepSpeed ZeRO-1/2: the model in its dtype (bf16 / fp16 with "bf16" / "fp16": enabled), gradients and their
// reduction in it (communication_data_type may change the reduction), an fp32 master partition.
PrecisionPlan precision_plan(const EngineSpec& spec, int stage) {
  const auto d = dtypes_for(spec.precision, zero12_options(spec.options, stage));
  PrecisionPlan p;
  p.load = p.params = p.compute = d.model;
  p.reduce = d.comm;
  p.grads = d.model;
  p.master = at::kFloat;
  p.optimizer_states = at::kFloat;
  return p;
}

}  // namespace

BackendInfo backend_info(int stage) {
  BackendInfo info;
  info.name = "zero" + std::to_string(stage);
  info.description = stage == 1 ? "ZeRO-1: whole params per rank, fp32 master and optimizer states partitioned (DeepSpeed stage 1)"
                                : "ZeRO-2: whole params per rank, gradients, fp32 master and optimizer states partitioned "
                                  "(DeepSpeed stage 2)";
  info.precisions = {"fp32", "bf16", "fp16"};
  // -- training (bench/run): engine, closed form, estimate, dtypes, layout, offload
  info.training.create = [stage](const EngineSpec& s, const runtime::World& w) {
    return std::make_unique<Zero12Engine>(s, w, stage);
  };
  info.training.expected_bytes = [stage](const EngineSpec& s, const Topology& t, int rank) {
    return expected_bytes_for(s, t, rank, stage);
  };
  info.training.estimate_peak = [stage](const EngineSpec& s, const Topology& t, int rank, bool gloo) {
    return estimate_peak(s, t, rank, gloo, stage);  // zero12_estimate.cpp
  };
  info.training.precision_plan = [stage](const EngineSpec& s) { return precision_plan(s, stage); };
  info.training.shard_layout = shard_layout;  // zero12_layout.cpp
  // offload (zero12_offload.cpp): offload_optimizer device cpu (DeepSpeed has no parameter
  // offload below stage 3: offload_param is ignored there, as upstream).
  info.training.offload_choices = {{"offload_optimizer=cpu", {{"offload_optimizer", {{"device", "cpu"}}}}}};
  // -- config files and CLI flags (zero12_config.cpp)
  info.config.claim = config_claim_for(stage);
  info.config.claim_text = "";  // DEEPSPEED is zero3's text; a second reader of DeepSpeed files
  info.config.read = read_config_for(stage);
  info.config.flags = cli_flags(stage);
  info.config.flags_title = "ZeRO-" + std::to_string(stage);
  info.config.apply_flags = apply_flags_for(stage);
  // -- analysis: option effects (zero12_config.cpp), projection program (zero12_program.cpp)
  info.analysis.option_effects = option_effects();
  info.analysis.projection = projection_hooks();
  // -- crossval (zero12_crossval.cpp): real DeepSpeed stage 1/2 through run_deepspeed.py
  info.crossval = crossval_reference(stage);
  return info;
}

}  // namespace zb::backends::zero12
