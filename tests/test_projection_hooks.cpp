// The projection reaches every backend through its descriptor (BackendInfo::analysis.projection,
// backends/common/projection_program.hpp): a backend registered with one line gets its own
// program scheduled and its own shard rule used, a backend without a program is refused naming
// the modelled ones, and each built-in backend's shard rule is its closed form's (the padding
// comes from the same function: a rule with the padding left out is caught).
#include <gtest/gtest.h>

#include "analysis/projection/schedule.hpp"
#include "backends/backend_info.hpp"
#include "runtime/errors.hpp"

using namespace zb;
using namespace zb::analysis::projection;
using backends::common::CollectiveKind;

namespace {
Calibration flat_calibration() {
  Calibration c;
  c.source = "test";
  c.pg_backend = "gloo";
  for (int k = 0; k < int(CollectiveKind::kCount); ++k) {
    CollectiveFit f;
    f.kind = CollectiveKind(k);
    f.dtype = "fp32";
    f.world_size = 2;
    f.alpha_s = 1e-3;
    f.busbw_gbps = 1.0;
    c.fits.push_back(f);
  }
  return c;
}

// A backend that is a copy of the first registered one under another name, with `hooks`.
backends::BackendInfo toy(const std::string& name, backends::common::ProjectionHooks hooks) {
  auto info = backends::registered_backends().front();
  info.name = name;
  info.analysis.projection = std::move(hooks);
  return info;
}

ScheduleInput input_for(const std::string& backend) {
  ScheduleInput in;
  in.backend = backend;
  in.precision = "fp32";
  in.model = models::preset("tiny");
  in.world = 2;
  return in;
}
}  // namespace

TEST(ProjectionHooks, ARegisteredBackendsOwnProgramAndShardRuleAreWhatTheProjectionUses) {
  backends::common::ProjectionHooks h;
  h.program = [](const backends::common::ProgramInput& in, const backends::common::CollectiveCost& cost) {
    backends::common::Program p;
    p.compute("toy step", 0.5);
    p.wait(p.issue(CollectiveKind::kAllReduce, "grads", 1 << 20,
                   cost(CollectiveKind::kAllReduce, "fp32", 1 << 20, in.world, in.nodes), true));
    return p;
  };
  h.shard_elements = [](const models::ModelConfig&, const nlohmann::json&, int world) { return int64_t(1000 / world); };
  h.per_unit_times = true;
  backends::register_backend(toy("toy_projected", h));

  const auto cal = flat_calibration();
  const auto p = build_program(input_for("toy_projected"), cal);
  ASSERT_EQ(p.actions().size(), 3u);
  EXPECT_EQ(p.actions()[0].name, "toy step");
  EXPECT_EQ(p.actions()[1].bytes, 1 << 20);
  // The collective is priced by the calibration through the callback.
  EXPECT_DOUBLE_EQ(p.actions()[1].duration_s, cal.collective_s(CollectiveKind::kAllReduce, "fp32", 1 << 20, 2, 1));
  EXPECT_TRUE(projection_supports("toy_projected"));
  EXPECT_EQ(shard_elements("toy_projected", models::preset("tiny"), nlohmann::json::object(), 4), 250);
  EXPECT_NE(modelled_backend_list().find("toy_projected"), std::string::npos);
  EXPECT_NE(per_unit_report_phrase().find("toy_projected"), std::string::npos);
}

TEST(ProjectionHooks, ABackendWithoutAProgramIsRefusedNamingTheModelledOnes) {
  backends::register_backend(toy("toy_unmodelled", {}));
  EXPECT_FALSE(projection_supports("toy_unmodelled"));
  EXPECT_FALSE(projection_supports("no_such_backend"));
  try {
    build_program(input_for("toy_unmodelled"), flat_calibration());
    FAIL() << "an unmodelled backend was scheduled";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'toy_unmodelled' has no modelled schedule ("), std::string::npos) << what;
    EXPECT_NE(what.find(modelled_backend_list()), std::string::npos) << what;
  }
  EXPECT_EQ(modelled_backend_list().find("toy_unmodelled"), std::string::npos);
  // No shard rule: every rank holds the whole model.
  EXPECT_EQ(shard_elements("toy_unmodelled", models::preset("tiny"), nlohmann::json::object(), 4),
            models::count_params(models::preset("tiny")).total);
}

// fp32: every built-in backend's optimizer states per rank are its shard elements x 8 bytes, so
// the projection's shard rule must equal the closed form's, padding included, at a world size
// that pads (3 divides none of tiny's unit sizes).
TEST(ProjectionHooks, EachBackendsShardRuleIsItsClosedFormsPaddingIncluded) {
  backends::EngineSpec spec;
  spec.model = models::preset("tiny");
  spec.precision = "fp32";
  int checked = 0;
  for (const auto& b : backends::registered_backends()) {
    if (!b.analysis.projection.shard_elements || !b.training.expected_bytes || b.name.rfind("toy_", 0) == 0) continue;
    for (int w : {1, 2, 3}) {
      // The elements one rank's optimizer steps over: AdamW's two fp32 states on each (ZeRO-1/2
      // keep more gradient than that, so the optimizer states are the measure).
      const int64_t closed = b.training.expected_bytes(spec, backends::Topology(w), 0).optimizer;
      EXPECT_EQ(b.analysis.projection.shard_elements(spec.model, nlohmann::json::object(), w) * 8, closed)
          << b.name << " W=" << w;
    }
    ++checked;
  }
  EXPECT_GE(checked, 4);
  // The planted fault: a rule that forgets the padding (floor instead of ceil per parameter) is
  // not any sharded backend's closed form at W=3, so the equality above would catch it.
  int64_t unpadded = 0;
  for (const auto& unit : models::unit_param_specs(spec.model))
    for (const auto& p : unit) unpadded += p.numel() / 3;
  for (const auto& b : backends::registered_backends())
    if (b.analysis.projection.shard_elements && b.analysis.projection.per_unit_times && b.name.rfind("toy_", 0) != 0) {
      EXPECT_NE(unpadded * 8, b.training.expected_bytes(spec, backends::Topology(3), 0).optimizer) << b.name;
    }
}

// A backend's options at another world size are its own rule (the descriptor's options_at_world),
// not the projection's: FSDP1 ran NO_SHARD at W = 1 and recorded the strategy asked for, which a
// projection to W > 1 schedules; at W = 1 the record stands. No other built-in backend rewrites
// its options.
TEST(ProjectionHooks, Fsdp1sRequestedStrategyIsItsOwnRuleAtAnotherWorldSize) {
  const nlohmann::json recorded = {{"sharding_strategy", "NO_SHARD"},
                                   {"sharding_strategy_requested", "SHARD_GRAD_OP"},
                                   {"sharding_strategy_note", "FSDP1 switches to NO_SHARD at world size 1"},
                                   {"limit_all_gathers", true}};
  const auto& at_world = backends::backend("fsdp").analysis.projection.options_at_world;
  ASSERT_TRUE(at_world);
  const auto at4 = at_world(recorded, 4);
  EXPECT_EQ(at4["sharding_strategy"], "SHARD_GRAD_OP");
  EXPECT_FALSE(at4.contains("sharding_strategy_requested"));
  EXPECT_FALSE(at4.contains("sharding_strategy_note"));
  EXPECT_EQ(at4["limit_all_gathers"], true);
  EXPECT_EQ(at_world(recorded, 1), recorded);
  for (const auto& b : backends::registered_backends()) {
    if (b.name != "fsdp") {
      EXPECT_FALSE(b.analysis.projection.options_at_world) << b.name;
    }
  }
}
