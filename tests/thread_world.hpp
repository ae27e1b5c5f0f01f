// thread_world.hpp — test support: run W ranks as threads of this process over one HashStore
// (real Gloo groups, real collectives), and a single-process fp32 reference trainer built on
// torch::optim::AdamW — an implementation independent of the fused AdamW kernel the engines call.
#pragma once
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "backends/common/optim.hpp"
#include "backends/backend_info.hpp"
#include "backends/engine.hpp"
#include "bench/run/trainer.hpp"
#include "models/llama.hpp"

namespace zb::test_support {

// Runs fn(world) on `w` threads; rethrows the first exception.
inline void run_ranks(int w, const std::function<void(runtime::World&)>& fn) {
  // c10d's process-wide FlightRecorder is not safe for several ranks enqueueing from threads of
  // one process (it corrupts its map); real runs have one rank per process. Off before the first
  // group is created (the singleton reads this once).
  setenv("TORCH_FR_BUFFER_SIZE", "0", 1);
  at::set_num_threads(1);
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex m;
  for (int r = 0; r < w; ++r)
    threads.emplace_back([&, r] {
      try {
        auto world = runtime::init_world_on_store(store, r, w, at::kCPU, std::chrono::seconds(120));
        fn(world);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

// One engine trained on this rank with random tokens (seed 1): the engine and what it measured.
struct EngineRun {
  std::unique_ptr<backends::Engine> engine;
  bench::TrainResult result;
};
inline EngineRun train_on(runtime::World& world, const std::string& backend, const backends::EngineSpec& spec) {
  EngineRun run;
  run.engine = backends::create_engine(backend, spec, world);
  auto data = models::make_data_source("random", spec.model.vocab, 1);
  backends::common::Comm side(world.side_channel());
  run.result = bench::run_training(*run.engine, spec, *data, side);
  return run;
}

// Names "W<w>_accum<a>" for suites parameterised by (world size, grad-accum).
inline std::string world_accum_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return "W" + std::to_string(std::get<0>(info.param)) + "_accum" + std::to_string(std::get<1>(info.param));
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<at::Tensor> params;  // per unit, fp32 flat
};

// Trains `backend` on W thread-ranks and returns rank 0's loss curve and full parameters.
inline TrainedRun train_backend(const std::string& backend, const backends::EngineSpec& spec, int w) {
  TrainedRun out;
  std::mutex m;
  run_ranks(w, [&](runtime::World& world) {
    auto data = models::make_data_source(spec.train.data, spec.model.vocab, spec.train.seed);
    auto engine = backends::create_engine(backend, spec, world);
    backends::common::Comm side(world.side_channel());
    auto result = bench::run_training(*engine, spec, *data, side);
    auto params = engine->full_parameters();
    if (world.rank == 0) {
      std::lock_guard<std::mutex> lock(m);
      for (const auto& s : result.steps) out.losses.push_back(s.loss);
      out.params = params;
    }
  });
  return out;
}

// One process, the whole global batch (W x micro_batch samples per micro-batch), leaf
// parameters, torch's clip_grad_norm_ and torch::optim::AdamW. compute_dtype bf16 = the model
// loaded in bf16, fp32 master weights upcast from it and cast to bf16 for compute (the "mixed"
// reference of the precision study).
inline TrainedRun train_reference(const backends::EngineSpec& spec, int w, at::ScalarType compute_dtype = at::kFloat) {
  const auto& cfg = spec.model;
  const auto& t = spec.train;
  struct Leaves : models::UnitParamSource {
    std::vector<std::vector<at::Tensor>> units;
    at::ScalarType dtype = at::kFloat;
    std::vector<at::Tensor> unit_weights(int u) override {
      if (dtype == at::kFloat) return units[size_t(u)];
      std::vector<at::Tensor> c;
      for (auto& x : units[size_t(u)]) c.push_back(x.to(dtype));
      return c;
    }
  } leaves;
  leaves.dtype = compute_dtype;
  std::vector<at::Tensor> all;
  for (int u = 0; u < models::unit_count(cfg); ++u) {
    std::vector<at::Tensor> ws;
    auto init = models::init_unit_flat(cfg, u, t.seed);
    if (compute_dtype == at::kBFloat16) init = init.to(at::kBFloat16).to(at::kFloat);
    for (auto& x : models::unflatten_unit(cfg, u, init)) {
      ws.push_back(x.clone().requires_grad_(true));
      all.push_back(ws.back());
    }
    leaves.units.push_back(ws);
  }
  torch::optim::AdamW opt(all, torch::optim::AdamWOptions(t.lr)
                                   .betas({t.beta1, t.beta2})
                                   .eps(t.eps)
                                   .weight_decay(t.weight_decay));
  auto data = models::make_data_source(t.data, cfg.vocab, t.seed);
  auto rope = models::make_rope_cache(cfg, t.seq_len, compute_dtype, at::kCPU);
  TrainedRun out;
  for (int64_t step = 0; step < t.steps; ++step) {
    double loss_sum = 0;
    for (int64_t a = 0; a < t.grad_accum; ++a) {
      const int64_t global_mb = t.micro_batch * w;
      auto b = data->samples(models::first_sample_index(step, a, t.grad_accum, 0, 1, global_mb), global_mb, t.seq_len);
      models::ForwardOptions fo;
      fo.activation_checkpointing = t.activation_checkpointing;
      auto loss = models::forward_loss(cfg, leaves, b.tokens, b.targets, rope, fo);
      (loss / double(t.grad_accum)).backward();
      loss_sum += loss.item<double>();
    }
    if (t.grad_clip > 0) torch::nn::utils::clip_grad_norm_(all, t.grad_clip);
    for (auto& g : opt.param_groups()) g.options().set_lr(backends::common::lr_at(t, step));
    opt.step();
    opt.zero_grad();
    out.losses.push_back(loss_sum / double(t.grad_accum));
  }
  for (auto& u : leaves.units) {
    std::vector<at::Tensor> flat;
    for (auto& x : u) flat.push_back(x.detach().reshape({-1}));
    out.params.push_back(at::cat(flat));
  }
  return out;
}

// ||a - b|| / ||b|| over all parameters (Frobenius norms, in fp64).
inline double relative_param_error(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double num = 0, den = 0;
  for (size_t u = 0; u < b.size(); ++u) {
    num += (a[u].to(at::kDouble) - b[u].to(at::kDouble)).pow(2).sum().item<double>();
    den += b[u].to(at::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(num / den);
}

// `backend` trained on W ranks equals the single-process fp32 reference: loss per step and all
// parameters to 1e-5 relative.
inline void expect_matches_reference(const std::string& backend, const backends::EngineSpec& spec, int w) {
  const auto ref = train_reference(spec, w);
  const auto got = train_backend(backend, spec, w);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << "step " << i;
  EXPECT_LE(relative_param_error(got.params, ref.params), 1e-5);
}

inline backends::EngineSpec small_spec(int64_t grad_accum) {
  backends::EngineSpec s;
  s.model = models::preset("tiny");
  s.model.layers = 2;
  s.model.vocab = 256;
  s.train.micro_batch = 2;
  s.train.seq_len = 16;
  s.train.grad_accum = grad_accum;
  s.train.steps = 5;
  s.train.warmup = 1;
  s.train.lr = 1e-3;
  s.train.weight_decay = 0.1;
  s.train.grad_clip = 0.05;  // small enough to clip, so clipping is exercised
  s.train.data = "markov";
  return s;
}

}  // namespace zb::test_support
