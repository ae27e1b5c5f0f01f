// zero3_engine.cpp — see zero3_engine.hpp for the semantics and the upstream files followed.
// Every stream wait below names the DeepSpeed 0.19 line it mirrors; docs/backends/zero3.md has
// the table.
#include "backends/backend_info.hpp"
#include "backends/zero3/zero3_engine.hpp"
#include "backends/zero3/zero3_config.hpp"
#include "backends/zero3/zero3_checkpoint.hpp"
#include "backends/zero3/zero3_crossval.hpp"
#include "backends/zero3/zero3_padding.hpp"
#include "backends/zero3/zero3_program.hpp"

#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <deque>

#include "backends/common/forward_backward.hpp"
#include "backends/common/initial_weights.hpp"
#include "backends/common/optim.hpp"
#include "backends/common/storage.hpp"
#include "models/llama.hpp"
#include "runtime/errors.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::zero3 {

namespace {

using common::StreamId;
using common::Streams;

struct Dtypes {
  at::ScalarType model;       // partitions, all-gather, compute
  at::ScalarType comm;        // gradient reduce-scatter (and the IPG bucket)
  at::ScalarType grad_accum;  // gradient partitions
};

at::ScalarType dtype_named(const std::string& name, at::ScalarType fallback) {
  if (name.empty()) return fallback;
  return name == "fp32" ? at::kFloat : at::kBFloat16;
}

Dtypes dtypes_for(const std::string& precision, const Zero3Options& o) {
  if (precision != "bf16" && precision != "fp32")
    throw UsageError("--precision for zero3 must be bf16 or fp32, got '" + precision + "'");
  const auto model = precision == "bf16" ? at::kBFloat16 : at::kFloat;
  return {model, dtype_named(o.communication_data_type, model), dtype_named(o.grad_accum_dtype, model)};
}

// stage3.py _setup_for_real_optimizer: with contiguous_gradients one IPG buffer per
// communication dtype, torch.empty(reduce_bucket_size, dtype=comm dtype), allocated once.
int64_t ipg_buffer_bytes(const Zero3Options& o, const Dtypes& d) {
  return o.contiguous_gradients ? o.reduce_bucket_size * int64_t(c10::elementSize(d.comm)) : 0;
}

struct ParamLayout {
  int unit = 0, index = 0;
  std::vector<int64_t> shape;
  int64_t numel = 0, padded = 0, part_numel = 0, part_offset = 0;
  int sub_group = 0;
  bool persistent = false;
};

// _partition_param: pad each parameter to a multiple of W; rank r keeps [r*P, (r+1)*P).
// _create_fp16_sub_groups: consecutive parameters until their partitions reach sub_group_size.
std::vector<ParamLayout> param_layouts(const models::ModelConfig& cfg, int world, const Zero3Options& o,
                                       int* sub_groups) {
  std::vector<ParamLayout> out;
  int64_t offset = 0, in_group = 0, total_part = 0;
  const auto units = models::unit_param_specs(cfg);
  for (int u = 0; u < int(units.size()); ++u)
    for (int i = 0; i < int(units[size_t(u)].size()); ++i) total_part += partition_numel(units[size_t(u)][size_t(i)].numel(), world);
  int group = 0;
  for (int u = 0; u < int(units.size()); ++u) {
    for (int i = 0; i < int(units[size_t(u)].size()); ++i) {
      const auto& spec = units[size_t(u)][size_t(i)];
      ParamLayout p;
      p.unit = u;
      p.index = i;
      p.shape = spec.shape;
      p.numel = spec.numel();
      p.part_numel = partition_numel(p.numel, world);  // zero3_padding.hpp
      p.padded = p.part_numel * world;
      p.part_offset = offset;
      p.persistent = p.numel <= o.stage3_param_persistence_threshold;
      offset += p.part_numel;
      p.sub_group = group;
      in_group += p.part_numel;
      out.push_back(p);
      if (o.sub_group_size < total_part && in_group >= o.sub_group_size) {
        ++group;
        in_group = 0;
      }
    }
  }
  *sub_groups = in_group > 0 || out.empty() ? group + 1 : group;
  return out;
}

class Zero3Engine;

// One parameter's autograd edge: forward returns an alias of its gathered buffer (the
// parameter, [numel]), backward receives its gradient (DeepSpeed's per-parameter grad hook,
// reduce_partition_and_remove_grads).
struct ParamGather : public torch::autograd::Function<ParamGather> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& anchor, Zero3Engine* engine,
                            int64_t id);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads);
};

class Zero3Engine final : public Engine, public models::UnitParamSource {
 public:
  Zero3Engine(const EngineSpec& spec, const runtime::World& world)
      : spec_(spec), opts_(zero3_options_from_json(spec.options)), comm_(world), dtypes_(dtypes_for(spec.precision, opts_)) {
    at::NoGradGuard no_grad;
    const auto& cfg = spec_.model;
    const auto dev = world.device;
    const int W = world.size;
    layout_ = param_layouts(cfg, W, opts_, &num_sub_groups_);
    // parameter_offload.py: `__allgather_stream = Stream() if overlap_comm else default_stream()`;
    // stage3.py: `reduce_and_partition_stream = Stream() if overlap_comm else default_stream()`.
    auto& s = streams();
    allgather_stream_ = opts_.overlap_comm ? s.create("allgather") : s.compute();
    rp_stream_ = opts_.overlap_comm ? s.create("reduce_and_partition") : s.compute();
    const int64_t local = layout_.back().part_offset + layout_.back().part_numel;
    partitions_ = at::zeros({local}, at::TensorOptions().dtype(dtypes_.model).device(dev));
    // grad_partitions_flat_buffer: zeros, kept for the whole run; each micro-batch's first
    // reduction copies into it, later ones add (partition_grads, micro_step_id).
    grad_partitions_ = at::zeros({local}, at::TensorOptions().dtype(dtypes_.grad_accum).device(dev));
    const int units = int(models::unit_count(cfg));
    for (int u = 0; u < units; ++u) {
      // A sharded --model-dir load reads only this rank's partition of each parameter.
      const bool sharded_load = common::sharded_load(spec_);
      const auto flat = sharded_load ? at::Tensor() : common::initial_unit(spec_, u);
      int64_t off = 0;
      unit_first_.push_back(int(params_.size()));
      for (const auto& spec_p : models::unit_specs(cfg, u)) {
        const auto& l = layout_[params_.size()];
        const int64_t part_lo = int64_t(world.rank) * l.part_numel;
        at::Tensor part;
        if (sharded_load) {
          part = at::zeros({l.part_numel}, at::kFloat);
          const int64_t n = std::max<int64_t>(0, std::min(part_lo + l.part_numel, l.numel) - part_lo);
          if (n > 0) part.narrow(0, 0, n).copy_(common::initial_range(spec_, u, off + part_lo, n));
        } else {
          auto full = at::zeros({l.padded}, at::kFloat);
          full.narrow(0, 0, l.numel).copy_(flat.narrow(0, off, l.numel));
          part = full.narrow(0, part_lo, l.part_numel);
        }
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
      sg.master = partitions_.narrow(0, begin, sg.numel).to(at::kFloat).clone();
      sg.optimizer = std::make_unique<common::FusedAdamW>(std::vector<at::Tensor>{sg.master},
                                                          common::adamw_options(spec_.train));
      sg.optimizer->set_measure_lost_updates(spec_.train.measure_lost_updates);
      sub_groups_.push_back(std::move(sg));
    }
    if (opts_.contiguous_gradients)
      ipg_buffer_ = at::empty({opts_.reduce_bucket_size}, at::TensorOptions().dtype(dtypes_.comm).device(dev));
    rope_ = models::make_rope_cache(cfg, spec_.train.seq_len, dtypes_.model, dev);
    comm_.reset_stats();
  }

  // Work still queued on a side stream (CPU) touches this engine's members: run it first.
  ~Zero3Engine() override {
    try {
      streams().drain_all();
    } catch (...) {
    }
  }

  std::string name() const override { return "zero3"; }
  common::Comm& comm() override { return comm_; }
  // Checkpoints, DeepSpeed's split: the model-dtype partitions (zero_pp_rank_R_*_model_states)
  // and per sub-group the fp32 master and its optimizer states (*_optim_states).
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override {
    std::vector<std::pair<std::string, at::Tensor>> s = {{"partitions", partitions_}};
    for (size_t g = 0; g < sub_groups_.size(); ++g) {
      const auto prefix = "optim." + std::to_string(g) + ".";
      s.push_back({prefix + "fp32_master", sub_groups_[g].master});
      for (auto& t : sub_groups_[g].optimizer->state(prefix)) s.push_back(std::move(t));
    }
    return s;
  }
  void state_loaded() override {
    for (auto& sg : sub_groups_) sg.optimizer->state_loaded();
  }
  common::LostUpdates lost_updates() const override {
    common::LostUpdates total;
    for (const auto& sg : sub_groups_) total += sg.optimizer->last_lost_updates();
    return total;
  }

  // ---- forward: one module (weight) at a time ----
  bool per_module() const override { return true; }

  at::Tensor module_weight(int unit, int index) override {
    const int id = unit_first_[size_t(unit)] + index;
    if (unit == models::kRootUnit && index == 0) begin_micro_batch();
    // "forward unitN" spans a block's modules; the root's ("forward unit0") opens at the
    // embedding and closes after the LM head, so it nests the blocks' (as FSDP-mode's root does).
    if (index == 0) {
      auto& range = unit == models::kRootUnit ? root_forward_range_ : forward_range_;
      range = runtime::nvtx::start("forward unit" + std::to_string(unit));
    }
    release_held();  // the previous module's post-forward
    fetch(id);
    held_.push_back(id);
    return weight_view(id);
  }

  at::Tensor after_module_forward(int unit, int index, at::Tensor output) override {
    streams().op("forward module " + module_name(unit, index), {params_[size_t(unit_first_[size_t(unit)] + index)].full});
    // parameter_offload.py _post_forward_module_hook -> PreBackwardFunctionForModule on the
    // outputs: the module's parameters are fetched when its output's gradient arrives.
    if (output.requires_grad())
      output.register_hook([this, unit, index](const at::Tensor&) { pre_backward_module(unit, index); });
    return output;
  }

  // Activation checkpointing takes a whole block at once: fetch every weight, release them
  // together after the block; its recompute in backward needs them all again.
  std::vector<at::Tensor> unit_weights(int unit) override {
    if (forward_range_ == 0) forward_range_ = runtime::nvtx::start("forward unit" + std::to_string(unit));
    release_held();
    std::vector<at::Tensor> out;
    const int n = int(models::unit_specs(spec_.model, unit).size());
    for (int i = 0; i < n; ++i) {
      const int id = unit_first_[size_t(unit)] + i;
      fetch(id);
      held_.push_back(id);
      out.push_back(weight_view(id));
    }
    checkpointed_.push_back(unit);
    return out;
  }

  at::Tensor after_unit_forward(int unit, at::Tensor output) override {
    release_held();
    streams().op("forward unit" + std::to_string(unit));
    runtime::nvtx::end(std::exchange(unit == models::kRootUnit ? root_forward_range_ : forward_range_, 0));
    if (output.requires_grad()) output.register_hook([this, unit](const at::Tensor&) { pre_backward(unit); });
    return output;
  }

  // ---- backward ----
  // "backward unitN" spans from the unit's pre-backward to the next one's (or the end of backward).
  void pre_backward(int unit) {
    runtime::nvtx::end(std::exchange(backward_range_, 0));
    backward_range_ = runtime::nvtx::start("backward unit" + std::to_string(unit));
    if (unit == models::kRootUnit) {
      torch::autograd::Engine::get_default_engine().queue_callback([this] { end_of_backward(); });
      return;
    }
    // A checkpointed block recomputes as a whole: its weights are fetched together, modules in
    // reverse execution order. Other blocks fetch module by module (pre_backward_module).
    if (std::find(checkpointed_.begin(), checkpointed_.end(), unit) != checkpointed_.end()) {
      const int first = unit_first_[size_t(unit)];
      const int n = int(models::unit_specs(spec_.model, unit).size());
      for (int i = n - 1; i >= 0; --i) fetch(first + i);
    }
  }

  void pre_backward_module(int unit, int index) {  // _pre_backward_module_hook: fetch_sub_module
    fetch(unit_first_[size_t(unit)] + index);
  }

  // reduce_partition_and_remove_grads -> reduce_independent_p_g_buckets_and_remove_grads: flush
  // first if this gradient would overflow the bucket, then __add_grad_to_ipg_bucket.
  void post_backward(int id, const at::Tensor& grad) {
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
  void end_of_backward() {
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

  // ---- Engine ----
  at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) override {
    // DeepSpeed reduces every micro-batch: no_sync is not supported for ZeRO-2/3 (engine.py), so
    // accelerate does not use it with DeepSpeed and sync_each_batch changes nothing here.
    return common::forward_backward(spec_.model, *this, batch, rope_, spec_.train.activation_checkpointing,
                                     loss_scale);
  }

  double optimizer_step(double lr) override {
    at::NoGradGuard no_grad;
    // step(): _partition_all_parameters() -> release_and_reset_all first releases every
    // parameter, the persistent ones included (stage3.py step; partitioned_param_coordinator.py
    // release_and_reset_all calls __release_param without the ds_persist filter); _post_step
    // re-gathers the persistent ones below.
    for (int id = 0; id < int(params_.size()); ++id) release(id);
    // _get_norm_groups -> get_grad_norm_direct over each sub-group's gradient
    // partitions (one per parameter), combined; is_invalid_grad_norm syncs the host.
    // One get_grad_norm_direct (and all-reduce) per sub-group, then combine_grad_norm_groups.
    std::vector<at::Tensor> group_norms;
    for (const auto& sg : sub_groups_) {
      std::vector<at::Tensor> partitions;
      for (int id : sg.ids) partitions.push_back(params_[size_t(id)].grad_partition);
      group_norms.push_back(common::deepspeed_grad_norm(partitions, comm_));
    }
    const auto norm = group_norms.size() == 1 ? group_norms[0] : at::linalg_vector_norm(at::stack(group_norms), 2);
    group_norms.clear();
    const double norm_value = norm.item<double>();
    const auto clip = common::deepspeed_clip_factor(norm, spec_.train.grad_clip);
    for (auto& sg : sub_groups_) {
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
      sg.optimizer->step({grad32}, lr);
      partitions_.narrow(0, sg.offset, sg.numel).copy_(sg.master);  // _reassign_or_swap_out_partitioned_parameters
    }
    first_micro_batch_ = true;  // zero_grad: the next micro-batch copies into the partitions
    // _post_step: persistent_parameters[0].all_gather(persistent_parameters) -> Init._all_gather
    // (async_op=False) -> _allgather_params_coalesced, which launches one all_gather_into_tensor
    // per parameter (partition_parameters.py) and waits for them all, on the current stream.
    for (int id = 0; id < int(params_.size()); ++id) {
      if (!layout_[size_t(id)].persistent) continue;
      issue_all_gather({id}, "persistent", streams().compute());
      if (params_[size_t(id)].inflight) complete_gather_of(id);
    }
    return norm_value;
  }

  ModelStateBytes model_state_bytes() const override {
    ModelStateBytes b;
    b.params = int64_t(partitions_.nbytes());
    for (const auto& p : params_) b.params += common::storage_bytes(p.full);  // persisted (and any live) full params
    for (const auto& sg : sub_groups_) {
      b.master_params += int64_t(sg.master.nbytes());
      b.optimizer += sg.optimizer->state_bytes();
    }
    b.grads = int64_t(grad_partitions_.nbytes());
    b.buffers = ipg_buffer_.defined() ? int64_t(ipg_buffer_.nbytes()) : 0;
    return b;
  }

  nlohmann::json resolved_options() const override {
    auto j = to_json(opts_);
    j["communication_data_type"] = std::string(c10::toString(dtypes_.comm));
    j["grad_accum_dtype"] = std::string(c10::toString(dtypes_.grad_accum));
    j["model_dtype"] = std::string(c10::toString(dtypes_.model));
    j["sub_groups"] = num_sub_groups_;
    int64_t persistent = 0, persistent_numel = 0;
    for (const auto& l : layout_)
      if (l.persistent) {
        ++persistent;
        persistent_numel += l.numel;
      }
    j["persistent_params"] = persistent;
    j["persistent_numel"] = persistent_numel;
    j["ipg_buffer_bytes"] = ipg_buffer_bytes(opts_, dtypes_);
    j["reduces_every_micro_batch"] = true;
    j["optimizer"] = "torch.optim.AdamW(fused=True) on each fp32 sub-group";
    return j;
  }

  std::vector<at::Tensor> full_parameters() override {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> out;
    const int units = int(models::unit_count(spec_.model));
    for (int u = 0; u < units; ++u) {
      std::vector<at::Tensor> parts;
      const int n = int(models::unit_specs(spec_.model, u).size());
      for (int i = 0; i < n; ++i) {
        const int id = unit_first_[size_t(u)] + i;
        const auto& l = layout_[size_t(id)];
        // The fp32 master is the parameter (what DeepSpeed's zero_to_fp32 consolidates).
        const auto& sg = sub_groups_[size_t(l.sub_group)];
        auto part = sg.master.narrow(0, l.part_offset - sg.offset, l.part_numel).contiguous();
        auto full = at::empty({l.padded}, part.options());
        comm_.all_gather(full, part, "full_parameters");
        parts.push_back(full.narrow(0, 0, l.numel).to(at::kFloat).cpu());
      }
      out.push_back(at::cat(parts));
    }
    return out;
  }

  // The parameter: [numel] over its gathered buffer; in a world of one, over its partition
  // (_no_gather_coalesced: param.data = param.ds_tensor.data, no collective).
  at::Tensor gathered_alias(int id) {
    const auto& p = params_[size_t(id)];
    return common::storage_alias(comm_.size() == 1 ? p.partition : p.full, layout_[size_t(id)].numel);
  }

 private:
  struct Param {
    at::Tensor partition, grad_partition;  // views [part_numel]
    at::Tensor full;                       // [padded], model dtype; storage freed when released
    bool available = false;  // gathered, or being gathered (counted in the live parameters)
    bool inflight = false;   // ZeroParamStatus.INFLIGHT: an all-gather not yet waited for
    at::Tensor anchor;
  };
  struct InflightGather {  // one all-gather (AllGatherHandle / AllGatherCoalescedHandle)
    std::vector<int> ids;
    at::Tensor flat;       // coalesced: [W * sum P_i]; single: undefined (gathered in place)
    int64_t total = 0;
    common::PendingCollective collective;
  };
  struct SubGroup {
    int64_t offset = 0, numel = 0;
    std::vector<int> ids;
    at::Tensor master;  // fp32 [numel]
    std::unique_ptr<common::FusedAdamW> optimizer;
  };
  struct BucketEntry {
    int id;
    at::Tensor grad;  // [numel], comm dtype: a view into the IPG buffer (or its own tensor if it did not fit)
  };

  Streams& streams() { return comm_.streams(); }

  std::string module_name(int unit, int index) const {
    return "unit" + std::to_string(unit) + "." + models::unit_specs(spec_.model, unit)[size_t(index)].name;
  }

  at::Tensor weight_view(int id) {
    const auto& l = layout_[size_t(id)];
    auto& p = params_[size_t(id)];
    TORCH_CHECK(!p.inflight, "zero3: parameter ", id, " used before its all-gather was waited for");
    at::Tensor flat = at::GradMode::is_enabled() ? ParamGather::apply(p.anchor, this, int64_t(id)) : gathered_alias(id);
    return flat.view(l.shape);
  }

  void begin_micro_batch() {
    fetch_step_ = 0;
    prefetch_pos_ = 0;
    if (!trace_complete_) trace_.clear();
    // The model's own fetch (LlamaForCausalLM, no parameters of its own) comes first in
    // DeepSpeed's module trace: with a complete trace it prefetches from the head of the
    // parameter queue, so the first bucket includes the embedding itself
    // (partitioned_param_coordinator.py, _fetch_sub_module_impl).
    if (trace_complete_) prefetch(0);
  }

  void release_held() {
    for (int id : held_) release_if_allowed(id);
    held_.clear();
  }

  int64_t live_numel() const {
    int64_t n = 0;
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].available) n += layout_[i].numel;
    return n;
  }

  // fetch_sub_module (partitioned_param_coordinator.py): all-gather this module's parameter if
  // needed (on the all-gather stream), wait for it there, make the compute stream wait for the
  // all-gather stream; then (with a complete trace) prefetch the upcoming ones in trace order,
  // up to stage3_prefetch_bucket_size elements and within stage3_max_live_parameters, as one
  // coalesced all-gather left in flight.
  void fetch(int id) {
    if (!trace_complete_) trace_.push_back(id);
    const size_t step = fetch_step_++;
    auto& s = streams();
    if (!params_[size_t(id)].available) issue_all_gather({id}, "module", allgather_stream_);
    if (params_[size_t(id)].inflight) {
      Streams::Guard on_allgather(s, allgather_stream_);
      // __ongoing_fetch_events: drop completed ones; with more than two outstanding, the host
      // waits for the oldest before waiting for this parameter.
      while (!fetch_events_.empty() && s.query(fetch_events_.front())) fetch_events_.pop_front();
      if (fetch_events_.size() > kMaxOngoingFetchEvents) {
        s.synchronize(fetch_events_.front());
        fetch_events_.pop_front();
      }
      complete_gather_of(id);  // handle.wait() on the all-gather stream
      fetch_events_.push_back(s.record(allgather_stream_, "fetched"));
    }
    s.wait_stream(s.compute(), allgather_stream_);  // current_stream().wait_stream(__allgather_stream)
    if (trace_complete_) prefetch(step + 1);
  }

  // Prefetch the upcoming parameters in trace order from position `from`, up to
  // stage3_prefetch_bucket_size elements within stage3_max_live_parameters, as one coalesced
  // all-gather left in flight on the all-gather stream.
  void prefetch(size_t from) {
    if (opts_.stage3_prefetch_bucket_size <= 0) return;
    std::vector<int> to_prefetch;
    int64_t prefetching = 0;
    const int64_t live = live_numel();
    size_t pos = std::max(prefetch_pos_, from);
    for (; pos < trace_.size() && prefetching < opts_.stage3_prefetch_bucket_size; ++pos) {
      const int next = trace_[pos];
      if (params_[size_t(next)].available ||
          std::find(to_prefetch.begin(), to_prefetch.end(), next) != to_prefetch.end())
        continue;
      const int64_t n = layout_[size_t(next)].numel;
      if (live + prefetching + n > opts_.stage3_max_live_parameters) break;
      to_prefetch.push_back(next);
      prefetching += n;
    }
    prefetch_pos_ = pos;
    if (!to_prefetch.empty()) issue_all_gather(to_prefetch, "prefetch", allgather_stream_);
  }

  // all_gather_coalesced on `stream` (fetches: `with stream(__allgather_stream)`), left in flight:
  //  - one parameter (_all_gather_sequential): gathered in place into its padded buffer, which
  //    becomes the parameter (no copy in or out);
  //  - several (_all_gather_dtype): one flat [W * sum P_i] buffer, this rank's slice filled by a
  //    cat of the partitions, gathered in place; each parameter is copied out at the wait.
  void issue_all_gather(const std::vector<int>& ids, const std::string& label, StreamId stream) {
    at::NoGradGuard no_grad;
    auto& s = streams();
    Streams::Guard on_stream(s, stream);
    const int W = comm_.size();
    if (W == 1) {
      // A world of one gathers nothing: the parameter's data is its partition, a view, no
      // collective (all_gather_coalesced -> _no_gather_coalesced -> NoGatherHandle:
      // param.data = param.ds_tensor.data); see gathered_alias.
      for (int id : ids) {
        params_[size_t(id)].available = true;
        params_[size_t(id)].inflight = false;
      }
      return;
    }
    InflightGather g;
    g.ids = ids;
    for (int id : ids) {
      auto& p = params_[size_t(id)];
      g.total += layout_[size_t(id)].part_numel;
      p.available = true;
      p.inflight = true;
    }
    if (ids.size() == 1) {
      auto& p = params_[size_t(ids[0])];
      const auto& l = layout_[size_t(ids[0])];
      common::allocate_storage(p.full, l.padded * int64_t(c10::elementSize(dtypes_.model)));
      g.collective = comm_.all_gather_async(p.full, p.partition, label);
    } else {
      g.flat = at::empty({W * g.total}, partitions_.options());  // [W * sum P_i]
      auto mine = g.flat.narrow(0, int64_t(comm_.rank()) * g.total, g.total);
      std::vector<at::Tensor> parts;
      for (int id : ids) parts.push_back(params_[size_t(id)].partition);
      at::cat_out(mine, parts);
      g.collective = comm_.all_gather_async(g.flat, mine, label);
    }
    inflight_gathers_.push_back(std::move(g));
  }

  // Waits for the all-gather that carries `id` (on the current stream) and, for a coalesced
  // one, copies each of its parameters out of the flat buffer (AllGatherCoalescedHandle.wait).
  void complete_gather_of(int id) {
    at::NoGradGuard no_grad;
    const int W = comm_.size();
    auto it = std::find_if(inflight_gathers_.begin(), inflight_gathers_.end(), [id](const InflightGather& g) {
      return std::find(g.ids.begin(), g.ids.end(), id) != g.ids.end();
    });
    TORCH_CHECK(it != inflight_gathers_.end(), "zero3: parameter ", id, " is not in flight");
    it->collective.wait();
    int64_t off = 0;
    for (int pid : it->ids) {
      auto& p = params_[size_t(pid)];
      const auto& l = layout_[size_t(pid)];
      if (it->flat.defined()) {
        common::allocate_storage(p.full, l.padded * int64_t(c10::elementSize(dtypes_.model)));
        p.full.view({W, l.part_numel}).copy_(it->flat.view({W, it->total}).narrow(1, off, l.part_numel));
      }
      off += l.part_numel;
      p.inflight = false;
    }
    inflight_gathers_.erase(it);
  }

  // __params_to_release: never persistent ones; with a complete trace keep a parameter that
  // is used again within stage3_max_reuse_distance elements of upcoming fetches.
  // While the trace is being recorded DeepSpeed releases every parameter of a module after
  // use, persistent ones included: release_sub_module filters ds_persist only through
  // __params_to_release, which needs a complete trace (partitioned_param_coordinator.py).
  void release_if_allowed(int id) {
    if (layout_[size_t(id)].persistent && trace_complete_) return;
    if (trace_complete_) {
      int64_t traversed = 0;
      for (size_t pos = fetch_step_; pos < trace_.size(); ++pos) {
        if (traversed >= opts_.stage3_max_reuse_distance) break;
        if (trace_[pos] == id) return;
        traversed += layout_[size_t(trace_[pos])].numel;
      }
    }
    release(id);
  }

  // free_param: record the storage on the current stream, then drop it.
  void release(int id) {
    auto& p = params_[size_t(id)];
    if (!p.available) return;
    if (p.inflight) {
      Streams::Guard on_allgather(streams(), allgather_stream_);
      complete_gather_of(id);  // never free storage a collective may still write
    }
    streams().record_stream(p.full, streams().current(), "param " + std::to_string(id));
    common::free_storage(p.full);
    p.available = false;
  }

  // __add_grad_to_ipg_bucket: the reduce-and-partition stream waits for the current stream,
  // then (contiguous_gradients, and it fits) the gradient is copied into the IPG buffer there
  // and the autograd gradient is let go.
  void add_grad_to_bucket(int id, const at::Tensor& grad) {
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
  void reduce_and_partition_bucket() {
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
    std::sort(bucket_.begin(), bucket_.end(), [](const BucketEntry& a, const BucketEntry& b) { return a.id < b.id; });
    int64_t total = 0;
    for (const auto& e : bucket_) {
      total += layout_[size_t(e.id)].part_numel;
      // A gradient that did not go into the IPG buffer is read here, off the stream it was
      // made on (partition_grads: param.grad.record_stream(current_stream())).
      if (!(ipg_buffer_.defined() && e.grad.is_alias_of(ipg_buffer_))) s.record_stream(e.grad, rp_stream_, "grad");
    }
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
    const bool copy = first_micro_batch_;
    s.enqueue(rp_stream_, std::move(waits), "partition_grads", [this, ids, out, copy] { partition_grads(ids, out, copy); });
    param_reduce_events_.push_back(s.record(rp_stream_, "partitioned"));
  }

  // partition_grads: each parameter's real part of this rank's reduced chunk, cast to
  // grad_accum_dtype, copied (first micro-batch) or added into its gradient partition.
  void partition_grads(const std::vector<int>& ids, const at::Tensor& out, bool copy) {
    at::NoGradGuard no_grad;
    const int rank = comm_.rank();
    int64_t off = 0;
    for (int id : ids) {
      const auto& l = layout_[size_t(id)];
      const int64_t begin = std::min<int64_t>(int64_t(rank) * l.part_numel, l.numel);
      const int64_t n = std::min<int64_t>(l.part_numel, l.numel - begin);
      if (n > 0) {  // contains_real_data
        auto part = out.narrow(0, off, n);
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

  EngineSpec spec_;
  Zero3Options opts_;
  common::Comm comm_;
  Dtypes dtypes_;
  std::vector<ParamLayout> layout_;
  std::vector<Param> params_;
  std::vector<int> unit_first_;  // unit -> id of its first parameter
  int num_sub_groups_ = 1;
  std::vector<SubGroup> sub_groups_;
  at::Tensor partitions_, grad_partitions_;
  at::Tensor ipg_buffer_;  // [reduce_bucket_size], comm dtype (contiguous_gradients)
  models::RopeCache rope_;
  StreamId allgather_stream_ = 0, rp_stream_ = 0;
  static constexpr size_t kMaxOngoingFetchEvents = 2;  // __max_ongoing_fetch_events
  static constexpr size_t kMaxParamReduceEvents = 2;   // max_param_reduce_events
  std::deque<common::StreamEvent> fetch_events_, param_reduce_events_;
  std::vector<int> trace_;  // parameter ids in fetch order over one micro-batch
  bool trace_complete_ = false;
  size_t fetch_step_ = 0, prefetch_pos_ = 0;
  std::vector<int> held_;          // weights fetched in forward, awaiting their module's post-forward
  std::vector<int> checkpointed_;  // blocks run as a whole this micro-batch (activation checkpointing)
  std::vector<BucketEntry> bucket_;
  int64_t bucket_numel_ = 0;
  bool ipg_in_use_ = false;         // a reduce-scatter in flight reads the IPG buffer in place
  bool first_micro_batch_ = true;   // micro_step_id == 0: partition_grads copies instead of adding
  std::vector<InflightGather> inflight_gathers_;
  uint64_t forward_range_ = 0, root_forward_range_ = 0, backward_range_ = 0;  // NVTX start/end ranges
};

at::Tensor ParamGather::forward(torch::autograd::AutogradContext* ctx, const at::Tensor&, Zero3Engine* engine,
                                int64_t id) {
  ctx->saved_data["engine"] = reinterpret_cast<int64_t>(engine);
  ctx->saved_data["id"] = id;
  return engine->gathered_alias(int(id));
}

torch::autograd::variable_list ParamGather::backward(torch::autograd::AutogradContext* ctx,
                                                     torch::autograd::variable_list grads) {
  auto* engine = reinterpret_cast<Zero3Engine*>(ctx->saved_data["engine"].toInt());
  const auto& g = grads[0];
  engine->post_backward(int(ctx->saved_data["id"].toInt()), g);
  return {at::Tensor(), at::Tensor(), at::Tensor()};
}

// ZeRO-3 partitions over the whole data-parallel group (no hpZ/MiCS here): the topology's world.
ModelStateBytes expected_bytes(const EngineSpec& spec, const Topology& topo, int /*rank*/) {
  const int world = topo.world;
  const auto o = zero3_options_from_json(spec.options);
  const auto d = dtypes_for(spec.precision, o);
  int groups = 1;
  const int64_t e = int64_t(c10::elementSize(d.model));
  ModelStateBytes b;
  // Per parameter: its padded partition in the model dtype, the full padded copy of a
  // persistent one (none in a world of one), an fp32 master partition, a gradient partition,
  // two fp32 AdamW states.
  for (const auto& l : param_layouts(spec.model, world, o, &groups)) {
    b.params += l.part_numel * e + (l.persistent && world > 1 ? l.padded * e : 0);  // W=1: the partition is the param
    b.master_params += l.part_numel * 4;
    b.grads += l.part_numel * int64_t(c10::elementSize(d.grad_accum));
    b.optimizer += 2 * l.part_numel * 4;
  }
  b.buffers = ipg_buffer_bytes(o, d);  // the IPG bucket
  return b;
}

}  // namespace

// DeepSpeed ZeRO-3: parameters made by zero.Init in the model dtype (bf16 with "bf16": enabled),
// gradients reduced in communication_data_type and kept in grad_accum_dtype, and an fp32 master
// partition per sub-group that AdamW updates (stage3.py _create_fp32_partitions) in every mode.
PrecisionPlan precision_plan(const EngineSpec& spec) {
  const auto d = dtypes_for(spec.precision, zero3_options_from_json(spec.options));
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
  info.precisions = {"fp32", "bf16"};
  info.create = [](const EngineSpec& s, const runtime::World& w) { return std::make_unique<Zero3Engine>(s, w); };
  info.expected_bytes = expected_bytes;
  info.precision_plan = precision_plan;
  // -- config files and CLI flags (config/, bench/config_resolve, bench/run_options)
  info.config_claim = config_claim;
  info.config_claim_text = "DEEPSPEED";
  info.read_config = read_config;
  info.flags = cli_flags();
  info.flags_title = "ZeRO-3";
  info.apply_flags = apply_flags;
  // -- crossval, checkpoints and studies
  info.crossval = crossval_reference();
  info.checkpoint = checkpoint_layout();
  info.precision_study_modes = {{"zero3_bf16", "bf16"}};
  // -- projection programs (analysis/projection, backends/<x>/<x>_program.cpp)
  info.projection = projection_hooks();
  return info;
}

}  // namespace zb::backends::zero3
