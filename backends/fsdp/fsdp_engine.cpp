// fsdp_engine.cpp — see fsdp_engine.hpp for the semantics and the upstream files followed.
#include "backends/fsdp/fsdp_engine.hpp"

#include <torch/csrc/autograd/engine.h>

#include <deque>

#include "backends/common/forward_backward.hpp"
#include "backends/common/optim.hpp"
#include "backends/common/storage.hpp"
#include "models/llama.hpp"
#include "runtime/device.hpp"
#include "runtime/errors.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::fsdp {

namespace {

struct Dtypes {
  at::ScalarType storage;  // the flat shard, its gradient and AdamW states
  at::ScalarType param;    // all-gather and compute
  at::ScalarType reduce;   // gradient reduce-scatter / all-reduce
};

Dtypes dtypes_for(const std::string& precision, const FsdpOptions& o) {
  if (precision == "fp32") return {at::kFloat, at::kFloat, at::kFloat};
  if (precision == "low") return {at::kBFloat16, at::kBFloat16, at::kBFloat16};
  if (precision == "mixed")
    return {at::kFloat, at::kBFloat16, o.reduce_dtype == "fp32" ? at::kFloat : at::kBFloat16};
  throw UsageError("--precision for fsdp must be fp32, low or mixed, got '" + precision + "'");
}

// FSDP1 (_init_utils.py, via DefaultState._get_gradient_predivide_factor): pre-divide by f,
// post-divide by W/f, with W the whole data-parallel size.
double predivide_factor(int world) {
  int f = 1;
  while (world % f == 0 && world / f > f) f *= 2;
  return double(f);
}

bool is_sharded(ShardingStrategy s) { return s != ShardingStrategy::kNoShard; }
bool reshard_after_forward(ShardingStrategy s) {
  return s == ShardingStrategy::kFullShard || s == ShardingStrategy::kHybridShard;
}

// Shard-group size: W for FULL_SHARD/SHARD_GRAD_OP, S for HYBRID_SHARD, 1 for NO_SHARD.
int shard_group_size(const FsdpOptions& o, int world, int local_size) {
  if (o.sharding_strategy == ShardingStrategy::kNoShard) return 1;
  if (o.sharding_strategy != ShardingStrategy::kHybridShard) return world;
  const int s = o.hybrid_shard_group_size > 0 ? o.hybrid_shard_group_size : local_size;
  if (s <= 0 || world % s != 0)
    throw UsageError("HYBRID_SHARD shard group size " + std::to_string(s) + " does not divide world size " +
                     std::to_string(world));
  return s;
}

struct Layout {  // one unit's FlatParameter geometry
  int64_t numel = 0, padded = 0, shard_numel = 0, offset = 0;
};

std::vector<Layout> layouts(const models::ModelConfig& cfg, int shard_size, bool sharded) {
  std::vector<Layout> out;
  int64_t offset = 0;
  for (const auto& unit : models::unit_param_specs(cfg)) {
    Layout l;
    for (const auto& p : unit) l.numel += p.numel();
    // _flat_param.py: pad to a multiple of the shard world size only when sharding.
    l.padded = sharded ? (l.numel + shard_size - 1) / shard_size * shard_size : l.numel;
    l.shard_numel = l.padded / (sharded ? shard_size : 1);
    l.offset = offset;
    offset += l.shard_numel;
    out.push_back(l);
  }
  return out;
}

class FsdpEngine;

// The autograd edge between a unit's sharded storage and its unsharded parameters: forward
// hands out an alias of the gathered buffer, backward receives the summed gradient of the
// whole flat parameter (every view's gradient accumulated) — FSDP's post-backward hook point.
struct UnitGather : public torch::autograd::Function<UnitGather> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& anchor, FsdpEngine* engine,
                            int64_t unit);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads);
};

class FsdpEngine final : public Engine, public models::UnitParamSource {
 public:
  FsdpEngine(const EngineSpec& spec, const runtime::World& world)
      : spec_(spec), opts_(fsdp_options_from_json(spec.options)), comm_(world), dtypes_(dtypes_for(spec.precision, opts_)) {
    at::NoGradGuard no_grad;
    const auto& cfg = spec_.model;
    const auto dev = world.device;
    const int W = world.size;
    // FSDP1 runs every strategy as NO_SHARD in a world of one (_init_utils.py, _init_core_state:
    // "FSDP is switching to use `NO_SHARD` ... since the world size is 1"): no gathers, one
    // all-reduce per unit, the norm without a collective. Resolved options say so.
    if (W == 1) opts_.sharding_strategy = ShardingStrategy::kNoShard;
    shard_size_ = shard_group_size(opts_, W, world.local_size);
    if (opts_.sharding_strategy == ShardingStrategy::kHybridShard) {
      // Shard groups are consecutive blocks of S ranks; replicate groups take the same
      // position in every block (FSDP's _init_intra_and_inter_node_groups).
      const int block = world.rank / shard_size_, pos = world.rank % shard_size_;
      std::vector<int> shard_ranks, replicate_ranks;
      for (int i = 0; i < shard_size_; ++i) shard_ranks.push_back(block * shard_size_ + i);
      for (int b = 0; b < W / shard_size_; ++b) replicate_ranks.push_back(b * shard_size_ + pos);
      shard_group_ = world.subgroup("fsdp_shard", shard_ranks);
      replicate_group_ = world.subgroup("fsdp_replicate", replicate_ranks);
    } else {
      shard_group_ = world;
    }
    shard_rank_ = is_sharded(opts_.sharding_strategy) ? shard_group_.rank : 0;
    layout_ = layouts(cfg, shard_size_, is_sharded(opts_.sharding_strategy));
    const int64_t local_numel = layout_.back().offset + layout_.back().shard_numel;
    local_params_ = at::zeros({local_numel}, at::TensorOptions().dtype(dtypes_.storage).device(dev));
    local_grads_ = at::zeros_like(local_params_);
    for (int u = 0; u < int(layout_.size()); ++u) {
      const auto& l = layout_[size_t(u)];
      auto full = at::zeros({l.padded}, at::kFloat);
      full.narrow(0, 0, l.numel).copy_(models::init_unit_flat(cfg, u, spec_.train.seed));
      // The blog's setting loads the model in bf16 for every mode: mixed upcasts the loaded
      // bf16 weights to fp32 at prepare (accelerate >= 0.30), so its master starts bf16-exact.
      if (spec_.precision == "mixed") full = full.to(at::kBFloat16).to(at::kFloat);
      full = full.to(dev);
      if (opts_.sync_module_states) comm_.broadcast(full, 0, "unit" + std::to_string(u));
      Unit unit;
      unit.shard = local_params_.narrow(0, l.offset, l.shard_numel);
      unit.grad_shard = local_grads_.narrow(0, l.offset, l.shard_numel);
      // _get_shard: this rank's chunk of the padded flat parameter.
      unit.shard.copy_(full.narrow(0, int64_t(shard_rank_) * l.shard_numel, l.shard_numel));
      if (!is_sharded(opts_.sharding_strategy) && dtypes_.param == dtypes_.storage) {
        unit.full = unit.shard;  // NO_SHARD in one dtype: the flat parameter is its own storage
        unit.owns_full = false;
        unit.unsharded = true;
      } else {
        unit.full = at::empty({l.padded}, at::TensorOptions().dtype(dtypes_.param).device(dev));
        common::free_storage(unit.full);  // _full_param_padded starts freed
      }
      unit.anchor = at::zeros({}, at::TensorOptions().dtype(at::kFloat)).requires_grad_(true);
      units_.push_back(std::move(unit));
    }
    optimizer_ = std::make_unique<common::FlatAdamW>(local_params_, common::adamw_options(spec_.train));
    optimizer_->set_measure_lost_updates(spec_.train.measure_lost_updates);
    rope_ = models::make_rope_cache(cfg, spec_.train.seq_len, dtypes_.param, dev);
    comm_.reset_stats();
  }

  std::string name() const override { return "fsdp"; }
  common::Comm& comm() override { return comm_; }
  common::LostUpdates lost_updates() const override { return optimizer_->last_lost_updates(); }
  void set_observer(FsdpObserver o) { observer_ = std::move(o); }

  // ---- forward (models::UnitParamSource) ----
  std::vector<at::Tensor> unit_weights(int u) override {
    if (u == models::kRootUnit) begin_forward();
    units_[size_t(u)].forward_range = runtime::nvtx::start("forward unit" + std::to_string(u));
    unshard(u);  // waits for it when prefetched
    // _prefetch_handles(FORWARD): issue the next unit's all-gather now; it runs (Gloo worker
    // threads / NCCL stream) while this unit computes, and is waited for in its own unit_weights.
    if (opts_.forward_prefetch && u + 1 < int(units_.size())) issue_unshard(u + 1);
    auto& unit = units_[size_t(u)];
    unit.needs_pre_backward_unshard = false;
    at::Tensor flat = at::GradMode::is_enabled()
                          ? UnitGather::apply(unit.anchor, this, int64_t(u))
                          : common::storage_alias(unit.full);
    return models::unflatten_unit(spec_.model, u, flat);
  }

  at::Tensor after_unit_forward(int u, at::Tensor output) override {
    auto& unit = units_[size_t(u)];
    // _post_forward_reshard: the root is never resharded after forward (its parameters are
    // needed first in backward); other units reshard under FULL_SHARD/HYBRID_SHARD.
    if (u != models::kRootUnit && reshard_after_forward(opts_.sharding_strategy)) {
      reshard(u);
      unit.needs_pre_backward_unshard = true;
    }
    notify("post_forward", u);
    runtime::nvtx::end(unit.forward_range);
    if (output.requires_grad()) {
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
    if (unit.needs_pre_backward_unshard) unshard(u);
    unit.needs_pre_backward_unshard = false;
    notify("pre_backward", u);
    if (opts_.backward_prefetch == BackwardPrefetch::kBackwardPre) prefetch_backward(u);
    unit.ran_pre_backward = true;
  }

  void post_backward(int u, const at::Tensor& unsharded_grad) {  // _post_backward_hook
    at::NoGradGuard no_grad;
    auto& unit = units_[size_t(u)];
    const auto& l = layout_[size_t(u)];
    if (is_sharded(opts_.sharding_strategy)) reshard(u);  // _should_free_in_backward (sync_gradients)
    notify("post_backward", u);
    if (opts_.backward_prefetch == BackwardPrefetch::kBackwardPost) prefetch_backward(u);
    const std::string label = "unit" + std::to_string(u);
    const double pre = predivide_factor(comm_.size());
    auto grad = unsharded_grad.to(dtypes_.reduce).contiguous();  // [padded]
    if (pre > 1) grad.div_(pre);
    Reduction r;
    r.unit = u;
    if (is_sharded(opts_.sharding_strategy)) {
      // Issued asynchronously; finished (post-divide, accumulate) at the next unit's
      // post-backward or the final callback, so it overlaps the next unit's backward.
      r.reduced = at::empty({l.shard_numel}, grad.options());
      r.collective = comm_.reduce_scatter_sum_async(r.reduced, grad, label, &shard_group_);
    } else {
      r.reduced = grad;
      comm_.all_reduce_sum(r.reduced, label);
    }
    finish_reductions();  // the previous unit's
    reductions_.push_back(std::move(r));
    if (!is_sharded(opts_.sharding_strategy) && unit.owns_full) reshard(u);  // drop NO_SHARD's bf16 copy
    runtime::nvtx::end(unit.backward_range);
  }

  // The reduce-scatters issued so far: wait, HYBRID_SHARD's all-reduce across replicas, the
  // post-divide, and accumulation into the sharded gradient in the flat-param dtype.
  void finish_reductions() {
    at::NoGradGuard no_grad;
    const double post = double(comm_.size()) / predivide_factor(comm_.size());
    for (auto& r : reductions_) {
      r.collective.wait();
      if (opts_.sharding_strategy == ShardingStrategy::kHybridShard)
        comm_.all_reduce_sum(r.reduced, "unit" + std::to_string(r.unit), &replicate_group_);
      if (post > 1) r.reduced.div_(post);
      units_[size_t(r.unit)].grad_shard.add_(r.reduced.to(dtypes_.storage));  // _cast_grad_to_param_dtype
    }
    reductions_.clear();
  }

  void post_backward_final() {  // _post_backward_final_callback: catch-all reshard, reset state
    finish_reductions();
    for (int u = 0; u < int(units_.size()); ++u) {
      if (is_sharded(opts_.sharding_strategy) || units_[size_t(u)].owns_full) reshard(u);
      units_[size_t(u)].ran_pre_backward = false;
      units_[size_t(u)].needs_pre_backward_unshard = false;
    }
    final_callback_queued_ = false;
  }

  // ---- Engine ----
  at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) override {
    return common::forward_backward(spec_.model, *this, batch, rope_,
                                    spec_.train.activation_checkpointing || opts_.activation_checkpointing, loss_scale);
  }

  double optimizer_step(double lr) override {
    at::NoGradGuard no_grad;
    // Each element of the gradient lives on one rank of the shard group (replicated across
    // HYBRID_SHARD's replicas, everywhere under NO_SHARD).
    const bool replicated = !is_sharded(opts_.sharding_strategy);
    // FullyShardedDataParallel.clip_grad_norm_, in its fp32 tensor arithmetic: an fp32 norm per
    // FlatParameter gradient and the norm of those (_get_grad_norm), squared, all-reduced over
    // the shard group, ** 0.5; clip_coef = max_norm / (norm + 1e-6) clamped to 1, multiplied in.
    // (NO_SHARD goes through torch.nn.utils.clip_grad_norm_: the same without the all-reduce.)
    std::vector<at::Tensor> norms;
    for (const auto& u : units_) norms.push_back(at::linalg_vector_norm(u.grad_shard, 2, std::nullopt, false, at::kFloat));
    at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2, std::nullopt, false, at::kFloat);
    if (!replicated) {
      at::Tensor sq = total.pow(2.0).reshape({1}).contiguous();
      comm_.all_reduce_sum(sq, "grad_norm", &shard_group_);
      total = sq.pow(0.5).reshape({});
    }
    if (spec_.train.grad_clip > 0)
      local_grads_.mul_(at::clamp_max(spec_.train.grad_clip / (total + 1e-6), 1.0).to(local_grads_.scalar_type()));
    optimizer_->step(local_grads_, lr);
    local_grads_.zero_();
    return total.item<double>();
  }

  ModelStateBytes model_state_bytes() const override {
    ModelStateBytes b;
    b.params = int64_t(local_params_.nbytes());
    for (const auto& u : units_)
      if (u.owns_full) b.params += common::storage_bytes(u.full);  // unsharded buffers still held
    b.grads = int64_t(local_grads_.nbytes());
    b.optimizer = optimizer_->state_bytes();
    return b;
  }

  nlohmann::json resolved_options() const override {
    auto j = to_json(opts_);
    j["param_dtype"] = std::string(c10::toString(dtypes_.param));
    j["reduce_dtype"] = std::string(c10::toString(dtypes_.reduce));
    j["flat_param_dtype"] = std::string(c10::toString(dtypes_.storage));
    j["shard_group_size"] = shard_size_;
    j["gradient_predivide_factor"] = predivide_factor(comm_.size());
    j["gradient_postdivide_factor"] = double(comm_.size()) / predivide_factor(comm_.size());
    return j;
  }

  std::vector<at::Tensor> full_parameters() override {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> out;
    for (int u = 0; u < int(units_.size()); ++u) {
      const auto& l = layout_[size_t(u)];
      auto shard = units_[size_t(u)].shard.contiguous();
      at::Tensor full = shard;
      if (is_sharded(opts_.sharding_strategy)) {
        full = at::empty({l.padded}, shard.options());
        comm_.all_gather(full, shard, "full_parameters", &shard_group_);
      }
      out.push_back(full.narrow(0, 0, l.numel).to(at::kFloat).cpu());
    }
    return out;
  }

  at::Tensor gathered_alias(int u) { return common::storage_alias(units_[size_t(u)].full); }

 private:
  struct Unit {
    at::Tensor shard, grad_shard;  // views into local_params_ / local_grads_ [shard_numel]
    at::Tensor full;               // _full_param_padded [padded], param dtype; storage freed when resharded
    bool owns_full = true;
    bool unsharded = false;
    bool needs_pre_backward_unshard = false;
    bool ran_pre_backward = false;
    common::PendingCollective gather;  // the all-gather into `full` while it is in flight
    at::Tensor anchor;             // a leaf that makes UnitGather part of the graph
    uint64_t forward_range = 0, backward_range = 0;  // NVTX start/end ranges of this unit
  };

  void begin_forward() {
    for (auto& u : units_) u.ran_pre_backward = false;
  }

  // _unshard, then wait: the unit's parameters are ready for the kernels issued after this.
  void unshard(int u) {
    issue_unshard(u);
    units_[size_t(u)].gather.wait();
  }

  // _unshard: all-gather (after _use_low_precision_shard) into _full_param_padded, in flight
  // until the handle's wait(). With limit_all_gathers the host first waits for the oldest of
  // two outstanding reshards (_limiter_utils.py's _FreeEventQueue), capping the unsharded
  // memory a fast CPU thread can run ahead into.
  void issue_unshard(int u) {
    auto& unit = units_[size_t(u)];
    if (unit.unsharded) return;
    at::NoGradGuard no_grad;
    if (opts_.limit_all_gathers && free_events_.size() >= kMaxInflightAllGathers) {
      free_events_.front()->synchronize();
      free_events_.pop_front();
    }
    const auto& l = layout_[size_t(u)];
    common::allocate_storage(unit.full, l.padded * int64_t(c10::elementSize(dtypes_.param)));
    if (!is_sharded(opts_.sharding_strategy)) {
      unit.full.copy_(unit.shard);  // NO_SHARD + mixed: the bf16 compute copy
    } else {
      at::Tensor src = unit.shard.scalar_type() == dtypes_.param ? unit.shard.contiguous()
                                                                 : unit.shard.to(dtypes_.param);  // _mp_shard
      unit.gather = comm_.all_gather_async(unit.full, src, "unit" + std::to_string(u), &shard_group_);
    }
    unit.unsharded = true;
    notify("unshard", u);
  }

  void reshard(int u) {
    auto& unit = units_[size_t(u)];
    if (!unit.unsharded || !unit.owns_full) return;
    notify("reshard_begin", u);
    unit.gather.wait();  // never free storage a collective may still write
    common::free_storage(unit.full);
    unit.unsharded = false;
    if (opts_.limit_all_gathers) {
      free_events_.push_back(runtime::make_device_event(comm_.world().device));
      free_events_.back()->record();
    }
    notify("reshard", u);
  }

  // _get_handles_to_prefetch(BACKWARD): the unit before `u` in forward order, if it still
  // needs a pre-backward unshard (i.e. was resharded after forward).
  void prefetch_backward(int u) {
    const int target = u == models::kRootUnit ? int(units_.size()) - 1 : u - 1;
    if (target <= models::kRootUnit || target == u) return;
    auto& t = units_[size_t(target)];
    if (!t.needs_pre_backward_unshard || t.unsharded) return;
    issue_unshard(target);  // waited for in the target's pre-backward
  }

  void notify(const char* event, int u) {
    if (observer_) observer_(event, u, common::storage_bytes(units_[size_t(u)].full));
  }

  EngineSpec spec_;
  FsdpOptions opts_;
  common::Comm comm_;
  Dtypes dtypes_;
  runtime::World shard_group_, replicate_group_;
  int shard_size_ = 1, shard_rank_ = 0;
  std::vector<Layout> layout_;
  std::vector<Unit> units_;
  struct Reduction {  // a unit's gradient reduce-scatter in flight
    int unit = 0;
    at::Tensor reduced;
    common::PendingCollective collective;
  };
  std::vector<Reduction> reductions_;
  static constexpr size_t kMaxInflightAllGathers = 2;
  std::deque<std::unique_ptr<runtime::DeviceEvent>> free_events_;  // recorded after each reshard
  at::Tensor local_params_, local_grads_;  // every unit's shard, contiguous: one AdamW pass
  std::unique_ptr<common::FlatAdamW> optimizer_;
  models::RopeCache rope_;
  bool final_callback_queued_ = false;
  FsdpObserver observer_;
};

at::Tensor UnitGather::forward(torch::autograd::AutogradContext* ctx, const at::Tensor& /*anchor*/, FsdpEngine* engine,
                               int64_t unit) {
  ctx->saved_data["engine"] = reinterpret_cast<int64_t>(engine);
  ctx->saved_data["unit"] = unit;
  return engine->gathered_alias(int(unit));
}

torch::autograd::variable_list UnitGather::backward(torch::autograd::AutogradContext* ctx,
                                                    torch::autograd::variable_list grads) {
  auto* engine = reinterpret_cast<FsdpEngine*>(ctx->saved_data["engine"].toInt());
  engine->post_backward(int(ctx->saved_data["unit"].toInt()), grads[0]);
  return {at::Tensor(), at::Tensor(), at::Tensor()};
}

ModelStateBytes expected_bytes(const EngineSpec& spec, int world, int /*rank*/) {
  const auto opts = fsdp_options_from_json(spec.options);
  const auto d = dtypes_for(spec.precision, opts);
  // Closed form: every rank holds sum_u ceil(numel_u / S) (padding included) elements of the
  // flat shard, the same of gradient, twice that of AdamW state, all in the flat-param dtype.
  const int S = shard_group_size(opts, world, opts.hybrid_shard_group_size > 0 ? opts.hybrid_shard_group_size : world);
  int64_t elems = 0;
  for (const auto& l : layouts(spec.model, S, is_sharded(opts.sharding_strategy))) elems += l.shard_numel;
  const int64_t e = int64_t(c10::elementSize(d.storage));
  return {elems * e, 0, elems * e, 2 * elems * e};
}

}  // namespace

void set_observer(Engine& engine, FsdpObserver observer) {
  if (auto* f = dynamic_cast<FsdpEngine*>(&engine)) f->set_observer(std::move(observer));
}

BackendInfo backend_info() {
  BackendInfo info;
  info.name = "fsdp";
  info.description = "FSDP-mode: one flat parameter per unit, PyTorch FSDP1 semantics";
  info.precisions = {"fp32", "low", "mixed"};
  info.create = [](const EngineSpec& s, const runtime::World& w) { return std::make_unique<FsdpEngine>(s, w); };
  info.expected_bytes = expected_bytes;
  return info;
}

}  // namespace zb::backends::fsdp
