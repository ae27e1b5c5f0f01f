// ddp on W Gloo ranks equals the single-process reference (fp32, 5 AdamW steps, <= 1e-5 rel).
#include <gtest/gtest.h>

#include "backends/backend_info.hpp"
#include "tests/thread_world.hpp"

using namespace zb;

class DdpParity : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(DdpParity, MatchesSingleProcessReference) {
  const auto [w, accum] = GetParam();
  auto spec = test_support::small_spec(accum);
  spec.precision = "fp32";
  const auto ref = test_support::train_reference(spec, w);
  const auto got = test_support::train_backend("ddp", spec, w);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << "step " << i;
  EXPECT_LE(test_support::relative_param_error(got.params, ref.params), 1e-5);
  // The run really trained: parameters moved away from init.
  EXPECT_GT(test_support::relative_param_error(got.params, test_support::train_reference([&] {
              auto s = spec;
              s.train.steps = 0;
              return s;
            }(), w).params),
            1e-4);
}

INSTANTIATE_TEST_SUITE_P(WorldSizesAndAccumulation, DdpParity,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values(1, 2)),
                         test_support::world_accum_name);

TEST(DdpMemory, EngineOwnedBytesEqualTheClosedForm) {
  for (const std::string precision : {"fp32", "low", "mixed"}) {
    auto spec = test_support::small_spec(1);
    spec.precision = precision;
    spec.train.steps = 1;
    spec.train.warmup = 0;
    test_support::run_ranks(2, [&](runtime::World& world) {
      auto [engine, r] = test_support::train_on(world, "ddp", spec);
      EXPECT_EQ(r.model_state_bytes, backends::backend("ddp").training.expected_bytes(spec, 2, world.rank))
          << precision;
      // Comm per step: the flat gradient all-reduced once (one bucket: far below 25 MiB).
      const auto& ar = r.comm_last_step[size_t(backends::common::CollectiveKind::kAllReduce)];
      EXPECT_EQ(ar.count, 1);
      EXPECT_EQ(ar.bytes, r.model_state_bytes.grads);
    });
  }
}
