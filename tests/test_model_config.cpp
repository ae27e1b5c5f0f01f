// Parameter counts, FLOP formulas and the blog's MFU figure, from model_config alone.
#include <gtest/gtest.h>

#include <cmath>

#include "models/model_config.hpp"
#include "reports/metrics.hpp"
#include "runtime/errors.hpp"

using namespace zb::models;

TEST(ModelConfig, Granite7bHasTheHfParameterCount) {
  const auto n = count_params(preset("granite-7b"));
  EXPECT_EQ(n.total, 6738415616);
  EXPECT_EQ(n.embedding, 32000LL * 4096);
  EXPECT_EQ(n.non_embedding, 6738415616 - 32000LL * 4096);
}

TEST(ModelConfig, Llama2PresetsMatchPublishedCounts) {
  EXPECT_EQ(count_params(preset("llama2-7b")).total, 6738415616);
  EXPECT_EQ(count_params(preset("llama2-13b")).total, 13015864320);
  EXPECT_EQ(count_params(preset("llama2-70b")).total, 68976648192);  // GQA: 8 kv heads
}

TEST(ModelConfig, CpuPresetsAreTheAdvertisedSize) {
  const auto tiny = count_params(preset("tiny")).total;
  const auto small = count_params(preset("small")).total;
  EXPECT_GT(tiny, 500000);
  EXPECT_LT(tiny, 2000000);
  EXPECT_GT(small, 20000000);
  EXPECT_LT(small, 50000000);
}

TEST(ModelConfig, UnitsAreRootThenBlocksAndSumToTotal) {
  const auto cfg = preset("tiny");
  const auto units = unit_param_specs(cfg);
  ASSERT_EQ(int64_t(units.size()), cfg.layers + 1);
  EXPECT_EQ(units[0][0].name, "embedding");
  int64_t sum = 0;
  for (const auto& u : units)
    for (const auto& p : u) sum += p.numel();
  EXPECT_EQ(sum, count_params(cfg).total);
  // GQA shapes: wk/wv are [kv_heads * head_dim, hidden].
  EXPECT_EQ(units[1][2].shape, (std::vector<int64_t>{cfg.kv_heads * cfg.head_dim(), cfg.hidden}));
}

TEST(Flops, SixNAndPalmFormulas) {
  const auto cfg = preset("granite-7b");
  const auto f = flops_per_token(cfg, 4096, ActivationCheckpointing::none());
  EXPECT_DOUBLE_EQ(f.six_n, 6.0 * 6738415616.0);
  EXPECT_DOUBLE_EQ(f.palm, 6.0 * double(6738415616 - 32000LL * 4096) + 12.0 * 32 * 32 * 128 * 4096);
  EXPECT_DOUBLE_EQ(f.palm_recompute, f.palm);
  const auto fr = flops_per_token(cfg, 4096, ActivationCheckpointing::full());
  const double blocks = double(count_params(cfg).per_block * 32);
  EXPECT_DOUBLE_EQ(fr.palm_recompute, f.palm + 2.0 * blocks + 4.0 * 32 * 32 * 128 * 4096);
}

TEST(Flops, BlogGranite7bMfuIs041) {
  // FSDP vs DeepSpeed blog, Table 3: 3158.7 tokens/GPU/s on A100 (312 TFLOP/s) -> MFU 0.41.
  const auto f = flops_per_token(preset("granite-7b"), 4096, ActivationCheckpointing::none());
  const double mfu_6n = zb::reports::flops_utilisation(f.six_n, 3158.7, 312.0);
  EXPECT_NEAR(mfu_6n, 0.4093, 5e-5);
  EXPECT_DOUBLE_EQ(std::round(mfu_6n * 100) / 100, 0.41);
  // DeepSpeed's row: 3094.5 -> 0.40.
  EXPECT_DOUBLE_EQ(std::round(zb::reports::flops_utilisation(f.six_n, 3094.5, 312.0) * 100) / 100, 0.40);
}

TEST(ModelConfig, BadDimensionsAreUsageErrorsNamingTheFlag) {
  auto cfg = preset("tiny");
  cfg.kv_heads = 3;
  try {
    cfg.validate();
    FAIL() << "expected UsageError";
  } catch (const zb::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-heads 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(preset("gpt-5"), zb::UsageError);
}
