// fsdp_engine.cpp — see fsdp_engine.hpp for the semantics and the upstream files followed.
// Every stream wait below names the FSDP1 line it mirrors (torch/distributed/fsdp/
// _runtime_utils.py unless said otherwise); docs/backends/fsdp.md has the table.
#include "backends/backend_info.hpp"
#include "backends/fsdp/fsdp_engine.hpp"
#include "backends/fsdp/fsdp_config.hpp"
#include "backends/fsdp/fsdp_crossval.hpp"
#include "backends/fsdp/fsdp_padding.hpp"
#include "backends/fsdp/fsdp_program.hpp"
#include "backends/fsdp/fsdp_wrap.hpp"

#include <torch/csrc/autograd/engine.h>

#include <deque>

#include "backends/common/autograd_bridge.hpp"
#include "backends/common/drain.hpp"
#include "backends/common/forward_backward.hpp"
#include "backends/fsdp_family/planted_allocation.hpp"
#include "backends/common/full_parameters.hpp"
#include "backends/common/initial_weights.hpp"
#include "backends/common/optim.hpp"
#include "backends/fsdp_family/process_groups.hpp"
#include "backends/fsdp_family/sharded_grad_scaler.hpp"
#include "backends/common/storage.hpp"
#include "backends/fsdp/fsdp_layout.hpp"
#include "backends/fsdp/fsdp_offload.hpp"
#include "backends/fsdp/fsdp_offload_estimate.hpp"
#include "models/llama.hpp"
#include "runtime/errors.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::fsdp {

namespace {

using common::StreamId;
using common::Streams;

struct Layout {  // one unit's FlatParameter geometry on this rank
  int64_t numel = 0, padded = 0, shard_numel = 0, offset = 0;
};

// Each unit's flat parameter as the run's ShardLayout pads it, and where its shard sits in this
// rank's contiguous storage.
std::vector<Layout> layouts(const ShardLayout& sl) {
  std::vector<Layout> out;
  int64_t offset = 0;
  for (size_t u = 0; u < sl.unit_padded.size(); ++u) {
    Layout l;
    l.numel = sl.unit_numel[u];
    l.padded = sl.unit_padded[u];
    l.shard_numel = l.padded / sl.shard_size;
    l.offset = offset;
    offset += l.shard_numel;
    out.push_back(l);
  }
  return out;
}

// The engine hands each unit's flat parameter out through common::gather_edge: forward returns an
// alias of the gathered buffer's first `numel` elements (the unpadded FlatParameter), backward
// receives the summed gradient of the whole flat parameter [numel] (every view's gradient
// accumulated) — FSDP's post-backward hook point.
class FsdpEngine final : public Engine, public models::UnitParamSource, public common::GatherOwner {
 public:
  FsdpEngine(const EngineSpec& spec, const runtime::World& world)
      : spec_(spec), opts_(fsdp_options(spec.options)), comm_(world), dtypes_(dtypes_for(spec.precision, opts_)) {
    at::NoGradGuard no_grad;
    const auto& cfg = spec_.model;
    const auto dev = world.device;
    local_device_ = dev;
    strategy_ = effective_strategy(opts_, world.size, world.local_size);
    // The run's layout (fsdp_layout.cpp): HYBRID_SHARD's shard and replicate groups
    // (_init_intra_and_inter_node_groups), the world otherwise; each unit's padding.
    const auto sl = shard_layout(spec_, Topology(world.size, world.local_size));
    shard_size_ = sl.shard_size;
    auto groups = fsdp_family::shard_groups(world, sl, "fsdp");
    shard_group_ = std::move(groups.shard);
    replicate_group_ = std::move(groups.replicate);
    shard_rank_ = is_sharded(strategy_) ? shard_group_.rank : 0;
    layout_ = layouts(sl);
    // Which modules are units (fsdp_wrap.hpp): a flat parameter per block, or one for the model.
    wrapping_ = wrapping(opts_, cfg);
    const auto unit_specs = models::unit_param_specs(cfg);
    views_.resize(unit_specs.size());
    for (size_t u = 0; u < unit_specs.size(); ++u) views_[u].resize(unit_specs[u].size());
    if (wrapping_ == Wrapping::kWholeModel) {  // each parameter's place in the one flat parameter
      int64_t offset = 0;
      const auto members = flat_units(cfg, wrapping_);  // one flat parameter
      for (const auto& m : members.front()) {
        int64_t unit_offset = 0;
        for (int i = 0; i < m.first; ++i) unit_offset += unit_specs[size_t(m.unit)][size_t(i)].numel();
        for (int i = m.first; i < m.first + m.count; ++i) {
          const auto& spec = unit_specs[size_t(m.unit)][size_t(i)];
          whole_parts_.push_back({m.unit, i, offset, unit_offset, spec.numel(), spec.shape});
          offset += spec.numel();
          unit_offset += spec.numel();
        }
      }
    }
    init_streams();
    const int64_t local_numel = layout_.back().offset + layout_.back().shard_numel;
    if (opts_.offload_params) {  // CPUOffload: the flat shards live on the host (fsdp_offload.hpp)
      offload_ = std::make_unique<FlatParamOffload>(local_numel, dtypes_.storage, dev);
      local_params_ = offload_->host_params();
    } else {
      local_params_ = at::zeros({local_numel}, at::TensorOptions().dtype(dtypes_.storage).device(dev));
    }
    std::vector<at::Tensor> shards;
    const auto specs = flat_unit_specs(cfg, wrapping_);
    for (int u = 0; u < int(layout_.size()); ++u) {
      const auto& l = layout_[size_t(u)];
      // Under a sharded load only this rank's chunk is read (zero past numel); otherwise the
      // whole padded unit (a --model-dir load strategy then replaces sync_module_states).
      const bool sharded_load = common::sharded_load(spec_);
      const int64_t chunk_lo = int64_t(shard_rank_) * l.shard_numel;
      auto full = wrapping_ == Wrapping::kWholeModel
                      ? whole_model_initial(l.padded)  // every model unit's weights, in flattening order
                      : common::padded_chunk(spec_, u, 0, l.numel, sharded_load ? chunk_lo : 0,
                                             sharded_load ? l.shard_numel : l.padded,
                                             sharded_load ? at::Tensor() : common::initial_unit(spec_, u));
      // The blog's setting loads the model in bf16 for every mode: mixed upcasts the loaded
      // bf16 weights to fp32 at prepare (accelerate >= 0.30), so its master starts bf16-exact.
      if (spec_.precision == "mixed") full = full.to(at::kBFloat16).to(at::kFloat);
      full = full.to(dev);
      if (opts_.sync_module_states && !spec_.initial_weights) comm_.broadcast(full, 0, "unit" + std::to_string(u));
      Unit unit;
      unit.shard = local_params_.narrow(0, l.offset, l.shard_numel);
      // _get_shard: this rank's chunk of the padded flat parameter.
      unit.shard.copy_(sharded_load && wrapping_ == Wrapping::kPerBlock ? full : full.narrow(0, chunk_lo, l.shard_numel));
      if (!is_sharded(strategy_) && dtypes_.param == dtypes_.storage && !offload_) {
        unit.full = unit.shard;  // NO_SHARD in one dtype: the flat parameter is its own storage
        unit.owns_full = false;
        unit.unsharded = true;
      } else {
        // _full_param_padded (or NO_SHARD's _mp_shard, or with offload its device copy) starts freed
        unit.full = at::empty({l.padded}, at::TensorOptions().dtype(dtypes_.param).device(dev));
        common::free_storage(unit.full);
      }
      unit.anchor = at::zeros({}, at::TensorOptions().dtype(at::kFloat)).requires_grad_(true);
      // use_orig_params=True (accelerate's default): the optimizer and clip_grad_norm_ see each
      // original parameter's part of this rank's shard (FlatParamHandle._use_sharded_grad_views).
      int64_t begin = 0;
      const int64_t lo = int64_t(shard_rank_) * l.shard_numel, hi = lo + l.shard_numel;
      for (const auto& p : specs[size_t(u)]) {
        const int64_t s = std::max(begin, lo), e = std::min(begin + p.numel(), hi);
        if (e > s) unit.orig_param_spans.push_back({s - lo, e - s});
        begin += p.numel();
      }
      shards.push_back(unit.shard);
      units_.push_back(std::move(unit));
    }
    optimizer_ = std::make_unique<common::AdamW>(shards, common::adamw_options(spec_.train));
    if (spec_.precision == "fp16") scaler_ = std::make_unique<fsdp_family::ShardedGradScaler>();
    optimizer_->set_measure_lost_updates(spec_.train.measure_lost_updates);
    rope_ = models::make_rope_cache(cfg, spec_.train.seq_len, dtypes_.param, dev);
    comm_.reset_stats();
  }

  // Work still queued on a side stream (CPU) touches this engine's members: run it first.
  ~FsdpEngine() override { common::drain_before_destroy(streams()); }

  std::string name() const override { return "fsdp"; }
  common::Comm& comm() override { return comm_; }
  // Checkpoints: this rank's shard of every flat parameter (padding included) and the optimizer
  // over it — what SHARDED_STATE_DICT saves per rank (docs/lifecycle.md).
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override {
    auto s = optimizer_->state("optim.");
    s.insert(s.begin(), {"flat_param_shards", local_params_});
    return s;
  }
  void state_loaded() override { optimizer_->state_loaded(); }
  common::LostUpdates lost_updates() const override { return optimizer_->last_lost_updates(); }
  void set_observer(FsdpObserver o) { observer_ = std::move(o); }
  void plant_skip_grad_copy() {
    if (offload_) offload_->plant_skip_grad_copy();
  }

  // ---- forward (models::UnitParamSource) ----
  std::vector<at::Tensor> unit_weights(int u) override {
    // NO_WRAP: a block is no FSDP module; its weights are views of the root's gathered flat parameter.
    if (wrapping_ == Wrapping::kWholeModel && u != models::kRootUnit) return views_.at(size_t(u));
    if (u == models::kRootUnit) root_pre_forward();
    auto& unit = units_[size_t(u)];
    unit.forward_range = runtime::nvtx::start("forward unit" + std::to_string(u));
    // _pre_forward_unshard: unshard unless prefetched, then the current stream waits for the
    // unshard stream (`current_stream.wait_stream(state._unshard_stream)`).
    if (!unit.prefetched) unshard(u);
    streams().wait_stream(streams().compute(), unshard_stream_);
    // _prefetch_handle(FORWARD) after the wait: the next unit's all-gather is issued now and runs
    // (on the unshard stream, which does not wait for this unit's compute) while it computes.
    if (opts_.forward_prefetch && u + 1 < int(units_.size()) && !units_[size_t(u + 1)].prefetched) {
      unshard(u + 1);
      units_[size_t(u + 1)].prefetched = true;
    }
    unit.prefetched = false;
    unit.needs_pre_backward_unshard = false;
    at::Tensor flat = at::GradMode::is_enabled() ? common::gather_edge(unit.anchor, this, u) : gathered_alias(u);
    if (wrapping_ == Wrapping::kWholeModel) return whole_model_views(flat);
    return models::unflatten_unit(spec_.model, u, flat);
  }

  at::Tensor after_unit_forward(int u, at::Tensor output) override {
    if (wrapping_ == Wrapping::kWholeModel) {
      if (u != models::kRootUnit) {  // a block inside the root unit: no FSDP hooks of its own
        streams().op("forward unit" + std::to_string(u), {units_[0].full});
        return output;
      }
      for (auto& v : views_)  // the forward is done: the graph holds what backward needs
        for (auto& t : v) t = at::Tensor();
    }
    auto& unit = units_[size_t(u)];
    streams().op("forward unit" + std::to_string(u), {unit.full});  // the unit's compute (compute stream)
    // _post_forward_reshard: the root is never freed after forward (its parameters are needed
    // first in backward); other units are freed under FULL_SHARD/HYBRID_SHARD. NO_SHARD with a
    // low-precision copy frees that copy for every unit (FlatParamHandle.post_reshard).
    const bool free_full = u != models::kRootUnit && reshard_after_forward(strategy_);
    if (free_full || (!is_sharded(strategy_) && unit.owns_full)) reshard(u, /*free_event=*/free_full);
    notify("post_forward", u);
    runtime::nvtx::end(unit.forward_range);
    if (output.requires_grad()) {
      // _register_pre_backward_hooks: every unit whose output needs a gradient is marked.
      unit.needs_pre_backward_unshard = true;
      output.register_hook([this, u](const at::Tensor&) { pre_backward(u); });
    }
    return output;
  }

  // ---- backward hooks ----
  void pre_backward(int u) {  // _pre_backward_hook
    auto& unit = units_[size_t(u)];
    if (unit.ran_pre_backward) return;
    if (u == models::kRootUnit && !final_callback_queued_) {
      final_callback_queued_ = true;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { post_backward_final(); });
    }
    unit.backward_range = runtime::nvtx::start("backward unit" + std::to_string(u));
    if (unit.needs_pre_backward_unshard) {
      if (!unit.prefetched) unshard(u);
      streams().wait_stream(streams().compute(), unshard_stream_);  // current_stream().wait_stream(_unshard_stream)
    }
    unit.needs_pre_backward_unshard = false;
    unit.prefetched = false;
    notify("pre_backward", u);
    if (opts_.backward_prefetch == BackwardPrefetch::kBackwardPre) prefetch_backward(u);
    unit.ran_pre_backward = true;
  }

  void post_backward(int u, const at::Tensor& autograd_grad) override {  // _post_backward_hook
    at::NoGradGuard no_grad;
    auto& unit = units_[size_t(u)];
    const auto& l = layout_[size_t(u)];
    streams().op("backward unit" + std::to_string(u), {unit.full, autograd_grad});  // its gradient computation
    // _post_backward_reshard: _should_free_in_backward = sharded and (sync_gradients or a
    // reshard-after-forward strategy) — under no_sync SHARD_GRAD_OP keeps the unsharded
    // parameters; NO_SHARD frees its low-precision copy (post_reshard).
    if (is_sharded(strategy_) ? (sync_ || reshard_after_forward(strategy_)) : unit.owns_full)
      reshard(u, /*free_event=*/is_sharded(strategy_));
    notify("post_backward", u);
    if (opts_.backward_prefetch == BackwardPrefetch::kBackwardPost) prefetch_backward(u);
    // Autograd accumulates into flat_param.grad across micro-batches (no_sync keeps it unsharded,
    // in the compute dtype; NO_SHARD keeps its reduced gradient there too).
    if (!unit.unsharded_grad.defined()) {
      unit.unsharded_grad = autograd_grad;
    } else {
      unit.unsharded_grad.add_(autograd_grad);
    }
    if (!sync_) {  // `if not state._sync_gradients: return`
      runtime::nvtx::end(unit.backward_range);
      return;
    }
    // "Wait for all ops in the current stream (e.g. gradient computation) to finish before
    // reduce-scattering the gradient": state._post_backward_stream.wait_stream(current_stream()).
    auto& s = streams();
    s.wait_stream(post_backward_stream_, s.compute());
    {
      Streams::Guard on_post_backward(s, post_backward_stream_);  // with stream(_post_backward_stream)
      const std::string label = "unit" + std::to_string(u);
      const double pre = predivide_factor(comm_.size());
      at::Tensor grad = std::exchange(unit.unsharded_grad, at::Tensor());  // flat_param.grad = None
      // The unsharded gradient was produced on the compute stream and is consumed here
      // (_no_dispatch_record_stream(autograd_computed_grad, state._post_backward_stream)).
      s.record_stream(grad, post_backward_stream_, "grad " + label);
      if (grad.scalar_type() != dtypes_.reduce) grad = grad.to(dtypes_.reduce);  // flat_param.grad.to(_reduce_dtype)
      if (is_sharded(strategy_)) {
        s.op("grad pad+predivide " + label);
        // _get_reduce_scatter_tensors: F.pad to a multiple of the shard group, output chunk-sized.
        at::Tensor padded = l.padded > l.numel ? at::constant_pad_nd(grad, {0, l.padded - l.numel}) : grad;
        grad = at::Tensor();
        if (pre > 1) padded.div_(pre);
        auto sharded = at::empty({l.shard_numel}, padded.options());
        auto rs = comm_.reduce_scatter_sum_async(sharded, padded, label, &shard_group_);
        padded = at::Tensor();
        if (is_hybrid(strategy_)) {
          // The all-reduce stream waits for the post-backward stream, then all-reduces across
          // replicas, post-divides and accumulates there.
          s.enqueue(post_backward_stream_, make_waits(std::move(rs)), "reduce_scatter done " + label, [] {});
          s.wait_stream(all_reduce_stream_, post_backward_stream_);
          Streams::Guard on_all_reduce(s, all_reduce_stream_);
          s.record_stream(sharded, all_reduce_stream_, "sharded grad " + label);
          comm_.all_reduce_sum(sharded, label, &replicate_group_);
          s.op(std::string("grad post-divide+accumulate") + (offload_ ? "+offload d2h " : " ") + label);
          finish_sharded_grad(u, sharded);
        } else {
          // dist.reduce_scatter_tensor waits on the post-backward stream; the post-divide and
          // the accumulation (_accumulate_sharded_grad) queue behind it there.
          s.enqueue(post_backward_stream_, make_waits(std::move(rs)),
                    std::string("grad post-divide+accumulate") + (offload_ ? "+offload d2h " : " ") + label,
                    [this, u, sharded] { finish_sharded_grad(u, sharded); });
        }
      } else {
        // _reduce_grad_no_shard: pre-divide, all-reduce, post-divide, cast to the flat dtype.
        s.op("grad predivide+all_reduce+post-divide " + label);
        if (pre > 1) grad.div_(pre);
        comm_.all_reduce_sum(grad, label);
        const double post = double(comm_.size()) / pre;
        if (post > 1) grad.div_(post);
        unit.grad_shard = grad.scalar_type() == dtypes_.storage ? grad : grad.to(dtypes_.storage);
        // Autograd keeps accumulating into flat_param.grad (NO_SHARD's reduced gradient).
        unit.unsharded_grad = unit.grad_shard;
        if (offload_) {  // _offload_grad: NO_SHARD copies with non_blocking=False (the host waits)
          s.op("offload d2h " + label, {unit.grad_shard});
          offload_->grad_to_host(l.offset, unit.grad_shard);
          s.synchronize_stream(post_backward_stream_);
        }
      }
    }
    runtime::nvtx::end(unit.backward_range);
  }

  // On the post-backward (or all-reduce) stream once the reduce-scatter is done: the
  // post-divide and _accumulate_sharded_grad (cast to the flat-param dtype, then
  // `_saved_grad_shard += ` or `= `).
  void finish_sharded_grad(int u, at::Tensor sharded) {
    at::NoGradGuard no_grad;
    const double post = double(comm_.size()) / predivide_factor(comm_.size());
    if (post > 1) sharded.div_(post);
    if (sharded.scalar_type() != dtypes_.storage) sharded = sharded.to(dtypes_.storage);  // _cast_grad_to_param_dtype
    auto& unit = units_[size_t(u)];
    if (unit.grad_shard.defined()) {
      unit.grad_shard.add_(sharded);
    } else {
      unit.grad_shard = sharded;
    }
    // _post_reduce_grad_callback -> _offload_grad: `_cpu_grad.copy_(_saved_grad_shard,
    // non_blocking=True)` on this stream, synchronised in the final callback.
    if (offload_) offload_->grad_to_host(layout_[size_t(u)].offset, unit.grad_shard);
  }

  void post_backward_final() {  // _post_backward_final_callback
    auto& s = streams();
    if (sync_) {
      // "current_stream.wait_stream(root_state._post_backward_stream)" (+ the all-reduce stream
      // under HSDP).
      s.wait_stream(s.compute(), post_backward_stream_);
      if (all_reduce_stream_ != s.compute()) s.wait_stream(s.compute(), all_reduce_stream_);
      if (offload_) {
        // "Wait for non-blocking GPU -> CPU sharded gradient copies ... to finish explicitly":
        // current_stream().synchronize(). Then _finalize_params -> prepare_gradient_for_optim:
        // flat_param.grad = _cpu_grad and `_saved_grad_shard` deleted — no gradient stays on the device.
        s.synchronize_stream(s.compute());
        for (auto& unit : units_) {
          unit.grad_shard = at::Tensor();
          unit.unsharded_grad = at::Tensor();
        }
      }
    }
    // _catch_all_reshard, then reset the per-iteration state.
    for (int u = 0; u < int(units_.size()); ++u) {
      auto& unit = units_[size_t(u)];
      const bool free = is_sharded(strategy_) ? (sync_ || reshard_after_forward(strategy_)) : unit.owns_full;
      if (free) reshard(u, is_sharded(strategy_));
      unit.ran_pre_backward = false;
      unit.needs_pre_backward_unshard = false;
      unit.prefetched = false;
    }
    final_callback_queued_ = false;
  }

  // ---- Engine ----
  at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) override {
    // accelerate's accumulate(): non-final micro-batches run under model.no_sync() unless
    // GradientAccumulationPlugin(sync_each_batch=True).
    sync_ = last_micro_batch || spec_.train.sync_each_batch;
    planted_.hold();  // test-only: ZEROBENCH_TEST_PLANT_STEP_ALLOC (the memory gate's planted regression)
    return common::forward_backward(spec_.model, *this, batch, rope_,
                                    spec_.train.activation_checkpointing.or_full_if(opts_.activation_checkpointing),
                                    loss_scale, scaler_ ? scaler_->scale() : 1.0);  // fp16: scaler.scale(loss / gas)
  }

  LossScaleStep loss_scale_step() const override { return scaler_ ? scaler_->last_step() : LossScaleStep{}; }

  double optimizer_step(const StepHyper& h) override {
    at::NoGradGuard no_grad;
    // accelerate -> FullyShardedDataParallel.clip_grad_norm_ over the original parameters'
    // gradient views; each element lives on one rank of the shard group (replicated across
    // HYBRID_SHARD's replicas, everywhere under NO_SHARD).
    std::vector<at::Tensor> grads, orig_grads;
    for (size_t u = 0; u < units_.size(); ++u) {
      const auto& unit = units_[u];
      // With offload the optimizer sees flat_param.grad = _cpu_grad (prepare_gradient_for_optim).
      TORCH_CHECK(offload_ || unit.grad_shard.defined(), "fsdp: optimizer step without a gradient");
      const auto g = offload_ ? offload_->host_grad(layout_[u].offset, layout_[u].shard_numel) : unit.grad_shard;
      grads.push_back(g);
      for (const auto& [off, n] : unit.orig_param_spans) orig_grads.push_back(g.narrow(0, off, n));
    }
    const bool replicated = !is_sharded(strategy_);
    // fp16 (accelerate): clip_grad_norm_ unscales first (ShardedGradScaler.unscale_, found_inf all-reduced).
    const bool found_inf = scaler_ && scaler_->unscale_(orig_grads, comm_);
    const auto norm =
        offload_ ? offload_->clip_grad_norm_(orig_grads, spec_.train.grad_clip, comm_, replicated, &shard_group_)
                 : common::fsdp1_clip_grad_norm_(orig_grads, spec_.train.grad_clip, comm_, replicated, &shard_group_);
    if (!found_inf) optimizer_->step(grads, h);  // scaler.step: skipped on found_inf
    if (scaler_) scaler_->update();
    // optimizer.zero_grad(set_to_none=True): the sharded gradients are freed until the next
    // step's first reduce-scatter.
    for (auto& unit : units_) {
      unit.grad_shard = at::Tensor();
      unit.unsharded_grad = at::Tensor();
    }
    planted_.release();
    return norm.item<double>();
  }

  ModelStateBytes model_state_bytes() const override {
    ModelStateBytes b;
    b.params = offload_ ? 0 : int64_t(local_params_.nbytes());
    for (const auto& u : units_) {
      if (u.owns_full) b.params += common::storage_bytes(u.full);  // unsharded buffers still held
      if (u.grad_shard.defined()) b.grads += int64_t(u.grad_shard.nbytes());
      if (u.unsharded_grad.defined() && !u.unsharded_grad.is_same(u.grad_shard))
        b.grads += int64_t(u.unsharded_grad.nbytes());  // no_sync's unsharded gradient
    }
    b.optimizer = offload_ ? 0 : optimizer_->state_bytes();
    if (offload_) b.host = offload_->host_bytes(optimizer_->state_bytes());  // shards, _cpu_grad, AdamW
    return b;
  }

  common::OffloadTraffic offload_traffic() const override {
    return offload_ ? offload_->traffic() : common::OffloadTraffic{};
  }

  nlohmann::json resolved_options() const override {
    FsdpResolved r;
    r.options = opts_;
    r.options.sharding_strategy = strategy_;
    if (strategy_ != opts_.sharding_strategy) r.sharding_strategy_requested = opts_.sharding_strategy;
    r.param_dtype = dtypes_.param;
    r.reduce_dtype = dtypes_.reduce;
    r.flat_param_dtype = dtypes_.storage;
    r.shard_group_size = shard_size_;
    r.gradient_predivide_factor = predivide_factor(comm_.size());
    r.gradient_postdivide_factor = double(comm_.size()) / predivide_factor(comm_.size());
    r.sync_each_batch = spec_.train.sync_each_batch;
    r.optimizer = config::adamw_description(spec_.train.adamw_impl, comm_.world().device.is_cuda() && !offload_) +
                  (offload_ ? " on the host shards" : "");
    return to_json(r);
  }

  std::vector<at::Tensor> full_parameters() override {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> out;
    for (int u = 0; u < int(units_.size()); ++u) {
      const auto& l = layout_[size_t(u)];
      // With offload the host shard is copied to the device first (not counted: outside a step).
      const auto shard = offload_ ? units_[size_t(u)].shard.to(local_device_) : units_[size_t(u)].shard;
      out.push_back(is_sharded(strategy_) ? common::gathered_full(comm_, shard, l.padded, l.numel, &shard_group_)
                                          : common::unpadded_fp32(shard, l.numel));
    }
    if (wrapping_ == Wrapping::kWholeModel) return per_model_unit(out.front());
    return out;
  }

  // The unpadded flat parameter: a view of the gathered buffer's first numel elements.
  at::Tensor gathered_alias(int u) override {
    return common::storage_alias(units_[size_t(u)].full, layout_[size_t(u)].numel);
  }

  // ---- NO_WRAP: one flat parameter in the root module's named_parameters() order ----
  // The whole padded flat parameter's initial fp32 values: each model unit's weights made once,
  // its parameters copied to their places.
  at::Tensor whole_model_initial(int64_t padded) const {
    auto out = at::zeros({padded}, at::kFloat);
    std::vector<at::Tensor> initial(views_.size());
    for (const auto& p : whole_parts_) {
      auto& unit = initial[size_t(p.unit)];
      if (!unit.defined()) unit = common::initial_unit(spec_, p.unit);
      out.narrow(0, p.offset, p.numel).copy_(unit.narrow(0, p.unit_offset, p.numel));
    }
    return out;
  }
  // One split of the gathered flat parameter into every original parameter (FSDP's unflattened
  // views), handed out per model unit; returns the root's.
  std::vector<at::Tensor> whole_model_views(const at::Tensor& flat) {
    std::vector<int64_t> numels;
    for (const auto& p : whole_parts_) numels.push_back(p.numel);
    const auto parts = at::split_with_sizes(flat.narrow(0, 0, layout_.front().numel), numels, 0);
    for (size_t k = 0; k < parts.size(); ++k) {
      const auto& p = whole_parts_[k];
      views_[size_t(p.unit)][size_t(p.index)] = parts[k].view(p.shape);
    }
    return views_[models::kRootUnit];
  }
  // The whole fp32 flat parameter [numel] as each model unit's flat weights (spec order).
  std::vector<at::Tensor> per_model_unit(const at::Tensor& whole) const {
    std::vector<std::vector<at::Tensor>> pieces(views_.size());
    for (const auto& p : whole_parts_) pieces[size_t(p.unit)].push_back(whole.narrow(0, p.offset, p.numel));
    std::vector<at::Tensor> out;
    for (auto& p : pieces) out.push_back(at::cat(p));
    return out;
  }

 private:
  struct Unit {
    at::Tensor shard;              // view into local_params_ [shard_numel]
    at::Tensor full;               // _full_param_padded [padded], param dtype; storage freed when resharded
    at::Tensor grad_shard;         // _saved_grad_shard / flat_param.grad [shard_numel], flat dtype; none between steps
    at::Tensor unsharded_grad;     // flat_param.grad before reduction [numel], compute dtype
    std::vector<std::pair<int64_t, int64_t>> orig_param_spans;  // (offset, numel) in the shard
    bool owns_full = true;
    bool unsharded = false;
    bool prefetched = false;       // handle._prefetched
    bool needs_pre_backward_unshard = false;
    bool ran_pre_backward = false;
    bool gather_in_flight = false;  // its all-gather is queued on the unshard stream (CPU: not waited yet)
    at::Tensor anchor;             // a leaf that makes UnitGather part of the graph
    uint64_t forward_range = 0, backward_range = 0;  // NVTX start/end ranges of this unit
  };

  Streams& streams() { return comm_.streams(); }

  static std::vector<common::PendingCollective> make_waits(common::PendingCollective p) {
    std::vector<common::PendingCollective> v;
    v.push_back(std::move(p));
    return v;
  }

  // _init_streams (from _lazy_init): the compute stream is the current one; unshard,
  // post-backward and pre-unshard streams are new; the all-reduce stream is a new one only
  // under HSDP. High priority when limit_all_gathers and HSDP.
  void init_streams() {
    auto& s = streams();
    const bool hybrid = is_hybrid(strategy_);
    const bool high = opts_.limit_all_gathers && hybrid;
    unshard_stream_ = s.create("unshard", high);
    post_backward_stream_ = s.create("post_backward", high);
    pre_unshard_stream_ = s.create("pre_unshard", high);
    all_reduce_stream_ = hybrid ? s.create("all_reduce") : s.compute();
  }

  void root_pre_forward() {  // _root_pre_forward
    for (auto& u : units_) {
      u.ran_pre_backward = false;
      if (opts_.forward_prefetch) u.prefetched = false;
    }
    // _wait_for_computation_stream: the unshard and pre-unshard streams wait for the compute
    // stream once per iteration — the only time all-gathers wait for compute in forward.
    auto& s = streams();
    s.wait_stream(unshard_stream_, s.compute());
    s.wait_stream(pre_unshard_stream_, s.compute());
  }

  // _unshard: pre-unshard (the low-precision cast of the shard, on the pre-unshard stream),
  // the rate limiter, then on the unshard stream the allocation of _full_param_padded and the
  // all-gather, which that stream waits for. The compute stream waits for the unshard stream
  // in the unit's pre-forward / pre-backward.
  void unshard(int u) {
    auto& unit = units_[size_t(u)];
    // With offload pre_unshard never skips (it copies the host shard even to an unsharded unit).
    if (unit.unsharded && !offload_) return;
    at::NoGradGuard no_grad;
    auto& s = streams();
    const auto& l = layout_[size_t(u)];
    const std::string label = "unit" + std::to_string(u);
    const int64_t full_bytes = l.padded * int64_t(c10::elementSize(dtypes_.param));
    at::Tensor src = unit.shard;
    const bool ran_pre_unshard = dtypes_.param != dtypes_.storage || offload_;
    if (ran_pre_unshard) {
      // pre_unshard on the pre-unshard stream; `unshard_stream.wait_stream(pre_unshard_stream)`.
      Streams::Guard on_pre_unshard(s, pre_unshard_stream_);
      if (offload_ && !is_sharded(strategy_) && dtypes_.param == dtypes_.storage && !unit.unsharded) {
        // NO_SHARD offload, one dtype: flat_param_to(device) is itself the flat parameter.
        common::allocate_storage(unit.full, full_bytes);
        s.op("offload h2d " + label, {unit.shard, unit.full});
        offload_->shard_into(unit.full, unit.shard);
      } else if (offload_) {
        // flat_param_to(device) / `_local_shard.to(device, non_blocking=True)`: a new device tensor.
        src = offload_->shard_to_device(unit.shard);
        s.op("offload h2d " + label, {unit.shard, src});
      }
      if (dtypes_.param != dtypes_.storage) {
        // _use_low_precision_shard: _mp_shard allocated and cast (from the device copy with offload).
        s.op("cast shard to param dtype " + label);
        if (is_sharded(strategy_)) {
          src = src.to(dtypes_.param);
        } else if (!unit.unsharded) {  // NO_SHARD: the cast copy is itself the unsharded flat parameter
          common::allocate_storage(unit.full, full_bytes);
          unit.full.copy_(src);
        }
      }
      s.wait_stream(unshard_stream_, pre_unshard_stream_);
    }
    if (unit.unsharded) {  // offload only: nothing to gather; the device copy is dropped (post_unshard)
      if (!src.is_same(unit.shard)) s.record_stream(src, unshard_stream_, "dropped shard copy " + label);
      return;
    }
    if (is_sharded(strategy_)) {
      // _limiter_utils.py via _unshard: with limit_all_gathers the host waits for the oldest of
      // two outstanding reshard events before issuing another all-gather.
      if (opts_.limit_all_gathers && free_events_.size() >= kMaxInflightAllGathers) {
        s.synchronize(free_events_.front());
        free_events_.pop_front();
      }
      Streams::Guard on_unshard(s, unshard_stream_);  // with stream(unshard_stream): handle.unshard()
      common::allocate_storage(unit.full, full_bytes);
      auto gather = comm_.all_gather_async(unit.full, src, label, &shard_group_);
      // post_unshard frees _mp_shard after recording it on the unshard stream; the held
      // reference in the collective keeps it alive until then.
      if (!src.is_same(unit.shard)) s.record_stream(src, unshard_stream_, "mp_shard " + label);
      src = at::Tensor();
      unit.gather_in_flight = true;
      s.enqueue(unshard_stream_, make_waits(std::move(gather)), "all_gather done " + label,
                [this, u] { units_[size_t(u)].gather_in_flight = false; });
    }
    unit.unsharded = true;
    notify("unshard", u);
  }

  // _reshard: free _full_param_padded (after recording it on the current stream, as
  // FlatParamHandle._free_unsharded_flat_param does) and, with limit_all_gathers, record a free
  // event on the current stream (`free_event.record(); _free_event_queue.enqueue`).
  void reshard(int u, bool free_event) {
    auto& unit = units_[size_t(u)];
    if (!unit.unsharded || !unit.owns_full) return;
    auto& s = streams();
    notify("reshard_begin", u);
    if (unit.gather_in_flight) s.drain(unshard_stream_);  // never free storage a collective may still write
    s.record_stream(unit.full, s.current(), "full_param unit" + std::to_string(u));
    common::free_storage(unit.full);
    unit.unsharded = false;
    if (opts_.limit_all_gathers && free_event) free_events_.push_back(s.record(s.current(), "free unit" + std::to_string(u)));
    notify("reshard", u);
  }

  // _get_handle_to_prefetch(BACKWARD): the unit before `u` in post-forward order (the root's
  // post-forward is last, so it prefetches the last block), if it still needs a pre-backward
  // unshard and was not prefetched.
  void prefetch_backward(int u) {
    const int target = u == models::kRootUnit ? int(units_.size()) - 1 : u - 1;
    if (target <= models::kRootUnit || target == u) return;
    auto& t = units_[size_t(target)];
    if (!t.needs_pre_backward_unshard || t.prefetched) return;
    unshard(target);  // waited for in the target's pre-backward
    t.prefetched = true;
  }

  void notify(const char* event, int u) {
    if (observer_) observer_(event, u, common::storage_bytes(units_[size_t(u)].full));
  }

  EngineSpec spec_;
  FsdpOptions opts_;
  common::Comm comm_;
  Dtypes dtypes_;
  ShardingStrategy strategy_ = ShardingStrategy::kFullShard;  // after FSDP1's world-size-1 switch
  runtime::World shard_group_, replicate_group_;
  int shard_size_ = 1, shard_rank_ = 0;
  std::vector<Layout> layout_;
  std::vector<Unit> units_;  // one per flat parameter (FSDP unit)
  Wrapping wrapping_ = Wrapping::kPerBlock;
  struct WholePart {  // NO_WRAP: parameter `index` of model unit `unit` in the one flat parameter
    int unit = 0, index = 0;
    int64_t offset = 0, unit_offset = 0, numel = 0;  // in the flat parameter; in the unit's flat weights
    std::vector<int64_t> shape;
  };
  std::vector<WholePart> whole_parts_;          // in flattening order (fsdp_wrap.hpp flat_units)
  std::vector<std::vector<at::Tensor>> views_;  // NO_WRAP: this forward's weights, per model unit
  StreamId unshard_stream_ = 0, post_backward_stream_ = 0, pre_unshard_stream_ = 0, all_reduce_stream_ = 0;
  static constexpr size_t kMaxInflightAllGathers = 2;  // _FreeEventQueue._max_num_inflight_all_gathers
  std::deque<common::StreamEvent> free_events_;        // recorded after each reshard
  at::Tensor local_params_;  // every unit's shard, contiguous (on the host with offload)
  std::unique_ptr<FlatParamOffload> offload_;  // CPUOffload(offload_params=True); null without
  at::Device local_device_ = at::kCPU;         // the compute device
  std::unique_ptr<common::AdamW> optimizer_;
  std::unique_ptr<fsdp_family::ShardedGradScaler> scaler_;  // fp16: accelerate's ShardedGradScaler (torch defaults)
  fsdp_family::PlantedStepAllocation planted_ = fsdp_family::PlantedStepAllocation::from_env();
  models::RopeCache rope_;
  bool sync_ = true;  // state._sync_gradients for the current micro-batch
  bool final_callback_queued_ = false;
  FsdpObserver observer_;
};

}  // namespace

ModelStateBytes expected_bytes(const EngineSpec& spec, const Topology& topo, int /*rank*/) {
  const auto& opts = fsdp_options(spec.options);
  const auto d = dtypes_for(spec.precision, opts);
  // Closed form: every rank holds sum_u ceil(numel_u / S) (padding included) elements of the
  // flat shard, the same of gradient, twice that of AdamW state, all in the flat-param dtype.
  // No persistent communication buffers (FSDP1 allocates its collective tensors per call).
  // S is the shard group of the run's layout: the node's ranks under HYBRID_SHARD.
  const int64_t elems = shard_layout(spec, topo).shard_numel();
  const int64_t e = int64_t(c10::elementSize(d.storage));
  if (opts.offload_params) return offloaded_bytes(elems * e);  // fsdp_offload_estimate.hpp
  return {elems * e, 0, elems * e, 2 * elems * e, 0, {}};
}

void set_observer(Engine& engine, FsdpObserver observer) {
  if (auto* f = dynamic_cast<FsdpEngine*>(&engine)) f->set_observer(std::move(observer));
}

void plant_skip_grad_copy(Engine& engine) {
  if (auto* f = dynamic_cast<FsdpEngine*>(&engine)) f->plant_skip_grad_copy();
}

// FSDP1 with accelerate: every mode loads the model as the blog does (fp32 for fp32, bf16
// otherwise); "mixed" upcasts the bf16-loaded FlatParameter to fp32 (accelerate >= 0.30
// prepare_model) under MixedPrecision(param_dtype=bf16, reduce_dtype, buffer_dtype); the sharded
// gradient is cast back to the flat parameter's dtype (_runtime_utils.py _cast_grad_to_param_dtype)
// and AdamW's states follow the flat parameter (torch.optim zeros_like).
PrecisionPlan precision_plan(const EngineSpec& spec) {
  const auto d = dtypes_for(spec.precision, fsdp_options(spec.options));
  PrecisionPlan p;
  p.load = spec.precision == "fp32" || spec.precision == "fp16" ? at::kFloat : at::kBFloat16;  // fp16: an fp32 load
  p.params = p.grads = p.optimizer_states = d.storage;
  p.compute = d.param;
  p.reduce = d.reduce;
  return p;
}

BackendInfo backend_info() {
  BackendInfo info;
  info.name = "fsdp";
  info.description = "FSDP-mode: one flat parameter per unit, PyTorch FSDP1 semantics";
  info.precisions = {"fp32", "low", "mixed", "fp16"};
  // -- training (bench/run): engine, closed form, estimate, dtypes, layout, loading, offload
  info.training.create = [](const EngineSpec& s, const runtime::World& w) {
    return std::make_unique<FsdpEngine>(s, w);
  };
  info.training.expected_bytes = expected_bytes;
  info.training.estimate_peak = estimate_peak;  // fsdp_estimate.cpp
  info.training.precision_plan = precision_plan;
  info.training.shard_layout = shard_layout;  // fsdp_layout.cpp
  info.training.broadcasts_initial_weights = broadcasts_initial_weights;
  // offload (fsdp_offload.hpp; closed forms in fsdp_offload_estimate.hpp)
  info.training.offload_choices = {{"CPUOffload(offload_params=True)", {{"offload_params", true}}}};
  // -- config files and CLI flags (fsdp_config.cpp)
  info.config.claim = config_claim;
  info.config.claim_text = "FSDP";
  info.config.read = read_config;
  info.config.flags = cli_flags();
  info.config.flags_title = "FSDP";
  info.config.apply_flags = apply_flags;
  // -- analysis: option effects (fsdp_config.cpp), projection program (fsdp_program.cpp), study rows
  info.analysis.option_effects = option_effects();
  info.analysis.projection = projection_hooks();
  info.analysis.precision_study_modes = {{"fp32", "fp32", /*reference=*/true},
                                         {"fsdp_low", "low"},
                                         {"fsdp_mixed", "mixed"},
                                         {"fsdp_fp16", "fp16"},
                                         {"fsdp_low_lr_x_W", "low", false, /*lr_x_world=*/true}};
  // -- crossval (fsdp_crossval.cpp)
  info.crossval = crossval_reference();
  // -- lifecycle: the default checkpoint layout; the lifecycle study's backend
  info.lifecycle.study_default = true;  // the FSDP 70B article's loading and checkpoint problems
  return info;
}

}  // namespace zb::backends::fsdp
