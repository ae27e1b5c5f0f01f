// ddp_engine.cpp — see ddp_engine.hpp. Semantics follow torch/nn/parallel/distributed.py and
// torch/csrc/distributed/c10d/reducer.cpp: parameters broadcast from rank 0 at construction,
// gradients divided by W then all-reduced in buckets of bucket_cap_mb (default 25 MiB).
#include "backends/backend_info.hpp"
#include "backends/ddp/ddp_engine.hpp"
#include "backends/ddp/ddp_config.hpp"
#include "backends/ddp/ddp_program.hpp"

#include <torch/csrc/autograd/variable.h>

#include "backends/common/forward_backward.hpp"
#include "backends/common/initial_weights.hpp"
#include "backends/common/optim.hpp"
#include "models/llama.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::ddp {

namespace {

struct Dtypes {
  at::ScalarType storage, compute;
};
Dtypes dtypes_for(const std::string& precision) {
  if (precision == "fp32") return {at::kFloat, at::kFloat};
  if (precision == "low") return {at::kBFloat16, at::kBFloat16};
  if (precision == "mixed") return {at::kFloat, at::kBFloat16};
  throw UsageError("--precision for ddp must be fp32, low or mixed, got '" + precision + "'");
}

double bucket_cap_mb(const EngineSpec& spec) { return ddp_options(spec.options).bucket_cap_mb; }

class DdpEngine final : public Engine, public models::UnitParamSource {
 public:
  DdpEngine(const EngineSpec& spec, const runtime::World& world)
      : spec_(spec), comm_(world), dtypes_(dtypes_for(spec.precision)) {
    at::NoGradGuard no_grad;
    const auto& cfg = spec_.model;
    const auto dev = world.device;
    const int64_t units = models::unit_count(cfg);
    std::vector<at::Tensor> init;
    // Every rank needs every weight: a sharded --model-dir load reads all of them too.
    for (int u = 0; u < units; ++u) init.push_back(common::initial_unit(spec_, u));
    flat_params_ = at::cat(init).to(dev, dtypes_.storage);  // [N]
    comm_.broadcast(flat_params_, 0);                       // DDP's _sync_module_states
    flat_grads_ = at::zeros_like(flat_params_);              // [N]
    int64_t offset = 0;
    for (int u = 0; u < units; ++u) {
      const int64_t n = init[size_t(u)].numel();
      auto pviews = models::unflatten_unit(cfg, u, flat_params_.narrow(0, offset, n));
      auto gviews = models::unflatten_unit(cfg, u, flat_grads_.narrow(0, offset, n));
      std::vector<at::Tensor> leaves;
      for (size_t i = 0; i < pviews.size(); ++i) {
        auto leaf = pviews[i].detach().requires_grad_(true);
        leaf.mutable_grad() = gviews[i];  // autograd accumulates in place into the flat buffer
        leaves.push_back(leaf);
      }
      leaves_.push_back(std::move(leaves));
      unit_offsets_.push_back(offset);
      offset += n;
    }
    // HF Trainer's default optimizer (torch.optim.AdamW(fused=True)) over the parameters.
    std::vector<at::Tensor> params;
    for (int u = 0; u < units; ++u) {
      for (const auto& w : leaves_[size_t(u)]) {
        params.push_back(w.detach());
        grads_.push_back(w.grad());
      }
    }
    optimizer_ = std::make_unique<common::AdamW>(params, common::adamw_options(spec_.train));
    optimizer_->set_measure_lost_updates(spec_.train.measure_lost_updates);
    rope_ = models::make_rope_cache(cfg, spec_.train.seq_len, dtypes_.compute, dev);
    comm_.reset_stats();
  }

  std::string name() const override { return "ddp"; }
  common::Comm& comm() override { return comm_; }
  // Checkpoints: the replicated flat parameters and the optimizer (docs/lifecycle.md).
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override {
    auto s = optimizer_->state("optim.");
    s.insert(s.begin(), {"params", flat_params_});
    return s;
  }
  void state_loaded() override { optimizer_->state_loaded(); }
  common::LostUpdates lost_updates() const override { return optimizer_->last_lost_updates(); }

  std::vector<at::Tensor> unit_weights(int unit) override {
    if (dtypes_.compute == dtypes_.storage) return leaves_[size_t(unit)];
    std::vector<at::Tensor> cast;
    for (const auto& w : leaves_[size_t(unit)]) cast.push_back(w.to(dtypes_.compute));  // differentiable
    return cast;
  }

  at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) override {
    auto loss =
        common::forward_backward(spec_.model, *this, batch, rope_, spec_.train.activation_checkpointing, loss_scale);
    // accelerate: non-final micro-batches under DDP.no_sync unless sync_each_batch.
    if (last_micro_batch || spec_.train.sync_each_batch) all_reduce_gradients();
    return loss;
  }

  double optimizer_step(const StepHyper& h) override {
    at::NoGradGuard no_grad;
    // accelerate's clip_grad_norm_ -> torch.nn.utils.clip_grad_norm_ (foreach) over the
    // replicated gradients: no collective.
    const auto norm = common::torch_clip_grad_norm_(grads_, spec_.train.grad_clip);
    optimizer_->step(grads_, h);
    flat_grads_.zero_();
    return norm.item<double>();
  }

  ModelStateBytes model_state_bytes() const override {
    ModelStateBytes b;
    b.params = int64_t(flat_params_.nbytes());
    b.grads = int64_t(flat_grads_.nbytes());
    b.optimizer = optimizer_->state_bytes();
    return b;
  }

  nlohmann::json resolved_options() const override {
    DdpResolved r;
    r.options = ddp_options(spec_.options);
    r.sync_each_batch = spec_.train.sync_each_batch;
    r.optimizer = config::adamw_description(spec_.train.adamw_impl, comm_.world().device.is_cuda());
    r.param_dtype = dtypes_.compute;
    r.storage_dtype = dtypes_.storage;
    return to_json(r);
  }

  std::vector<at::Tensor> full_parameters() override {
    std::vector<at::Tensor> out;
    const int64_t units = models::unit_count(spec_.model);
    for (int u = 0; u < units; ++u) {
      const int64_t end = u + 1 < units ? unit_offsets_[size_t(u + 1)] : flat_params_.numel();
      out.push_back(flat_params_.narrow(0, unit_offsets_[size_t(u)], end - unit_offsets_[size_t(u)]).to(at::kFloat).cpu());
    }
    return out;
  }

 private:
  // Buckets walk the flat buffer from the end (parameters whose gradients are ready first).
  void all_reduce_gradients() {
    at::NoGradGuard no_grad;
    const int64_t bucket_elems =
        std::max<int64_t>(1, int64_t(bucket_cap_mb(spec_) * 1024 * 1024) / int64_t(flat_grads_.element_size()));
    flat_grads_.div_(comm_.size());
    for (int64_t end = flat_grads_.numel(); end > 0; end -= bucket_elems) {
      const int64_t begin = std::max<int64_t>(0, end - bucket_elems);
      auto bucket = flat_grads_.narrow(0, begin, end - begin);
      comm_.all_reduce_sum(bucket, "grads");
    }
  }

  EngineSpec spec_;
  common::Comm comm_;
  Dtypes dtypes_;
  at::Tensor flat_params_, flat_grads_;
  std::vector<std::vector<at::Tensor>> leaves_;
  std::vector<int64_t> unit_offsets_;
  std::vector<at::Tensor> grads_;  // per-parameter views into flat_grads_
  std::unique_ptr<common::AdamW> optimizer_;
  models::RopeCache rope_;
};

}  // namespace

ModelStateBytes expected_bytes(const EngineSpec& spec, const Topology& /*topo*/, int /*rank*/) {
  const auto d = dtypes_for(spec.precision);
  const int64_t n = models::count_params(spec.model).total;
  const int64_t e = int64_t(c10::elementSize(d.storage));
  return {n * e, 0, n * e, 2 * n * e, 0, {}};
}

// DDP with torch.autocast's mixed precision: fp32 replicas (loaded in fp32), bf16 compute, the
// gradients accumulate into the fp32 leaves and are all-reduced in fp32 (reducer.cpp buckets
// are the parameters' dtype); "low" is the model loaded and kept in bf16.
PrecisionPlan precision_plan(const EngineSpec& spec) {
  const auto d = dtypes_for(spec.precision);
  PrecisionPlan p;
  p.load = p.params = p.reduce = p.grads = p.optimizer_states = d.storage;
  p.compute = d.compute;
  return p;
}

BackendInfo backend_info() {
  BackendInfo info;
  info.name = "ddp";
  info.description = "plain data parallel: full replica per rank, bucketed gradient all-reduce";
  info.precisions = {"fp32", "low", "mixed"};
  // -- training (bench/run): engine, closed form, estimate, dtypes, layout
  info.training.create = [](const EngineSpec& s, const runtime::World& w) { return std::make_unique<DdpEngine>(s, w); };
  info.training.expected_bytes = expected_bytes;
  info.training.estimate_peak = estimate_peak;  // ddp_estimate.cpp
  info.training.precision_plan = precision_plan;
  info.training.shard_layout = shard_layout;  // ddp_layout.cpp
  // -- config files and CLI flags (ddp_config.cpp)
  info.config.claim = config_claim;
  info.config.claim_text = "MULTI_GPU/MULTI_CPU/NO";
  info.config.read = read_config;
  info.config.flags = cli_flags();
  info.config.apply_flags = apply_flags;
  // -- analysis: option effects (ddp_config.cpp), projection program (ddp_program.cpp)
  info.analysis.option_effects = option_effects();
  info.analysis.projection = projection_hooks();
  return info;
}

}  // namespace zb::backends::ddp
