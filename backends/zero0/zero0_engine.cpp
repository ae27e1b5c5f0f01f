// zero0_engine.cpp — see zero0_engine.hpp for the semantics and the upstream followed (this file:
// the engine, its closed form, precision plan, shard layout and BackendInfo).
#include "backends/backend_info.hpp"
#include "backends/zero0/zero0_engine.hpp"
#include "backends/zero0/zero0_config.hpp"
#include "backends/zero0/zero0_crossval.hpp"

#include <ATen/ScalarOps.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "backends/deepspeed_family/deepspeed_option_effects.hpp"
#include "backends/ddp/ddp_engine.hpp"
#include "backends/common/forward_backward.hpp"
#include "backends/common/initial_weights.hpp"
#include "backends/common/optim.hpp"
#include "models/llama.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero0 {

std::vector<std::pair<int, int>> allreduce_buckets(const std::vector<int64_t>& numels, int64_t elements) {
  std::vector<std::pair<int, int>> out;
  int begin = 0;
  int64_t numel = 0;
  for (int i = 0; i < int(numels.size()); ++i) {
    numel += numels[size_t(i)];
    if (numel > elements) {  // allreduce_no_retain: the tensor that crosses the size is in the bucket
      out.push_back({begin, i + 1});
      begin = i + 1;
      numel = 0;
    }
  }
  if (begin < int(numels.size())) out.push_back({begin, int(numels.size())});
  return out;
}

namespace {

at::ScalarType dtype_of(const std::string& d) {
  return d == "bf16" ? at::kBFloat16 : d == "fp16" ? at::kHalf : at::kFloat;
}

// tensor.mul_(python_float): the scalar as a wrapped number, second operand (zero12_reduce.cpp
// explains why ATen's C++ mul_(Scalar) is not that call for a bf16 tensor).
void mul_py(const at::Tensor& t, double v) { t.mul_(at::native::wrapped_scalar_tensor(at::Scalar(v))); }

// The crossval model's module.parameters() order: model.embed_tokens, every block's weights in
// spec order, model.norm, lm_head — (unit, index) pairs.
std::vector<std::pair<int, int>> module_order(const models::ModelConfig& cfg) {
  const auto units = models::unit_param_specs(cfg);
  std::vector<std::pair<int, int>> order = {{0, 0}};
  for (int u = 1; u < int(units.size()); ++u)
    for (int i = 0; i < int(units[size_t(u)].size()); ++i) order.push_back({u, i});
  for (int i = 1; i < int(units[0].size()); ++i) order.push_back({0, i});
  return order;
}

// Test-only (tests/test_crossval.cpp): ZEROBENCH_TEST_ZERO0_PLANT=skip_init_step leaves out
// FP16_UnfusedOptimizer's construction-time optimizer step; the crossval must then disagree.
bool planted(const char* fault) {
  const char* p = std::getenv("ZEROBENCH_TEST_ZERO0_PLANT");
  return p && std::string(p) == fault;
}

class Zero0Engine final : public Engine, public models::UnitParamSource {
 public:
  Zero0Engine(const EngineSpec& spec, const runtime::World& world)
      : spec_(spec), opts_(zero0_options(spec.options)), comm_(world) {
    at::NoGradGuard no_grad;
    check_precision(opts_, spec_.precision);
    model_ = dtype_of(spec_.precision);
    comm_dtype_ = opts_.communication_data_type.empty() ? model_ : dtype_of(opts_.communication_data_type);
    const auto& cfg = spec_.model;
    const auto dev = world.device;
    const auto specs = models::unit_param_specs(cfg);
    // Offsets in module.parameters() order, one buffer for the parameters and one for their
    // gradients (each p.grad a view; autograd accumulates into it as into p.grad).
    std::vector<std::vector<int64_t>> offset(specs.size());
    for (size_t u = 0; u < specs.size(); ++u) offset[u].assign(specs[u].size(), 0);
    int64_t n = 0;
    for (const auto& [u, i] : module_order(cfg)) {
      offset[size_t(u)][size_t(i)] = n;
      numels_.push_back(specs[size_t(u)][size_t(i)].numel());
      n += numels_.back();
    }
    const auto opts = at::TensorOptions().dtype(model_).device(dev);
    flat_params_ = at::zeros({n}, opts);
    flat_grads_ = at::zeros({n}, opts);
    for (int u = 0; u < int(specs.size()); ++u) {
      const auto init = common::initial_unit(spec_, u);
      int64_t off = 0;
      for (size_t i = 0; i < specs[size_t(u)].size(); ++i) {
        const int64_t k = specs[size_t(u)][i].numel();
        flat_params_.narrow(0, offset[size_t(u)][i], k).copy_(init.narrow(0, off, k));
        off += k;
      }
    }
    comm_.broadcast(flat_params_, 0, "params");  // DeepSpeedEngine._broadcast_model
    leaves_.resize(specs.size());
    for (int u = 0; u < int(specs.size()); ++u)
      for (size_t i = 0; i < specs[size_t(u)].size(); ++i) {
        const auto& s = specs[size_t(u)][i];
        auto leaf = flat_params_.narrow(0, offset[size_t(u)][i], s.numel()).view(s.shape).detach().requires_grad_(true);
        leaf.mutable_grad() = flat_grads_.narrow(0, offset[size_t(u)][i], s.numel()).view(s.shape);
        leaves_[size_t(u)].push_back(leaf);
      }
    for (const auto& [u, i] : module_order(cfg)) {
      params_.push_back(leaves_[size_t(u)][size_t(i)].detach());
      grads_.push_back(leaves_[size_t(u)][size_t(i)].grad());
    }
    const auto adamw = common::adamw_options(spec_.train);
    if (model_ == at::kFloat) {
      optimizer_ = std::make_unique<common::AdamW>(params_, adamw);  // the basic optimizer, unwrapped
    } else {
      // FP16_UnfusedOptimizer: fp32_groups = [p.clone().float().detach() for p in group].
      master_ = flat_params_.to(at::kFloat);
      masters_ = views(master_);
      optimizer_ = std::make_unique<common::AdamW>(masters_, adamw);
      // initialize_optimizer_states: zero gradients, then optimizer.step() at the lr the optimizer
      // was built with (HF's scheduler, if any, set its step-0 lr before deepspeed.initialize).
      if (!planted("skip_init_step")) {
        const auto& t = spec_.train;
        const double lr0 = t.lr_schedule.rfind("hf:", 0) == 0 ? common::lr_at(t, 0) : t.lr;
        // The betas it was built with: DeepSpeed's scheduler (OneCycle's betas) comes after.
        optimizer_->step(views(at::zeros_like(master_)), common::configured_hyper(t, lr0));
      }
      if (model_ == at::kHalf) scaler_ = std::make_unique<common::LossScaler>(common::LossScaler::deepspeed_unfused(opts_.fp16));
    }
    optimizer_->set_measure_lost_updates(spec_.train.measure_lost_updates);
    rope_ = models::make_rope_cache(cfg, spec_.train.seq_len, model_, dev);
    comm_.reset_stats();
  }

  std::string name() const override { return "zero0"; }
  common::Comm& comm() override { return comm_; }
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override {
    auto s = optimizer_->state("optim.");
    if (master_.defined()) s.insert(s.begin(), {"fp32_master", master_});
    s.insert(s.begin(), {"params", flat_params_});
    return s;
  }
  void state_loaded() override { optimizer_->state_loaded(); }
  common::LostUpdates lost_updates() const override { return optimizer_->last_lost_updates(); }
  LossScaleStep loss_scale_step() const override { return scale_step_; }

  std::vector<at::Tensor> unit_weights(int unit) override { return leaves_[size_t(unit)]; }

  at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) override {
    // engine.py backward: loss / gas only (scale_if_loss is for a ZeROOptimizer, not FP16_UnfusedOptimizer).
    auto loss = common::forward_backward(spec_.model, *this, batch, rope_, spec_.train.activation_checkpointing, loss_scale);
    if (last_micro_batch) allreduce_gradients();  // _backward_epilogue at the boundary
    return loss;
  }

  double optimizer_step(const StepHyper& h) override {
    at::NoGradGuard no_grad;
    const double norm = model_ == at::kFloat ? step_fp32(h) : step_unfused(h);
    flat_grads_.zero_();  // zero_grad (set_to_none)
    return norm;
  }

  ModelStateBytes model_state_bytes() const override {
    ModelStateBytes b;
    b.params = int64_t(flat_params_.nbytes());
    b.grads = int64_t(flat_grads_.nbytes());
    if (master_.defined()) b.master_params = int64_t(master_.nbytes());
    b.optimizer = optimizer_->state_bytes();
    return b;
  }

  nlohmann::json resolved_options() const override {
    Zero0Resolved r;
    r.options = opts_;
    r.precision.model_dtype = model_;
    r.precision.communication_data_type = comm_dtype_;
    r.precision.grad_accum_dtype = model_;  // DeepSpeed refuses any other at stage 0 (check_precision)
    r.allreduce_bucket_elements = kAllreduceBucketElements;
    r.allreduce_buckets = int64_t(allreduce_buckets(numels_, kAllreduceBucketElements).size());
    r.optimizer_wrapper = model_ == at::kFloat ? "none (the basic optimizer)" : "FP16_UnfusedOptimizer";
    r.optimizer = config::adamw_description(spec_.train.adamw_impl, comm_.world().device.is_cuda()) +
                  (model_ == at::kFloat ? " on the parameters" : " on per-parameter fp32 masters");
    if (scaler_) r.precision.loss_scaler = scaler_->kind_name();
    return to_json(r);
  }

  std::vector<at::Tensor> full_parameters() override {
    std::vector<at::Tensor> out;
    for (const auto& unit : leaves_) {
      std::vector<at::Tensor> parts;
      for (const auto& w : unit) parts.push_back(w.detach().reshape(-1));
      out.push_back(at::cat(parts).to(at::kFloat).cpu());
    }
    return out;
  }

 private:
  std::vector<at::Tensor> views(const at::Tensor& flat) const {  // per parameter, module order
    std::vector<at::Tensor> out;
    int64_t off = 0;
    for (int64_t k : numels_) {
      out.push_back(flat.narrow(0, off, k));
      off += k;
    }
    return out;
  }

  // buffered_allreduce_fallback -> allreduce_no_retain -> allreduce_and_copy -> allreduce_bucket.
  // The flattened bucket of consecutive gradients is a narrow of the gradient buffer.
  void allreduce_gradients() {
    at::NoGradGuard no_grad;
    const int W = comm_.size();
    int64_t begin = 0;
    std::vector<int64_t> starts = {0};
    for (int64_t k : numels_) starts.push_back(starts.back() + k);
    for (const auto& [a, b] : allreduce_buckets(numels_, kAllreduceBucketElements)) {
      begin = starts[size_t(a)];
      auto bucket = flat_grads_.narrow(0, begin, starts[size_t(b)] - begin);
      at::Tensor t = bucket.scalar_type() != comm_dtype_ ? bucket.to(comm_dtype_) : bucket;
      comm_.all_reduce_sum(t, "grads");
      if (double(W) != 1.0) mul_py(t, 1.0 / double(W));  // predivide factor 1.0 / dp_world_size
      if (!t.is_same(bucket)) bucket.copy_(t);
    }
  }

  // fp32: _take_model_step -> clip_fp32_gradients (gradient_clipping > 0), then optimizer.step().
  double step_fp32(const StepHyper& h) {
    std::vector<at::Tensor> norms;
    for (const auto& g : grads_) norms.push_back(g.to(at::kFloat).norm(2));
    at::Tensor total = at::stack(norms).pow(2.0).sum().to(at::kFloat).pow(0.5);
    const double clip = spec_.train.grad_clip;
    if (clip > 0) {
      // runtime/utils.py clip_grad_norm_: total * 1.0 / W, all-reduced over the data-parallel group.
      at::Tensor scaled = total * 1.0 / double(comm_.size());
      comm_.all_reduce_sum(scaled, "grad_norm");
      total = scaled;
      const auto coef = at::min(at::ones({1}, total.options()), at::full({1}, clip, total.options()) / (total + 1e-6));
      for (const auto& g : grads_) g.mul_(coef);
    }
    // Without clipping DeepSpeed computes no norm (get_global_grad_norm is None): the one reported
    // is the same formula over the reduced gradients, without the all-reduce.
    optimizer_->step(grads_, h);
    note_step(false);
    return total.item<double>();
  }

  // FP16_UnfusedOptimizer.step (bf16 and fp16).
  double step_unfused(const StepHyper& h) {
    bool overflow = false;  // CheckOverflow.check: local (no collective without mpu / MoE)
    for (const auto& g : grads_)
      if (!at::isfinite(g).all().item<bool>()) overflow = true;
    double global = std::numeric_limits<double>::infinity();
    if (!overflow) {
      // get_weight_norm: total_norm += p.float().norm(2) ** 2 (fp32 tensors), then
      // FloatTensor([float(total)]).item() ** (1. / 2) in double; -1 when not finite.
      at::Tensor sum;
      for (const auto& g : grads_) {
        const auto sq = g.to(at::kFloat).norm(2).pow(2.0);
        sum = sum.defined() ? sum.add_(sq) : sq + 0.0;
      }
      double n1 = std::pow(double(sum.item<float>()), 1.0 / 2.0);
      if (!std::isfinite(n1)) n1 = -1;
      // get_global_norm: sqrt(0.0 + norm ** 2.0); inf when invalid.
      if (n1 >= 0) global = std::sqrt(0.0 + std::pow(n1, 2.0));
    }
    if (overflow || !std::isfinite(global)) {  // _skip_invalid_grad_norm
      note_step(true);
      return std::numeric_limits<double>::infinity();
    }
    note_step(false);  // _update_scale(False) before unscale_and_clip_grads
    const double scale = scaler_ ? scaler_->scale() : 1.0;
    double combined = scale;
    if (spec_.train.grad_clip > 0) {
      const double c = ((global / scale) + 1e-6) / spec_.train.grad_clip;
      if (c > 1) combined = c * scale;
    }
    const auto grads32 = views(flat_grads_.to(at::kFloat));  // fp16_param.grad.to(fp32), freed after the step
    for (const auto& g : grads32) mul_py(g, 1. / combined);
    optimizer_->step(grads32, h);
    flat_params_.copy_(master_);  // fp16_param.data.copy_(fp32_param.data)
    return global;
  }

  // The step's loss-scale record (fp16: the scale this step used and the update; bf16/fp32: only
  // a skipped step carries one, a static scale of 1).
  void note_step(bool overflow) {
    scale_step_ = {};
    if (!scaler_) {
      if (!overflow) return;
      scale_step_.enabled = true;
      scale_step_.kind = "static";
      scale_step_.scale = scale_step_.next_scale = 1.0;
      scale_step_.overflow = scale_step_.skipped = true;
      return;
    }
    scale_step_.enabled = true;
    scale_step_.kind = opts_.fp16.loss_scale > 0 ? "static" : "dynamic";
    scale_step_.scale = scaler_->scale();
    scale_step_.overflow = overflow;
    scaler_->update(overflow);
    scale_step_.next_scale = scaler_->scale();
    scale_step_.skipped = overflow;  // _skip_invalid_grad_norm whatever the scale kind
  }

  EngineSpec spec_;
  Zero0Options opts_;
  common::Comm comm_;
  at::ScalarType model_ = at::kFloat, comm_dtype_ = at::kFloat;
  std::vector<int64_t> numels_;                  // module order
  at::Tensor flat_params_, flat_grads_;          // module order, model dtype
  std::vector<std::vector<at::Tensor>> leaves_;  // by unit, spec order
  std::vector<at::Tensor> params_, grads_;       // module order
  at::Tensor master_;                            // bf16/fp16: fp32_groups, module order
  std::vector<at::Tensor> masters_;
  std::unique_ptr<common::AdamW> optimizer_;
  std::unique_ptr<common::LossScaler> scaler_;  // fp16 only
  LossScaleStep scale_step_;
  models::RopeCache rope_;
};

// DeepSpeed ZeRO stage 0: the model in its dtype, gradients and their reduction in it
// (communication_data_type may change the reduction); bf16/fp16 keep an fp32 master.
PrecisionPlan precision_plan(const EngineSpec& spec) {
  const auto& o = zero0_options(spec.options);
  check_precision(o, spec.precision);
  PrecisionPlan p;
  p.load = p.params = p.compute = p.grads = dtype_of(spec.precision);
  p.reduce = o.communication_data_type.empty() ? p.params : dtype_of(o.communication_data_type);
  p.master = spec.precision == "fp32" ? std::optional<at::ScalarType>() : at::kFloat;
  p.optimizer_states = at::kFloat;
  return p;
}

// BackendInfo::analysis.option_effects: the DeepSpeed family's sentences and stage 0's own keys
// (runtime/engine.py: no ZeRO optimizer; allreduce_gradients buckets the gradients).
std::vector<OptionEffect> zero0_option_effects() {
  std::vector<OptionEffect> e = deepspeed_family::deepspeed_option_effects();
  e.insert(e.end(), {
      {"allreduce_bucket_elements",
       "elements per gradient all-reduce bucket (DeepSpeed's fixed 5e8): how many all-reduces a step issues"},
      {"allreduce_buckets", "gradient all-reduces one step issues (the buckets)"},
      {"fused_adam",
       "DeepSpeed's FusedAdam (an optimizer section without torch_adam) instead of torch AdamW: another "
       "kernel, the same update up to rounding"},
      {"optimizer_wrapper",
       "the wrapper DeepSpeed puts around the optimizer (fp16: FP16_UnfusedOptimizer's masters and loss scaling)"},
  });
  return e;
}

}  // namespace

// Stage 0 shards nothing: every rank holds a whole replica and the gradient all-reduce runs over
// the world, DDP's layout.
ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo) { return ddp::shard_layout(spec, topo); }

// At the end of the last micro-batch's backward: every parameter and its gradient in the model
// dtype, fp32 masters (bf16/fp16) and two fp32 AdamW states — the same on every rank.
ModelStateBytes expected_bytes(const EngineSpec& spec, const Topology& /*topo*/, int /*rank*/) {
  const auto& o = zero0_options(spec.options);
  check_precision(o, spec.precision);
  const int64_t n = models::count_params(spec.model).total;
  const int64_t e = int64_t(c10::elementSize(dtype_of(spec.precision)));
  ModelStateBytes b;
  b.params = n * e;
  b.grads = n * e;
  b.master_params = spec.precision == "fp32" ? 0 : n * 4;
  b.optimizer = 2 * n * 4;
  return b;
}

BackendInfo backend_info() {
  BackendInfo info;
  info.name = "zero0";
  info.description = "ZeRO-0: DeepSpeed without partitioning: whole params, gradients, fp32 master and optimizer "
                     "states on every rank, bucketed gradient all-reduce (DeepSpeed stage 0)";
  info.precisions = {"fp32", "bf16", "fp16"};
  // -- training (bench/run): engine, closed form, estimate, dtypes, layout
  info.training.create = [](const EngineSpec& s, const runtime::World& w) {
    return std::make_unique<Zero0Engine>(s, w);
  };
  info.training.expected_bytes = expected_bytes;
  info.training.estimate_peak = estimate_peak;  // zero0_estimate.cpp
  info.training.precision_plan = precision_plan;
  info.training.shard_layout = shard_layout;
  // -- config files (zero0_config.cpp): DeepSpeed files of stage 0
  info.config.claim = config_claim;
  info.config.claim_text = "";  // DEEPSPEED is zero3's text; a second reader of DeepSpeed files
  info.config.read = read_config;
  // No flags of its own: the options completed (defaults written in) and checked for the precision.
  info.config.apply_flags = [](const FlagValues&, bool, EngineSpec& spec, config::ConfigNotes&) {
    const Zero0Options o = zero0_options(spec.options);  // the file's struct, or no options parsed
    check_precision(o, spec.precision);
    spec.options = o;
  };
  // -- analysis: the keys every DeepSpeed stage shares and stage 0's own (zero0_option_effects)
  info.analysis.option_effects = zero0_option_effects();
  // -- crossval (zero0_crossval.cpp): real DeepSpeed stage 0 through run_deepspeed.py
  info.crossval = crossval_reference();
  return info;
}

}  // namespace zb::backends::zero0
