// toy_backend.cpp — see toy_backend.hpp. The engine keeps a full fp32 replica per rank (weights
// broadcast from rank 0, as DDP's _sync_module_states), averages each parameter's gradient with its
// own all-reduce after the last micro-batch (DDP with no buckets), clips by the global norm and
// steps AdamW with the backends' common optimizer.
#include "tests/toy_backend/toy_backend.hpp"

#include "backends/common/comm.hpp"
#include "backends/common/forward_backward.hpp"
#include "backends/common/initial_weights.hpp"
#include "backends/common/optim.hpp"
#include "backends/common/projection_program.hpp"
#include "backends/ddp/ddp_engine.hpp"
#include "models/llama.hpp"
#include "runtime/errors.hpp"

namespace zb::toy {

namespace {
using backends::EngineSpec;
using backends::ModelStateBytes;

class ToyEngine final : public backends::Engine, public models::UnitParamSource {
 public:
  ToyEngine(const EngineSpec& spec, const runtime::World& world) : spec_(spec), comm_(world) {
    at::NoGradGuard no_grad;
    for (int u = 0; u < int(models::unit_count(spec_.model)); ++u) {
      auto flat = backends::common::initial_unit(spec_, u).to(world.device, at::kFloat);
      comm_.broadcast(flat, 0);
      std::vector<at::Tensor> leaves;
      for (auto& w : models::unflatten_unit(spec_.model, u, flat)) {
        auto leaf = w.detach().requires_grad_(true);
        leaf.mutable_grad() = at::zeros_like(leaf);
        params_.push_back(leaf.detach());
        grads_.push_back(leaf.grad());
        leaves.push_back(std::move(leaf));
      }
      units_.push_back(std::move(leaves));
      flats_.push_back(flat);
    }
    optimizer_ = std::make_unique<backends::common::AdamW>(params_, backends::common::adamw_options(spec_.train));
    rope_ = models::make_rope_cache(spec_.model, spec_.train.seq_len, at::kFloat, world.device);
    comm_.reset_stats();
  }

  std::string name() const override { return "toy"; }
  backends::common::Comm& comm() override { return comm_; }
  backends::common::LostUpdates lost_updates() const override { return {}; }
  std::vector<at::Tensor> unit_weights(int unit) override { return units_[size_t(unit)]; }

  at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) override {
    auto loss = backends::common::forward_backward(spec_.model, *this, batch, rope_, spec_.train.activation_checkpointing,
                                                   loss_scale);
    if (last_micro_batch || spec_.train.sync_each_batch) {
      at::NoGradGuard no_grad;
      for (auto& g : grads_) {  // one collective per parameter: no buckets
        g.div_(comm_.size());
        comm_.all_reduce_sum(g, "grads");
      }
    }
    return loss;
  }

  double optimizer_step(const backends::StepHyper& h) override {
    at::NoGradGuard no_grad;
    const auto norm = backends::common::torch_clip_grad_norm_(grads_, spec_.train.grad_clip);
    optimizer_->step(grads_, h);
    for (auto& g : grads_) g.zero_();
    return norm.item<double>();
  }

  ModelStateBytes model_state_bytes() const override {
    ModelStateBytes b;
    for (const auto& p : params_) b.params += int64_t(p.nbytes());
    for (const auto& g : grads_) b.grads += int64_t(g.nbytes());
    b.optimizer = optimizer_->state_bytes();
    return b;
  }

  nlohmann::json resolved_options() const override {
    return {{"bucketing", "none: one all-reduce per parameter tensor"}, {"optimizer", "torch.optim.AdamW(fused=True)"}};
  }

  std::vector<at::Tensor> full_parameters() override {
    std::vector<at::Tensor> out;
    for (const auto& f : flats_) out.push_back(f.to(at::kFloat).cpu());
    return out;
  }

 private:
  EngineSpec spec_;
  backends::common::Comm comm_;
  std::vector<std::vector<at::Tensor>> units_;
  std::vector<at::Tensor> flats_, params_, grads_;
  std::unique_ptr<backends::common::AdamW> optimizer_;
  models::RopeCache rope_;
};

// The projection's program of one step (analysis/projection simulates it): the micro-batches'
// forward and backward, then one all-reduce per parameter tensor, in the engine's order, each
// waited at once, then the optimizer.
backends::common::Program toy_program(const backends::common::ProgramInput& in,
                                      const backends::common::CollectiveCost& cost) {
  using backends::common::CollectiveKind;
  double fwd = 0, bwd = 0;
  for (double v : in.costs.forward_s) fwd += v;
  for (double v : in.costs.backward_s) bwd += v;
  backends::common::Program p;
  for (int64_t m = 0; m < in.train.grad_accum; ++m) {
    p.compute("F", fwd);
    p.compute("B", bwd);
  }
  for (const auto& unit : models::unit_param_specs(in.model))
    for (const auto& param : unit) {
      const int64_t bytes = 4 * param.numel();
      p.wait(p.issue(CollectiveKind::kAllReduce, "grads", bytes,
                     cost(CollectiveKind::kAllReduce, "fp32", bytes, in.world, in.nodes), true));
    }
  p.compute("optimizer", in.costs.optimizer_s);
  p.compute("other", in.costs.other_s);
  return p;
}

// Parameters, gradients and AdamW's two states, all fp32 and whole on every rank.
ModelStateBytes expected_bytes(const EngineSpec& spec, const backends::Topology& /*topo*/, int /*rank*/) {
  const int64_t n = models::count_params(spec.model).total;
  return {4 * n, 0, 4 * n, 8 * n, 0, {}};
}

}  // namespace

backends::BackendInfo backend_info() {
  backends::BackendInfo info;
  info.name = "toy";
  info.description = "tests/ toy: data parallel without bucketing (one all-reduce per parameter), fp32";
  info.precisions = {"fp32"};
  // -- training: the engine, its closed form, DDP's estimate, fp32 everywhere
  info.training.create = [](const EngineSpec& s, const runtime::World& w) { return std::make_unique<ToyEngine>(s, w); };
  info.training.expected_bytes = expected_bytes;
  // The replica, gradients and AdamW states DDP holds, and its transients: DDP's estimate (the
  // per-parameter all-reduces work in place, as its buckets do).
  info.training.estimate_peak = backends::ddp::estimate_peak;
  info.training.precision_plan = [](const EngineSpec&) {
    backends::PrecisionPlan p;
    p.load = p.params = p.compute = p.reduce = p.grads = p.optimizer_states = at::kFloat;
    return p;
  };
  // -- analysis: its step for `project`
  info.analysis.projection.program = toy_program;  // shard_elements empty: the whole model on every rank
  return info;
}

}  // namespace zb::toy
