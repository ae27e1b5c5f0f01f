// fsdp2_engine.cpp — see fsdp2_engine.hpp for the semantics and the upstream files followed.
//
// Streams (backends/common/streams.hpp), as torch 2.11 FSDP2 schedules them. FSDPCommContext
// lazy_init (_fsdp_param_group.py) creates four side streams: all_gather_copy_in, all_gather and
// reduce_scatter (high priority) and all_reduce. Tensors one stream produces and another uses are
// kept alive by held references with the event after their last use (AllGatherState,
// ReduceScatterState, AllReduceState: common::HeldTensors), never by record_stream. Every wait
// below names the upstream file and function it mirrors. On CPU a collective's wait is queued on
// its stream with Streams::enqueue (as fsdp_engine.cpp does): the host blocks in Gloo's wait when
// a later wait on that stream's event (or the stream) is reached, about when CUDA would.
#include "backends/fsdp2/fsdp2_engine.hpp"

#include "backends/fsdp2/fsdp2_layout.hpp"

#include <torch/csrc/autograd/engine.h>

#include <functional>
#include <optional>

#include "backends/common/forward_backward.hpp"
#include "backends/common/initial_weights.hpp"
#include "backends/common/optim.hpp"
#include "backends/common/storage.hpp"
#include "backends/fsdp2/fsdp2_collectives.hpp"
#include "backends/fsdp2/fsdp2_param.hpp"
#include "models/llama.hpp"
#include "runtime/errors.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::fsdp2 {

namespace {

using common::StreamId;
using common::Streams;

class Fsdp2Engine;

// _fsdp_param_group.py RegisterPostBackwardFunction: applied to a module's inputs in pre-forward;
// its backward (the gradient w.r.t. the module's inputs, i.e. after the module's whole backward)
// is the group's post-backward.
struct RegisterPostBackward : public torch::autograd::Function<RegisterPostBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, Fsdp2Engine* engine,
                            int64_t group);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads);
};

class Fsdp2Engine final : public Engine, public models::UnitParamSource {
 public:
  Fsdp2Engine(const EngineSpec& spec, const runtime::World& world)
      : spec_(spec),
        opts_(fsdp2_options_from_json(spec.options)),
        comm_(world),
        dtypes_(dtypes_for(spec.precision, opts_)) {
    at::NoGradGuard no_grad;
    const auto& cfg = spec_.model;
    const auto dev = world.device;
    coll_.mesh = resolve_mesh(opts_, world.size);
    if (coll_.mesh.replicate > 1) {
      // init_device_mesh(("dp_replicate", "dp_shard")): mesh = arange(W).view(R, S); shard groups
      // are its rows (consecutive S ranks), replicate groups its columns.
      const int block = world.rank / coll_.mesh.shard, pos = world.rank % coll_.mesh.shard;
      std::vector<int> shard_ranks, replicate_ranks;
      for (int i = 0; i < coll_.mesh.shard; ++i) shard_ranks.push_back(block * coll_.mesh.shard + i);
      for (int b = 0; b < coll_.mesh.replicate; ++b) replicate_ranks.push_back(b * coll_.mesh.shard + pos);
      coll_.shard_group = world.subgroup("fsdp2_shard", shard_ranks);
      coll_.replicate_group = world.subgroup("fsdp2_replicate", replicate_ranks);
    } else {
      coll_.shard_group = world;
    }
    // _get_post_forward_mesh_info: an int N in (1, S) reshards to mesh.view(-1, N) (consecutive N
    // ranks of the flattened mesh); N == 1 means False and N == S means True.
    int raf = opts_.reshard_after_forward;
    if (raf > 0) {
      if (raf > coll_.mesh.shard || coll_.mesh.shard % raf != 0)
        throw UsageError("--reshard-after-forward " + std::to_string(raf) +
                         " must be a factor of the shard group size " + std::to_string(coll_.mesh.shard));
      if (raf == 1)
        raf = kReshardFalse;
      else if (raf == coll_.mesh.shard)
        raf = kReshardTrue;
    }
    if (raf > 1) {
      std::vector<int> ranks;
      for (int i = 0; i < raf; ++i) ranks.push_back(world.rank / raf * raf + i);
      coll_.post_forward_group = world.subgroup("fsdp2_post_forward", ranks);
    }
    coll_.comm = &comm_;
    coll_.factors = divide_factors(coll_.mesh.shard, coll_.mesh.replicate, dtypes_.comm_reduce(), opts_.force_sum_reduction_for_comms);

    // Weights: the same deterministic per-unit init as every backend; "low" is the model loaded in
    // bf16, "mixed" the bf16-loaded model upcast to fp32 (fsdp2_prepare_model's upcast).
    const int units = int(models::unit_count(cfg));
    std::vector<std::vector<at::Tensor>> full(static_cast<size_t>(units));
    // A --model-dir load strategy replaces cpu_ram_efficient_loading's broadcast (its
    // rank0-broadcast is that broadcast); under a sharded load each parameter's local rows are
    // read below instead of the whole unit here.
    const bool load_on_rank0 = opts_.cpu_ram_efficient_loading && world.size > 1 && !spec_.initial_weights;
    const bool sharded_load = common::sharded_load(spec_);
    for (int u = 0; u < units; ++u) {
      auto specs = models::unit_specs(cfg, u);
      if ((load_on_rank0 && world.rank != 0) || sharded_load) {
        for (const auto& s : specs)
          full[size_t(u)].push_back(sharded_load ? at::Tensor()
                                                 : at::empty(s.shape, at::TensorOptions().dtype(dtypes_.orig).device(dev)));
        continue;
      }
      auto flat = common::initial_unit(spec_, u);
      if (spec_.precision != "fp32") flat = flat.to(at::kBFloat16);
      flat = flat.to(dtypes_.orig).to(dev);
      for (auto& t : models::unflatten_unit(cfg, u, flat)) full[size_t(u)].push_back(t.contiguous());
    }

    const auto specs = group_specs(cfg, opts_);
    const auto param_specs = models::unit_param_specs(cfg);
    auto param_offset = [&](int unit, int index) {  // element offset of a weight in its unit's flat layout
      int64_t o = 0;
      for (int k = 0; k < index; ++k) o += param_specs[size_t(unit)][size_t(k)].numel();
      return o;
    };
    const auto orig_opts = at::TensorOptions().dtype(dtypes_.orig).device(dev);
    const auto param_opts = at::TensorOptions().dtype(dtypes_.compute()).device(dev);
    param_of_.assign(size_t(units), {});
    for (int u = 0; u < units; ++u) param_of_[size_t(u)].assign(param_specs[size_t(u)].size(), -1);
    for (const auto& gs : specs) {
      Group g;
      g.spec = gs;
      g.reshard_after_forward = gs.reshard_after_forward_false ? kReshardFalse : raf;
      int64_t offset = 0;
      for (const auto& [u, i] : gs.params) {
        Param p;
        p.group = int(groups_.size());
        p.l = layout_param(param_specs[size_t(u)][size_t(i)], u, i, coll_.mesh.shard, coll_.shard_group.rank);
        p.grad_offset = offset;
        offset += p.l.padded_shard_numel();
        auto& w = full[size_t(u)][size_t(i)];
        // fsdp2_load_full_state_dict: rank 0 broadcasts each full parameter (cpu_ram_efficient_loading).
        if (load_on_rank0) comm_.broadcast(w, 0, "load");
        std::function<at::Tensor(int64_t)> load_rows;  // a sharded load: this rank's rows only
        if (sharded_load)
          load_rows = [&, u = u, i = i, &p = p](int64_t row_lo) {
            auto rows = common::initial_range(spec_, u, param_offset(u, i) + row_lo, p.l.local_numel());
            if (spec_.precision != "fp32") rows = rows.to(at::kBFloat16);
            return rows.to(dtypes_.orig);
          };
        init_sharded_param(p, coll_.shard_group.rank, orig_opts, w, load_rows);
        init_unsharded_param(p, param_opts, coll_.mesh.shard);
        param_of_[size_t(u)][size_t(i)] = int(params_.size());
        g.params.push_back(int(params_.size()));
        params_.push_back(std::move(p));
      }
      g.grad_numel = offset;
      groups_.push_back(std::move(g));
    }
    // Explicit prefetch lists over groups with parameters: forward = the next N in forward order;
    // backward = the next N in reverse post-forward order (set_modules_to_*_prefetch).
    std::vector<int> forward_order, post_forward_order;
    for (int g = 0; g < int(groups_.size()); ++g) {
      if (groups_[size_t(g)].spec.kind == GroupKind::kEmbed) embed_group_ = g;
      if (groups_[size_t(g)].spec.kind == GroupKind::kTail) tail_group_ = g;
      if (!groups_[size_t(g)].params.empty()) forward_order.push_back(g);
    }
    post_forward_order = forward_order;
    if (!groups_[0].params.empty()) {  // the root's post-forward comes last
      post_forward_order.erase(post_forward_order.begin());
      post_forward_order.push_back(0);
    }
    for (size_t i = 0; i < forward_order.size(); ++i)
      for (size_t k = i + 1; k < forward_order.size() && k <= i + size_t(opts_.modules_to_forward_prefetch); ++k)
        groups_[size_t(forward_order[i])].forward_prefetch.push_back(forward_order[k]);
    std::vector<int> backward_order(post_forward_order.rbegin(), post_forward_order.rend());
    for (size_t i = 0; i < backward_order.size(); ++i)
      for (size_t k = i + 1; k < backward_order.size() && k <= i + size_t(opts_.modules_to_backward_prefetch); ++k)
        groups_[size_t(backward_order[i])].backward_prefetch.push_back(backward_order[k]);
    // torch.optim.AdamW over the sharded parameters: one state pair per parameter, shaped as its
    // unpadded local tensor (zeros_like on the DTensor).
    std::vector<at::Tensor> locals;
    for (const auto& p : params_) locals.push_back(p.local);
    optimizer_ = std::make_unique<common::FusedAdamW>(locals, common::adamw_options(spec_.train));
    optimizer_->set_measure_lost_updates(spec_.train.measure_lost_updates);
    rope_ = models::make_rope_cache(cfg, spec_.train.seq_len, dtypes_.compute(), dev);
    coll_.lazy_init();
    comm_.reset_stats();
  }

  // Work still queued on a side stream (CPU) touches this engine's members: run it first.
  ~Fsdp2Engine() override {
    try {
      streams().drain_all();
    } catch (...) {
    }
  }

  std::string name() const override { return "fsdp2"; }
  common::Comm& comm() override { return comm_; }
  // Checkpoints: each parameter's padded local shard (the DTensor's local rows) and the optimizer.
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override {
    std::vector<std::pair<std::string, at::Tensor>> s;
    for (size_t i = 0; i < params_.size(); ++i) s.push_back({"param." + std::to_string(i), params_[i].sharded_data});
    for (auto& t : optimizer_->state("optim.")) s.push_back(std::move(t));
    return s;
  }
  void state_loaded() override { optimizer_->state_loaded(); }
  common::LostUpdates lost_updates() const override { return optimizer_->last_lost_updates(); }
  void set_observer(Fsdp2Observer o) { observer_ = std::move(o); }

  // ---------------------------------------------------------------- model hooks (forward)

  std::vector<at::Tensor> unit_weights(int u) override {
    if (u == models::kRootUnit && !iter_forward_root_) root_pre_forward();
    std::vector<at::Tensor> out;
    for (int id : param_of_[size_t(u)]) {
      const auto& p = params_[size_t(id)];
      // Every weight the block is about to use must be unsharded (the tail's weights are handed
      // out at the start of forward and unsharded in its pre-forward, before their first use).
      TORCH_CHECK(u == models::kRootUnit || groups_[size_t(p.group)].sharded == ShardedState::kUnsharded,
                  "fsdp2: unit ", u, " used while its group is sharded");
      out.push_back(p.unsharded);
    }
    return out;
  }

  at::Tensor before_unit_forward(int u, at::Tensor x) override {
    if (u == 1 && embed_group_ >= 0) x = state_post_forward(embed_group_, x);  // the embedding module's post-forward
    const int g = block_group(u);
    if (g >= 0) x = state_pre_forward(g, x);
    return x;
  }

  at::Tensor after_unit_forward(int u, at::Tensor out) override {
    streams().op("forward unit" + std::to_string(u));  // the unit's compute, issued on the current stream
    if (u != models::kRootUnit) {
      const int g = block_group(u);
      if (g >= 0) out = state_post_forward(g, out);
      if (u == spec_.model.layers && tail_group_ >= 0) out = state_pre_forward(tail_group_, out);  // norm's pre-forward
      return out;
    }
    // The loss: the tail's post-forward (after lm_head) and then the root's.
    if (tail_group_ >= 0) group_post_forward(tail_group_);
    group_post_forward(0);
    // Pre-backward hooks: the root's on the model output fires first; the tail's (on the logits
    // upstream) next — both on the loss here, registered in that order.
    if (out.requires_grad()) {
      out.register_hook([this](const at::Tensor&) { state_pre_backward(0); });
      if (tail_group_ >= 0) out.register_hook([this](const at::Tensor&) { state_pre_backward(tail_group_); });
    }
    // _fsdp_state.py _post_forward of the iteration's forward root: the all-gather copy-in and
    // all-gather streams wait the last copy-out event, then the all-gather output held for overlap
    // is freed ([Note: Overlapping all-gather copy-in and all-gather]).
    coll_.all_gather_state.release(streams(), {coll_.copy_in_stream, coll_.all_gather_stream});
    iter_forward_root_ = false;
    runtime::nvtx::end(std::exchange(groups_[0].forward_range, 0));
    if (dtypes_.output && out.scalar_type() != *dtypes_.output) out = out.to(*dtypes_.output);  // output_dtype
    return out;
  }

  // ---------------------------------------------------------------- Engine

  at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) override {
    // accelerate accumulate()/no_sync for FSDP2: set_requires_gradient_sync(False) on non-final
    // micro-batches (reduce_grads and all_reduce_grads together), unless sync_each_batch.
    const bool sync = last_micro_batch || opts_.sync_each_batch || spec_.train.sync_each_batch;
    for (auto& g : groups_) g.reduce_grads = sync;
    auto loss =
        common::forward_backward(spec_.model, *this, batch, rope_,
                                 spec_.train.activation_checkpointing || opts_.activation_checkpointing, loss_scale);
    return loss.to(at::kFloat);
  }

  double optimizer_step(double lr) override {
    at::NoGradGuard no_grad;
    // accelerate 1.15 clip_grad_norm_ -> _clip_grad_norm_dtensor_aware: one mesh, so
    // torch.nn.utils.clip_grad_norm_ over the DTensor gradients. DTensors take _get_total_norm's
    // per-tensor path (no foreach support): vector_norm of each local shard (the gradient's dtype),
    // a _NormPartial(2) per parameter; their stack stays partial, and the outer vector_norm is not
    // a linear reduction of a "sum" partial (_math_ops.py common_reduction_strategy), so DTensor
    // first redistributes the stacked [P] vector to Replicate: ** 2, one all-reduce SUM of P
    // elements over the shard mesh, ** 0.5 (_NormPartial._reduce_value) — each parameter's global
    // norm — then vector_norm of those locally (crossval counts the P-element all-reduce on real
    // FSDP2). _clip_grads_with_norm_ multiplies every gradient by clamp(max_norm / (total + 1e-6), max=1).
    std::vector<at::Tensor> grads;
    for (const auto& p : params_) {
      grads.push_back(grad_view(p));
      TORCH_CHECK(grads.back().defined(), "fsdp2: optimizer step without a gradient in group ",
                  groups_[size_t(p.group)].spec.label);
    }
    // The norms stack in model.parameters() order (the embedding, each block in HF's order, the
    // final norm, the LM head), whatever the groups.
    std::vector<at::Tensor> norms;
    norms.reserve(grads.size());
    const int units = int(param_of_.size());
    auto add_norm = [&](int u, int i) { norms.push_back(at::linalg_vector_norm(grads[size_t(param_of_[size_t(u)][size_t(i)])], 2)); };
    add_norm(models::kRootUnit, 0);
    for (int u = 1; u < units; ++u)
      for (int i : kHfBlockOrder) add_norm(u, i);
    add_norm(models::kRootUnit, 1);
    add_norm(models::kRootUnit, 2);
    auto stacked = at::stack(norms);  // [P]
    norms.clear();
    if (coll_.mesh.shard > 1) {
      auto sq = stacked.pow(2).contiguous();
      comm_.all_reduce_sum(sq, "grad_norm", &coll_.shard_group);
      stacked = sq.pow(0.5);
    }
    auto total = at::linalg_vector_norm(stacked, 2);
    if (spec_.train.grad_clip > 0) {
      const auto coef = at::clamp(spec_.train.grad_clip / (total + 1e-6), c10::nullopt, 1.0);
      for (auto& g : grads) g.mul_(coef);
    }
    // torch.optim.AdamW(fused=True) over the sharded parameters' local tensors.
    optimizer_->step(grads, lr);
    for (auto& g : groups_) g.grad = at::Tensor();  // zero_grad(set_to_none=True): gradients freed
    return total.item<double>();
  }

  ModelStateBytes model_state_bytes() const override {
    ModelStateBytes b;
    for (const auto& p : params_) {
      b.params += common::storage_bytes(p.sharded_data) + common::storage_bytes(p.all_gather_output);
      if (p.post_forward_data.defined()) b.params += int64_t(p.post_forward_data.nbytes());
      // Unsharded gradients held between micro-batches under set_requires_gradient_sync(False).
      if (p.unsharded.grad().defined()) b.grads += int64_t(p.unsharded.grad().nbytes());
      if (p.accumulated_grad.defined()) b.grads += int64_t(p.accumulated_grad.nbytes());
    }
    for (const auto& g : groups_)
      if (g.grad.defined()) b.grads += common::storage_bytes(g.grad);
    b.optimizer = optimizer_->state_bytes();
    return b;
  }

  nlohmann::json resolved_options() const override {
    auto j = to_json(opts_);
    auto name = [](std::optional<at::ScalarType> t) {
      return t ? std::string(c10::toString(*t)) : std::string("None");
    };
    j["optimizer"] = "torch.optim.AdamW(fused=True)";
    j["sharded_param_dtype"] = std::string(c10::toString(dtypes_.orig));
    j["mp_param_dtype"] = name(dtypes_.param);
    j["mp_reduce_dtype"] = name(dtypes_.reduce);
    j["mp_output_dtype"] = name(dtypes_.output);
    j["all_gather_dtype"] = std::string(c10::toString(dtypes_.compute()));
    j["reduce_scatter_dtype"] = std::string(c10::toString(dtypes_.comm_reduce()));
    j["mesh"] = {{"dp_replicate", coll_.mesh.replicate}, {"dp_shard", coll_.mesh.shard}};
    j["reduce_scatter_op"] = op_name(coll_.factors.rs_op);
    j["all_reduce_op"] = op_name(coll_.factors.ar_op);
    j["gradient_predivide_factor"] = coll_.factors.pre ? nlohmann::json(*coll_.factors.pre) : nlohmann::json(nullptr);
    j["gradient_postdivide_factor"] = coll_.factors.post ? nlohmann::json(*coll_.factors.post) : nlohmann::json(nullptr);
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : groups_) {
      if (g.params.empty()) continue;
      groups.push_back({{"label", g.spec.label},
                        {"params", g.params.size()},
                        {"reshard_after_forward", reshard_after_forward_text(g.reshard_after_forward)}});
    }
    j["groups"] = groups;
    return j;
  }

  std::vector<at::Tensor> full_parameters() override {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> out;
    for (int u = 0; u < int(param_of_.size()); ++u) {
      std::vector<at::Tensor> parts;
      for (int id : param_of_[size_t(u)]) {
        auto& p = params_[size_t(id)];
        at::Tensor full = p.sharded_data;
        if (coll_.mesh.shard > 1) {
          full = at::empty({p.l.padded_shard_numel() * coll_.mesh.shard}, p.sharded_data.options());
          comm_.all_gather(full, p.sharded_data, "full_parameters", &coll_.shard_group);
        }
        parts.push_back(full.narrow(0, 0, p.l.numel).to(at::kFloat).cpu());
      }
      out.push_back(at::cat(parts));
    }
    return out;
  }

  void post_backward_from_autograd(int g) { group_post_backward(g); }

 private:
  struct Group {
    GroupSpec spec;
    std::vector<int> params;
    int reshard_after_forward = kReshardTrue;
    ShardedState sharded = ShardedState::kSharded;
    TrainingState training = TrainingState::kIdle;
    std::optional<AllGatherResult> all_gather;
    std::vector<int> post_forward_indices;
    bool reduce_grads = true;
    int64_t grad_numel = 0;
    at::Tensor grad;  // sharded gradients of the group ([grad_numel], orig dtype); undefined when freed
    std::vector<int> forward_prefetch, backward_prefetch;
    uint64_t forward_range = 0, backward_range = 0;
    common::StreamEvent reshard_after_forward_event;  // _reshard_after_forward_event
    common::StreamEvent post_reduce_event;            // _post_reduce_event
    common::HeldTensors all_reduce_state;             // _all_reduce_state (HSDP): all-reduce input + event
  };

  Streams& streams() { return comm_.streams(); }

  int block_group(int u) const {
    for (int g = 0; g < int(groups_.size()); ++g)
      if (groups_[size_t(g)].spec.kind == GroupKind::kBlock && groups_[size_t(g)].spec.unit == u) return g;
    return -1;
  }

  at::Tensor grad_view(const Param& p) const {
    const auto& g = groups_[size_t(p.group)];
    if (!g.grad.defined()) return at::Tensor();
    return g.grad.narrow(0, p.grad_offset, p.l.local_numel());
  }

  const runtime::World& all_gather_group(const Group& g) const {
    return g.sharded == ShardedState::kShardedPostForward ? coll_.post_forward_group : coll_.shard_group;
  }
  int all_gather_world(const Group& g) const { return all_gather_group(g).size; }

  int64_t unsharded_bytes(const Group& g) const {
    int64_t n = 0;
    for (int id : g.params) n += common::storage_bytes(params_[size_t(id)].all_gather_output);
    return n;
  }
  void notify(const char* event, int g) {
    if (observer_) observer_(event, g, groups_[size_t(g)].spec.label, unsharded_bytes(groups_[size_t(g)]));
  }

  // ---------------------------------------------------------------- FSDPState hooks

  // _root_pre_forward + the pre-forwards that run before the first block: the root state's and,
  // under accelerate's grouping, the embedding's.
  void root_pre_forward() {
    iter_forward_root_ = true;
    // _fsdp_state.py _root_pre_forward ("Wait for optimizer before implicitly prefetched
    // all-gathers"; no post_optim_event is offered): all_gather_copy_in_stream and
    // all_gather_stream .wait_stream(current_stream) — their only stream wait on compute; in forward
    // they otherwise wait only copy-out events.
    auto& s = streams();
    s.wait_stream(coll_.copy_in_stream, s.current());
    s.wait_stream(coll_.all_gather_stream, s.current());
    groups_[0].forward_range = runtime::nvtx::start("forward " + groups_[0].spec.label);
    state_pre_forward(0, at::Tensor());
    if (embed_group_ >= 0) state_pre_forward(embed_group_, at::Tensor());
  }

  // _fsdp_state.py _pre_forward: the group's pre_forward, then the explicit forward prefetches.
  at::Tensor state_pre_forward(int gi, at::Tensor input) {
    auto& g = groups_[size_t(gi)];
    if (!g.params.empty()) {
      g.training = TrainingState::kForward;
      if (gi != 0) g.forward_range = runtime::nvtx::start("forward " + g.spec.label);
      unshard(gi, /*async_op=*/false);
      wait_for_unshard(gi);
      // _register_post_backward_hook: on inputs that require grad.
      if (input.defined() && at::GradMode::is_enabled() && input.requires_grad())
        input = RegisterPostBackward::apply(input, this, int64_t(gi));
    }
    for (int t : g.forward_prefetch) prefetch_unshard(t, TrainingState::kForward);
    return input;
  }

  // _fsdp_state.py _post_forward for a non-root state: the group's post_forward (reshard, record
  // post-forward order), the pre-backward hook on the output, output_dtype.
  at::Tensor state_post_forward(int gi, at::Tensor output) {
    group_post_forward(gi);
    if (output.requires_grad()) output.register_hook([this, gi](const at::Tensor&) { state_pre_backward(gi); });
    if (dtypes_.output && output.is_floating_point() && output.scalar_type() != *dtypes_.output)
      output = output.to(*dtypes_.output);
    return output;
  }

  void group_post_forward(int gi) {
    auto& g = groups_[size_t(gi)];
    if (g.params.empty()) return;
    reshard(gi);
    g.post_forward_indices.push_back(int(post_forward_order_.size()));  // _record_post_forward
    post_forward_order_.push_back(gi);
    g.training = TrainingState::kIdle;
    notify("post_forward", gi);
    if (gi != 0) runtime::nvtx::end(std::exchange(g.forward_range, 0));
  }

  // _fsdp_state.py _pre_backward.
  void state_pre_backward(int gi) {
    if (!final_callback_queued_) {  // _register_root_post_backward_final_callback
      final_callback_queued_ = true;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { root_post_backward_final_callback(); });
    }
    auto& g = groups_[size_t(gi)];
    if (!g.params.empty()) group_pre_backward(gi, /*default_prefetch=*/g.backward_prefetch.empty());
    for (int t : g.backward_prefetch) prefetch_unshard(t, TrainingState::kPreBackward);
  }

  // ---------------------------------------------------------------- FSDPParamGroup

  void group_pre_backward(int gi, bool default_prefetch) {
    auto& g = groups_[size_t(gi)];
    if (g.training == TrainingState::kPreBackward) return;
    g.training = TrainingState::kPreBackward;
    g.backward_range = runtime::nvtx::start("backward " + g.spec.label);
    unshard(gi, false);  // no-op if prefetched or never resharded
    wait_for_unshard(gi);
    notify("pre_backward", gi);
    if (default_prefetch) backward_prefetch(gi);
  }

  // _backward_prefetch: the group before this one in post-forward order (reverse order in backward).
  void backward_prefetch(int gi) {
    auto& g = groups_[size_t(gi)];
    if (g.post_forward_indices.empty()) return;
    const int cur = g.post_forward_indices.back();
    g.post_forward_indices.pop_back();
    if (cur - 1 < 0) return;
    prefetch_unshard(post_forward_order_[size_t(cur - 1)], TrainingState::kPreBackward);
  }

  // _prefetch_unshard: the target's unshard under the pass's training state; waited for in its own
  // pre-forward / pre-backward.
  void prefetch_unshard(int target, TrainingState state) {
    auto& t = groups_[size_t(target)];
    if (t.params.empty()) return;
    const auto saved = std::exchange(t.training, state);
    unshard(target, /*async_op=*/false);
    t.training = saved;
  }

  // unshard -> foreach_all_gather: on the copy-in stream the copy-in (cast to param_dtype) into
  // this rank's slot of the all-gather output; on the all-gather stream the all-gather and its event.
  void unshard(int gi, bool async_op) {
    auto& g = groups_[size_t(gi)];
    if (g.all_gather || g.sharded == ShardedState::kUnsharded || g.params.empty()) return;
    auto& s = streams();
    // _fsdp_param_group.py unshard: "Resharded parameter data is allocated in the default stream
    // and used in the all-gather streams" -> _wait_all_gather_streams_on_event(
    // _reshard_after_forward_event).
    if (g.reshard_after_forward_event.recorded()) {
      coll_.wait_all_gather_streams_on_event(g.reshard_after_forward_event);
      g.reshard_after_forward_event = common::StreamEvent();
    }
    const int world = all_gather_world(g);
    AllGatherResult r;
    if (world == 1) {
      r.world = world;
      r.async_op = async_op;
      // unshard, world_size == 1: AllGatherResult(all_gather_event=Event().record()) on the current stream.
      r.event = s.record(s.current(), "all_gather " + g.spec.label);
    } else {
      std::vector<at::Tensor> sources;
      for (int id : g.params) sources.push_back(all_gather_input(params_[size_t(id)], g.sharded));
      r = coll_.foreach_all_gather(sources, dtypes_.param, dtypes_.compute(), all_gather_group(g), async_op, g.training,
                                   g.spec.label);
    }
    g.all_gather = std::move(r);
    notify("unshard", gi);
  }

  // wait_for_unshard -> foreach_all_gather_copy_out: split-with-sizes copy of the output
  // ([world, sum] viewed) into every parameter's all-gather output ([world, padded shard] viewed),
  // on the current stream.
  void wait_for_unshard(int gi) {
    auto& g = groups_[size_t(gi)];
    if (!g.all_gather) return;
    at::NoGradGuard no_grad;
    auto& s = streams();
    auto& r = *g.all_gather;
    const std::string& label = g.spec.label;
    // wait_for_unshard, implicit forward prefetch: the previous group's all-gather output (held in
    // comm_ctx.all_gather_state since its copy-out) is freed after the all-gather streams wait its
    // copy-out event — after this group's copy-in, which therefore wrote into different memory.
    if (g.training == TrainingState::kForward) coll_.all_gather_state.release(s, {coll_.copy_in_stream, coll_.all_gather_stream});
    if (r.world == 1) {
      for (int id : g.params) {
        auto& p = params_[size_t(id)];
        alloc_all_gather_output(p);
        p.all_gather_output.copy_(all_gather_input(p, g.sharded));
      }
    } else {
      std::vector<Param*> params;
      for (int id : g.params) params.push_back(&params_[size_t(id)]);
      coll_.foreach_all_gather_copy_out(r, params, label);
    }
    if (g.sharded == ShardedState::kShardedPostForward)  // to_unsharded frees the post-forward shard
      for (int id : g.params) params_[size_t(id)].post_forward_data = at::Tensor();
    g.sharded = ShardedState::kUnsharded;
    const auto copy_out = s.record(s.current(), "all_gather copy-out " + label);  // all_gather_copy_out_event
    if (!r.async_op && g.training == TrainingState::kForward && r.world > 1) {
      // "Defer free to allow for overlap of this copy-out with next all-gather collective":
      // comm_ctx.all_gather_state = AllGatherState(all_gather_result, copy-out event).
      coll_.all_gather_state = common::HeldTensors{{r.output}, copy_out};
    } else {
      coll_.wait_all_gather_streams_on_event(copy_out);  // then the result is freed below
    }
    g.all_gather.reset();
    notify("wait_for_unshard", gi);
  }

  void reshard(int gi) {
    auto& g = groups_[size_t(gi)];
    if (g.training == TrainingState::kForward) {
      if (g.reshard_after_forward == kReshardFalse) return;
      if (g.reshard_after_forward > 1) {
        to_sharded_post_forward(gi);
        // reshard: _reshard_after_forward_event recorded on the current stream after the clone;
        // the next unshard's all-gather streams wait it.
        g.reshard_after_forward_event = streams().record(streams().current(), "reshard_after_forward " + g.spec.label);
        return;
      }
    }
    if (g.sharded == ShardedState::kSharded) return;
    for (int id : g.params) free_unsharded_param(params_[size_t(id)]);  // to_sharded
    g.sharded = ShardedState::kSharded;
    notify("reshard", gi);
  }

  // to_sharded_post_forward: keep this rank's 1/N of the unsharded data (a clone), free the rest.
  void to_sharded_post_forward(int gi) {
    auto& g = groups_[size_t(gi)];
    if (g.sharded != ShardedState::kUnsharded) return;
    at::NoGradGuard no_grad;
    const int n_ranks = coll_.post_forward_group.size, r = coll_.post_forward_group.rank;
    for (int id : g.params) fsdp2::to_sharded_post_forward(params_[size_t(id)], n_ranks, r);
    g.sharded = ShardedState::kShardedPostForward;
    notify("reshard_post_forward", gi);
  }

  // post_backward: accumulate / reshard / reduce (or hold the unsharded gradients without sync).
  void group_post_backward(int gi) {
    auto& g = groups_[size_t(gi)];
    if (g.params.empty()) return;
    at::NoGradGuard no_grad;
    streams().op("backward " + g.spec.label);  // the group's gradient computation (current stream)
    g.training = TrainingState::kPostBackward;
    for (int id : g.params) accumulate_unsharded_grad_if_needed(params_[size_t(id)]);
    if (!g.reduce_grads) {
      reshard(gi);               // reshard_after_backward
      for (int id : g.params) to_accumulated_grad_if_needed(params_[size_t(id)], dtypes_.reduce);
      notify("post_backward", gi);
      runtime::nvtx::end(std::exchange(g.backward_range, 0));
      return;
    }
    std::vector<at::Tensor> grads;
    for (int id : g.params) {
      grads.push_back(take_unsharded_grad(params_[size_t(id)]));
      // Every parameter of this model gets a gradient; a missing one would shift the buffer.
      TORCH_CHECK(grads.back().defined(), "fsdp2: parameter without gradient in group ", g.spec.label);
    }
    reshard(gi);
    notify("post_backward", gi);
    auto& s = streams();
    // post_backward: current_stream().wait_event(comm_ctx.reduce_scatter_state.event), then
    // reduce_scatter_state = None (the previous group's reduce-scatter input is freed): the compute
    // stream waits a reduce-scatter only here, one group later, and at the end of backward.
    coll_.reduce_scatter_state.release(s, {s.current()});
    wait_for_post_backward(gi);
    coll_.foreach_reduce(grads, g.grad_numel, dtypes_.reduce, g.spec.label, g.all_reduce_state, g.post_reduce_event,
                         [this, gi](at::Tensor output) { post_reduce(gi, output); });
    notify("reduce_scatter", gi);
    runtime::nvtx::end(std::exchange(g.backward_range, 0));
  }

  // _wait_for_post_backward: the current stream waits this group's previous post-reduce event and
  // its HSDP all-reduce event (all_reduce_state is then dropped).
  void wait_for_post_backward(int gi) {
    auto& g = groups_[size_t(gi)];
    auto& s = streams();
    if (g.post_reduce_event.recorded()) {
      s.wait_event(s.current(), g.post_reduce_event);
      g.post_reduce_event = common::StreamEvent();
    }
    g.all_reduce_state.release(s, {s.current()});
  }

  // The end of foreach_reduce (on the post-reduce stream): post-divide, cast to the sharded dtype,
  // accumulate into (or become) the sharded gradient.
  void post_reduce(int gi, at::Tensor output) {
    at::NoGradGuard no_grad;
    auto& g = groups_[size_t(gi)];
    if (coll_.factors.post && *coll_.factors.post != 1) output.div_(*coll_.factors.post);
    auto out = output.scalar_type() == dtypes_.orig ? output : output.to(dtypes_.orig);
    if (g.grad.defined())
      g.grad.add_(out);
    else
      g.grad = out;  // sharded gradients are views into this buffer
    notify("post_reduce", gi);
  }

  // _fsdp_state.py _root_post_backward_final_callback: post-backward for groups autograd did not
  // reach (the root and the embedding: their inputs need no gradient), then (is_last_backward,
  // the default) each state's finalize_backward; then the current stream waits the last
  // reduce-scatter event and reduce_scatter_state is dropped.
  void root_post_backward_final_callback() {
    auto& s = streams();
    for (int gi = 0; gi < int(groups_.size()); ++gi) {
      auto& g = groups_[size_t(gi)];
      if (!g.params.empty() && g.training != TrainingState::kPostBackward) group_post_backward(gi);
      g.training = TrainingState::kIdle;
      finalize_backward(gi);
    }
    post_forward_order_.clear();
    coll_.reduce_scatter_state.release(s, {s.current()});
    final_callback_queued_ = false;
  }

  // finalize_backward: _wait_for_post_backward; a mistargeted unshard without a wait is waited
  // (current_stream().wait_event(all_gather_event), and its work with async_op) and dropped.
  void finalize_backward(int gi) {
    auto& g = groups_[size_t(gi)];
    wait_for_post_backward(gi);
    if (g.all_gather) {
      streams().wait_event(streams().current(), g.all_gather->event);
      g.all_gather->work.wait();
      g.all_gather.reset();
    }
    g.post_forward_indices.clear();
  }

  EngineSpec spec_;
  Fsdp2Options opts_;
  common::Comm comm_;
  Dtypes dtypes_;
  Collectives coll_;  // the mesh's groups, divide factors, FSDPCommContext
  std::vector<Param> params_;
  std::vector<std::vector<int>> param_of_;  // [unit][spec index] -> params_ index
  std::vector<Group> groups_;               // forward order; groups_[0] is the root state
  std::unique_ptr<common::FusedAdamW> optimizer_;  // over every parameter's local tensor
  int embed_group_ = -1, tail_group_ = -1;
  std::vector<int> post_forward_order_;  // comm_ctx.post_forward_order
  bool iter_forward_root_ = false;
  bool final_callback_queued_ = false;
  models::RopeCache rope_;
  Fsdp2Observer observer_;
};

at::Tensor RegisterPostBackward::forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                                         Fsdp2Engine* engine, int64_t group) {
  ctx->saved_data["engine"] = reinterpret_cast<int64_t>(engine);
  ctx->saved_data["group"] = group;
  return input.view_as(input);
}

torch::autograd::variable_list RegisterPostBackward::backward(torch::autograd::AutogradContext* ctx,
                                                              torch::autograd::variable_list grads) {
  auto* engine = reinterpret_cast<Fsdp2Engine*>(ctx->saved_data["engine"].toInt());
  engine->post_backward_from_autograd(int(ctx->saved_data["group"].toInt()));
  return {grads[0], at::Tensor(), at::Tensor()};
}


}  // namespace

void set_observer(Engine& engine, Fsdp2Observer observer) {
  if (auto* f = dynamic_cast<Fsdp2Engine*>(&engine)) f->set_observer(std::move(observer));
}

std::vector<std::string> group_labels(const EngineSpec& spec) {
  std::vector<std::string> out;
  for (const auto& g : group_specs(spec.model, fsdp2_options_from_json(spec.options)))
    if (!g.params.empty()) out.push_back(g.label);
  return out;
}

BackendInfo backend_info() {
  BackendInfo info;
  info.name = "fsdp2";
  info.description = "FSDP2-mode: per-parameter Shard(0), PyTorch fully_shard semantics";
  info.precisions = {"fp32", "low", "mixed"};
  info.create = [](const EngineSpec& s, const runtime::World& w) { return std::make_unique<Fsdp2Engine>(s, w); };
  info.expected_bytes = closed_form_bytes;
  info.precision_plan = precision_plan;
  return info;
}

}  // namespace zb::backends::fsdp2
