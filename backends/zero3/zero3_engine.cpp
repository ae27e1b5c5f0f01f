// zero3_engine.cpp — see zero3_engine.hpp for the semantics and the upstream files followed.
#include "backends/zero3/zero3_engine.hpp"

#include <torch/csrc/autograd/engine.h>

#include <algorithm>

#include "backends/common/forward_backward.hpp"
#include "backends/common/optim.hpp"
#include "backends/common/storage.hpp"
#include "models/llama.hpp"
#include "runtime/errors.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::zero3 {

namespace {

struct Dtypes {
  at::ScalarType model;       // partitions, all-gather, compute
  at::ScalarType comm;        // gradient reduce-scatter
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
    for (int i = 0; i < int(units[size_t(u)].size()); ++i) total_part += (units[size_t(u)][size_t(i)].numel() + world - 1) / world;
  int group = 0;
  for (int u = 0; u < int(units.size()); ++u) {
    for (int i = 0; i < int(units[size_t(u)].size()); ++i) {
      const auto& spec = units[size_t(u)][size_t(i)];
      ParamLayout p;
      p.unit = u;
      p.index = i;
      p.shape = spec.shape;
      p.numel = spec.numel();
      p.padded = (p.numel + world - 1) / world * world;
      p.part_numel = p.padded / world;
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

// One parameter's autograd edge: forward returns an alias of its gathered buffer, backward
// receives its full gradient (DeepSpeed's per-parameter gradient hook).
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
    const int64_t local = layout_.back().part_offset + layout_.back().part_numel;
    partitions_ = at::zeros({local}, at::TensorOptions().dtype(dtypes_.model).device(dev));
    grad_partitions_ = at::zeros({local}, at::TensorOptions().dtype(dtypes_.grad_accum).device(dev));
    const int units = int(models::unit_count(cfg));
    for (int u = 0; u < units; ++u) {
      auto flat = models::init_unit_flat(cfg, u, spec_.train.seed);
      int64_t off = 0;
      unit_first_.push_back(int(params_.size()));
      for (const auto& spec_p : models::unit_specs(cfg, u)) {
        const auto& l = layout_[params_.size()];
        auto full = at::zeros({l.padded}, at::kFloat);
        full.narrow(0, 0, l.numel).copy_(flat.narrow(0, off, l.numel));
        off += spec_p.numel();
        Param p;
        p.partition = partitions_.narrow(0, l.part_offset, l.part_numel);
        p.grad_partition = grad_partitions_.narrow(0, l.part_offset, l.part_numel);
        p.partition.copy_(full.narrow(0, int64_t(world.rank) * l.part_numel, l.part_numel));
        p.full = at::empty({l.padded}, at::TensorOptions().dtype(dtypes_.model).device(dev));
        common::free_storage(p.full);
        p.anchor = at::zeros({}, at::kFloat).requires_grad_(true);
        params_.push_back(std::move(p));
      }
    }
    // _create_fp32_partitions: an fp32 master copy of each sub-group's partitions (always a
    // separate copy, even when the model dtype is fp32), with its own optimizer state.
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
      sg.master = partitions_.narrow(0, begin, sg.numel).to(at::kFloat).clone();
      sg.optimizer = std::make_unique<common::FlatAdamW>(sg.master, common::adamw_options(spec_.train));
      sg.optimizer->set_measure_lost_updates(spec_.train.measure_lost_updates);
      sub_groups_.push_back(std::move(sg));
    }
    rope_ = models::make_rope_cache(cfg, spec_.train.seq_len, dtypes_.model, dev);
    comm_.reset_stats();
  }

  std::string name() const override { return "zero3"; }
  common::Comm& comm() override { return comm_; }
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
    if (index == 0) forward_range_ = runtime::nvtx::start("forward unit" + std::to_string(unit));
    release_held();  // the previous module's post-forward
    fetch(id);
    held_.push_back(id);
    return weight_view(id);
  }

  // Activation checkpointing takes a whole block at once: fetch every weight, release them
  // together after the block.
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
    return out;
  }

  at::Tensor after_unit_forward(int unit, at::Tensor output) override {
    release_held();
    runtime::nvtx::end(std::exchange(forward_range_, 0));
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
      // The LM head and final norm run first in backward; the embedding is fetched when its
      // own gradient arrives (its module's pre-backward comes last).
      fetch(unit_first_[0] + 2);
      fetch(unit_first_[0] + 1);
      return;
    }
    const int first = unit_first_[size_t(unit)];
    const int n = int(models::unit_specs(spec_.model, unit).size());
    for (int i = n - 1; i >= 0; --i) fetch(first + i);  // modules in reverse execution order
  }

  void post_backward(int id, const at::Tensor& grad) {
    at::NoGradGuard no_grad;
    const auto& l = layout_[size_t(id)];
    if (id == unit_first_[0]) fetch(id);  // the embedding module's pre-backward: its gradient is last
    // __add_grad_to_ipg_bucket: flush first if this gradient would overflow the bucket.
    if (bucket_numel_ > 0 && bucket_numel_ + l.numel > opts_.reduce_bucket_size) flush_bucket();
    bucket_.push_back({id, grad.to(dtypes_.comm).contiguous()});
    bucket_numel_ += l.numel;
    release_if_allowed(id);
  }

  void end_of_backward() {  // release_and_reset_all + the final bucket
    flush_bucket();
    finish_reductions();
    runtime::nvtx::end(std::exchange(backward_range_, 0));
    for (int id = 0; id < int(params_.size()); ++id)
      if (!layout_[size_t(id)].persistent) release(id);
    if (!trace_complete_) trace_complete_ = true;  // the first micro-batch recorded the trace
    held_.clear();
  }

  // ---- Engine ----
  at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) override {
    auto loss =
        common::forward_backward(spec_.model, *this, batch, rope_, spec_.train.activation_checkpointing, loss_scale);
    return loss;
  }

  double optimizer_step(double lr) override {
    at::NoGradGuard no_grad;
    // stage3.py step(): _partition_all_parameters() first releases every parameter, the
    // persistent ones included (they are re-gathered in _post_step below).
    for (int id = 0; id < int(params_.size()); ++id) release(id);
    // Global norm over every rank's gradient partitions, accumulated and all-reduced in fp64
    // (get_grad_norm_direct with zero/utils.py get_norm_dtype()), then clip and step each
    // sub-group: fp32 gradient (transient), AdamW on the fp32 master, copy to the partition.
    const double norm = common::global_grad_norm({grad_partitions_}, comm_, /*replicated=*/false, nullptr, at::kDouble);
    // unscale_and_clip_grads: clip = (norm + 1e-6) / max_norm; gradients x 1/clip when clip > 1.
    const double clip = spec_.train.grad_clip > 0 ? (norm + 1e-6) / spec_.train.grad_clip : 1.0;
    for (auto& sg : sub_groups_) {
      auto grad32 = grad_partitions_.narrow(0, sg.offset, sg.numel).to(at::kFloat);
      if (clip > 1.0) grad32.mul_(1.0 / clip);
      sg.optimizer->step(grad32, lr);
      partitions_.narrow(0, sg.offset, sg.numel).copy_(sg.master);
    }
    grad_partitions_.zero_();
    // _post_step: persistent parameters are re-gathered through Init._all_gather ->
    // _allgather_params_coalesced, which launches one all-gather per parameter.
    for (int id = 0; id < int(params_.size()); ++id)
      if (layout_[size_t(id)].persistent) all_gather_coalesced({id}, "persistent", /*async=*/false);
    return norm;
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

  at::Tensor gathered_alias(int id) {
    const auto& p = params_[size_t(id)];
    return common::storage_alias(comm_.size() == 1 ? p.partition : p.full);
  }

 private:
  struct Param {
    at::Tensor partition, grad_partition;  // views [part_numel]
    at::Tensor full;                       // [padded], model dtype; storage freed when released
    bool available = false;  // storage allocated: gathered, or being gathered while inflight
    bool inflight = false;   // ZeroParamStatus.INFLIGHT: a prefetch all-gather not yet waited for
    at::Tensor anchor;
  };
  struct InflightGather {  // one coalesced prefetch all-gather (AllGatherCoalescedHandle)
    std::vector<int> ids;
    at::Tensor out;
    int64_t total = 0;
    common::PendingCollective collective;
  };
  struct InflightReduction {  // one bucket's reduce-scatter on the "reduction stream"
    std::vector<int> ids;
    at::Tensor out;
    common::PendingCollective collective;
  };
  struct SubGroup {
    int64_t offset = 0, numel = 0;
    at::Tensor master;  // fp32 [numel]
    std::unique_ptr<common::FlatAdamW> optimizer;
  };
  struct BucketEntry {
    int id;
    at::Tensor grad;  // [numel], comm dtype
  };

  at::Tensor weight_view(int id) {
    const auto& l = layout_[size_t(id)];
    auto& p = params_[size_t(id)];
    TORCH_CHECK(!p.inflight, "zero3: parameter ", id, " used before its all-gather was waited for");
    at::Tensor flat = at::GradMode::is_enabled() ? ParamGather::apply(p.anchor, this, int64_t(id)) : gathered_alias(id);
    return flat.narrow(0, 0, l.numel).view(l.shape);
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

  // fetch_sub_module: gather this module's parameter if needed, then (with a complete trace)
  // prefetch the upcoming ones in trace order, up to stage3_prefetch_bucket_size elements and
  // within stage3_max_live_parameters, as one coalesced all-gather.
  void fetch(int id) {
    if (!trace_complete_) trace_.push_back(id);
    const size_t step = fetch_step_++;
    if (params_[size_t(id)].inflight) {
      complete_gather_of(id);
    } else if (!params_[size_t(id)].available) {
      all_gather_coalesced({id}, "module", /*async=*/false);
    }
    if (trace_complete_) prefetch(step + 1);
  }

  // Prefetch the upcoming parameters in trace order from position `from`, up to
  // stage3_prefetch_bucket_size elements within stage3_max_live_parameters, as one coalesced
  // all-gather.
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
    if (!to_prefetch.empty()) all_gather_coalesced(to_prefetch, "prefetch", /*async=*/true);
  }

  // One _all_gather_base over the concatenated partitions; rank r's slice of the output holds
  // every parameter's r-th partition, copied out into each parameter's padded buffer.
  // A prefetch (`async`) stays in flight, its parameters INFLIGHT, until a fetch or release
  // needs one of them; the full buffers are allocated at issue, as DeepSpeed does.
  void all_gather_coalesced(const std::vector<int>& ids, const std::string& label, bool async) {
    at::NoGradGuard no_grad;
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
    std::vector<at::Tensor> parts;
    InflightGather g;
    g.ids = ids;
    for (int id : ids) {
      auto& p = params_[size_t(id)];
      const auto& l = layout_[size_t(id)];
      parts.push_back(p.partition);
      g.total += l.part_numel;
      if (!p.available) common::allocate_storage(p.full, l.padded * int64_t(c10::elementSize(dtypes_.model)));
      p.available = true;
      p.inflight = true;
    }
    auto in = at::cat(parts);                           // [sum P_i]
    g.out = at::empty({W * g.total}, in.options());     // [W * sum P_i]
    g.collective = comm_.all_gather_async(g.out, in, label);
    inflight_gathers_.push_back(std::move(g));
    if (!async) complete_gather_of(ids.front());
  }

  // Waits for the all-gather that carries `id` and copies each of its parameters out of the
  // coalesced buffer into its padded full buffer.
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
      p.full.view({W, l.part_numel}).copy_(it->out.view({W, it->total}).narrow(1, off, l.part_numel));
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

  void release(int id) {
    auto& p = params_[size_t(id)];
    if (!p.available) return;
    if (p.inflight) complete_gather_of(id);  // never free storage a collective may still write
    common::free_storage(p.full);
    p.available = false;
  }

  // __reduce_and_partition_ipg_grads + reduce_scatter_coalesced: each gradient padded to a
  // multiple of W and divided by W; rank r's input chunk concatenates every gradient's r-th
  // partition; one reduce-scatter; each partition accumulated in grad_accum_dtype.
  void flush_bucket() {
    if (bucket_.empty()) return;
    at::NoGradGuard no_grad;
    const int W = comm_.size();
    int64_t total = 0;
    for (const auto& e : bucket_) total += layout_[size_t(e.id)].part_numel;
    auto in = at::zeros({W, total}, bucket_.front().grad.options());  // [W, sum P_i]
    int64_t off = 0;
    for (const auto& e : bucket_) {
      const auto& l = layout_[size_t(e.id)];
      // The gradient of the gathered buffer is already [padded], zero past numel.
      in.narrow(1, off, l.part_numel).copy_(e.grad.reshape({W, l.part_numel}));
      off += l.part_numel;
    }
    in.div_(W);
    auto flat_in = in.view({-1});
    InflightReduction r;
    for (const auto& e : bucket_) r.ids.push_back(e.id);
    r.out = at::empty({total}, in.options());
    r.collective = comm_.reduce_scatter_sum_async(r.out, flat_in, "bucket");
    bucket_.clear();
    bucket_numel_ = 0;
    // overlap_comm: the previous bucket is finished now, this one at the next flush or the end
    // of backward, so each reduce-scatter overlaps the backward compute that follows it.
    finish_reductions();
    inflight_reductions_.push_back(std::move(r));
    if (!opts_.overlap_comm) finish_reductions();
  }

  // Waits for the buckets in flight and accumulates each partition in grad_accum_dtype.
  void finish_reductions() {
    at::NoGradGuard no_grad;
    for (auto& r : inflight_reductions_) {
      r.collective.wait();
      int64_t off = 0;
      for (int id : r.ids) {
        const auto& l = layout_[size_t(id)];
        params_[size_t(id)].grad_partition.add_(r.out.narrow(0, off, l.part_numel).to(dtypes_.grad_accum));
        off += l.part_numel;
      }
    }
    inflight_reductions_.clear();
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
  models::RopeCache rope_;
  std::vector<int> trace_;  // parameter ids in fetch order over one micro-batch
  bool trace_complete_ = false;
  size_t fetch_step_ = 0, prefetch_pos_ = 0;
  std::vector<int> held_;  // weights fetched in forward, awaiting their module's post-forward
  std::vector<BucketEntry> bucket_;
  int64_t bucket_numel_ = 0;
  std::vector<InflightGather> inflight_gathers_;
  uint64_t forward_range_ = 0, backward_range_ = 0;  // NVTX start/end ranges
  std::vector<InflightReduction> inflight_reductions_;
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

ModelStateBytes expected_bytes(const EngineSpec& spec, int world, int /*rank*/) {
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
  return b;
}

}  // namespace

BackendInfo backend_info() {
  BackendInfo info;
  info.name = "zero3";
  info.description = "ZeRO3-mode: per-parameter partitions, fp32 master, DeepSpeed stage-3 semantics";
  info.precisions = {"fp32", "bf16"};
  info.create = [](const EngineSpec& s, const runtime::World& w) { return std::make_unique<Zero3Engine>(s, w); };
  info.expected_bytes = expected_bytes;
  return info;
}

}  // namespace zb::backends::zero3
