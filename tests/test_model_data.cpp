// The decoder's forward/backward and checkpointing; the synthetic data's determinism and floor.
#include <gtest/gtest.h>

#include <cmath>

#include "models/data.hpp"
#include "models/llama.hpp"

using namespace zb::models;

namespace {
// Leaf parameters per unit: the simplest UnitParamSource.
struct LeafParams : UnitParamSource {
  std::vector<std::vector<at::Tensor>> units;
  LeafParams(const ModelConfig& cfg, uint64_t seed) {
    for (int u = 0; u < unit_count(cfg); ++u) {
      std::vector<at::Tensor> w;
      for (auto& t : unflatten_unit(cfg, u, init_unit_flat(cfg, u, seed))) w.push_back(t.clone().requires_grad_(true));
      units.push_back(w);
    }
  }
  std::vector<at::Tensor> unit_weights(int unit) override { return units[size_t(unit)]; }
};
}  // namespace

TEST(Model, InitialLossIsNearLogVocabAndGradientsFlowEverywhere) {
  const auto cfg = preset("tiny");
  LeafParams p(cfg, 7);
  MarkovData data(cfg.vocab, 1);
  auto b = data.samples(0, 2, 16);
  auto rope = make_rope_cache(cfg, 16, at::kFloat, at::kCPU);
  auto loss = forward_loss(cfg, p, b.tokens, b.targets, rope, {});
  EXPECT_NEAR(loss.item<double>(), std::log(double(cfg.vocab)), 0.1);
  loss.backward();
  for (const auto& u : p.units)
    for (const auto& w : u) {
      ASSERT_TRUE(w.grad().defined());
      EXPECT_GT(w.grad().abs().sum().item<double>(), 0.0);
    }
}

TEST(Model, ActivationCheckpointingGivesTheSameLossAndGradients) {
  auto cfg = preset("tiny");
  LeafParams a(cfg, 3), b(cfg, 3);
  MarkovData data(cfg.vocab, 1);
  auto batch = data.samples(10, 2, 16);
  auto rope = make_rope_cache(cfg, 16, at::kFloat, at::kCPU);
  auto la = forward_loss(cfg, a, batch.tokens, batch.targets, rope, {ActivationCheckpointing::none()});
  auto lb = forward_loss(cfg, b, batch.tokens, batch.targets, rope, {ActivationCheckpointing::full()});
  EXPECT_DOUBLE_EQ(la.item<double>(), lb.item<double>());
  la.backward();
  lb.backward();
  for (size_t u = 0; u < a.units.size(); ++u)
    for (size_t i = 0; i < a.units[u].size(); ++i)
      EXPECT_TRUE(at::allclose(a.units[u][i].grad(), b.units[u][i].grad(), 1e-5, 1e-7)) << "unit " << u << " param " << i;
}

TEST(Model, GqaAndMhaBothRun) {
  auto cfg = preset("tiny");
  cfg.kv_heads = cfg.heads;  // MHA
  LeafParams p(cfg, 1);
  RandomData data(cfg.vocab, 2);
  auto b = data.samples(0, 1, 8);
  auto loss = forward_loss(cfg, p, b.tokens, b.targets, make_rope_cache(cfg, 8, at::kFloat, at::kCPU), {});
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

TEST(Model, InitDependsOnSeedOnly) {
  const auto cfg = preset("tiny");
  EXPECT_TRUE(at::equal(init_unit_flat(cfg, 1, 5), init_unit_flat(cfg, 1, 5)));
  EXPECT_FALSE(at::equal(init_unit_flat(cfg, 1, 5), init_unit_flat(cfg, 1, 6)));
  EXPECT_FALSE(at::equal(init_unit_flat(cfg, 1, 5), init_unit_flat(cfg, 2, 5)));
}

TEST(Data, SamplesDependOnlyOnTheirGlobalIndex) {
  MarkovData data(512, 9);
  auto whole = data.samples(0, 8, 32);
  // Two ranks of 4 samples each see exactly the two halves of the global batch.
  auto r0 = data.samples(first_sample_index(0, 0, 1, 0, 2, 4), 4, 32);
  auto r1 = data.samples(first_sample_index(0, 0, 1, 1, 2, 4), 4, 32);
  EXPECT_TRUE(at::equal(at::cat({r0.tokens, r1.tokens}), whole.tokens));
  EXPECT_TRUE(at::equal(whole.targets.narrow(1, 0, 31), whole.tokens.narrow(1, 1, 31)));
  EXPECT_EQ(first_sample_index(3, 1, 2, 1, 4, 8), ((3 * 2 + 1) * 4 + 1) * 8);
}

TEST(Data, MarkovEntropyFloorMatchesTheEmpiricalConditionalEntropy) {
  MarkovData data(64, 4);
  const double floor = data.entropy_floor_nats();
  EXPECT_GT(floor, 0.1);
  EXPECT_LT(floor, std::log(8.0));  // at most 8 successors
  // Empirical H(next | current) from a long sample approaches the computed entropy rate.
  auto b = data.samples(0, 200, 500);
  auto tok = b.tokens.reshape({-1});
  auto nxt = b.targets.reshape({-1});
  std::vector<double> counts(64 * 64, 0), row(64, 0);
  auto* t = tok.data_ptr<int64_t>();
  auto* n = nxt.data_ptr<int64_t>();
  for (int64_t i = 0; i < tok.numel(); ++i) {
    counts[size_t(t[i] * 64 + n[i])] += 1;
    row[size_t(t[i])] += 1;
  }
  double h = 0;
  for (int s = 0; s < 64; ++s)
    for (int k = 0; k < 64; ++k) {
      const double c = counts[size_t(s * 64 + k)];
      if (c > 0) h -= c / double(tok.numel()) * std::log(c / row[size_t(s)]);
    }
  EXPECT_NEAR(h, floor, 0.03);
  RandomData r(100, 1);
  EXPECT_DOUBLE_EQ(r.entropy_floor_nats(), std::log(100.0));
}
