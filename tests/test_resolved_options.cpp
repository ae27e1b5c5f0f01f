// test_resolved_options.cpp — each backend's resolved-options record (<X>Resolved in
// backends/<x>/<x>_options.hpp, ddp_config.hpp or zero0_config.hpp: what its engine's
// resolved_options() writes as the report's config.backend.options, and what its projection
// program and crossval rules read) against reports zerobench wrote: every committed cpu-smoke
// baseline's options, and zero0's (tests/data/resolved/zero0_reports.json: zero0 has no baseline
// cell), read into the record and written back is the same JSON (one mapping both ways: a key the
// writer forgets or the reader drops is caught), the record's typed fields hold what the report
// says, and zero0's engine writes today what those reports hold.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "backends/ddp/ddp_config.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "backends/zero12/zero12_options.hpp"
#include "backends/zero0/zero0_config.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "tests/build_paths.hpp"
#include "tests/thread_world.hpp"

using namespace zb::backends;
using json = nlohmann::json;

namespace {
const std::string kResolvedSmoke = std::string(zb::bench::source_dir()) + "/reports/baselines/cpu-smoke/";

// zero0's reports (config.backend of `zerobench run` reports, the command in the file's "source").
const json& zero0_reports() {
  static const json reports = [] {
    std::ifstream in(std::string(zb::bench::source_dir()) + "/tests/data/resolved/zero0_reports.json");
    EXPECT_TRUE(in.good());
    return json::parse(in)["reports"];
  }();
  return reports;
}
json zero0_report_options(const std::string& report) { return zero0_reports().at(report)["config"]["backend"]["options"]; }

json baseline_options(const std::string& cell, std::string* backend = nullptr) {
  std::ifstream in(kResolvedSmoke + cell + ".json");
  EXPECT_TRUE(in.good()) << cell;
  const auto report = json::parse(in);
  if (backend) *backend = report["config"]["backend"]["name"].get<std::string>();
  return report["config"]["backend"]["options"];
}

// The backend's record read from `o` and written back.
json resolved_round_trip(const std::string& backend, const json& o) {
  if (backend == "ddp") return to_json(ddp::ddp_resolved_from_json(o));
  if (backend == "fsdp") return to_json(fsdp::fsdp_resolved_from_json(o));
  if (backend == "fsdp2") return to_json(fsdp2::fsdp2_resolved_from_json(o));
  if (backend == "zero1" || backend == "zero2")
    return to_json(zero12::zero12_resolved_from_json(o, backend == "zero1" ? 1 : 2));
  if (backend == "zero3") return to_json(zero3::zero3_resolved_from_json(o));
  if (backend == "zero0") return to_json(zero0::zero0_resolved_from_json(o));
  ADD_FAILURE() << "no resolved record for backend " << backend;
  return json();
}

const char* const kResolvedCells[] = {
    "ddp_fp32", "ddp_low", "ddp_mixed", "fsdp2_fp32", "fsdp2_low", "fsdp2_mixed", "fsdp2_mixed_fsdp2-grouping-accelerate",
    "fsdp2_mixed_fsdp2-offload-policy-cpu", "fsdp_fp16", "fsdp_fp32", "fsdp_low", "fsdp_mixed",
    "fsdp_mixed_fsdp-offload-params-true", "fsdp_mixed_sharding-strategy-SHARD-GRAD-OP", "zero1_bf16", "zero2_bf16",
    "zero2_bf16_zero-offload-optimizer-cpu", "zero2_fp16", "zero2_fp32", "zero3_bf16",
    "zero3_bf16_zero3-offload-optimizer-cpu", "zero3_bf16_zero3-offload-param-cpu", "zero3_fp16", "zero3_fp32"};
}  // namespace

// Planted: a key left out of a writer (e.g. zero3's sub_groups, fsdp's cpu_offload, zero0's
// optimizer_wrapper) or a field the reader does not read (it then writes the default) fails the
// cells of that backend.
TEST(ResolvedOptions, EveryBaselineReportsOptionsRoundTripThroughItsBackendsRecord) {
  for (const char* cell : kResolvedCells) {
    SCOPED_TRACE(cell);
    std::string backend;
    const json o = baseline_options(cell, &backend);
    ASSERT_TRUE(o.is_object());
    EXPECT_EQ(resolved_round_trip(backend, o), o);
  }
  ASSERT_EQ(zero0_reports().size(), 7u);
  for (const auto& [name, report] : zero0_reports().items()) {
    SCOPED_TRACE(name);
    const json& o = report["config"]["backend"]["options"];
    ASSERT_TRUE(o.is_object());
    EXPECT_EQ(resolved_round_trip(report["config"]["backend"]["name"].get<std::string>(), o), o);
  }
}

TEST(ResolvedOptions, TheRecordsTypedFieldsAreTheReportsValues) {
  {
    const auto r = zero3::zero3_resolved_from_json(baseline_options("zero3_bf16"));
    EXPECT_EQ(r.precision.model_dtype, at::kBFloat16);
    EXPECT_EQ(r.precision.communication_data_type, at::kBFloat16);
    EXPECT_EQ(r.persistent_params, 19);
    EXPECT_EQ(r.persistent_numel, 369280);
    EXPECT_GE(r.sub_groups, 1);
    EXPECT_FALSE(r.options.offload_optimizer.enabled());
    EXPECT_FALSE(r.precision.loss_scaler);
  }
  {
    const auto r = zero3::zero3_resolved_from_json(baseline_options("zero3_bf16_zero3-offload-optimizer-cpu"));
    EXPECT_TRUE(r.options.offload_optimizer.enabled());
    EXPECT_EQ(r.options.host_optimizer, zero3::kCpuAdam);
  }
  {
    const auto r = zero12::zero12_resolved_from_json(baseline_options("zero2_fp16"), 2);
    EXPECT_EQ(r.precision.model_dtype, at::kHalf);
    EXPECT_EQ(r.precision.loss_scaler, std::optional<std::string>("DynamicLossScaler"));
    EXPECT_EQ(r.options.stage, 2);
    EXPECT_EQ(r.flat_numel, 893568);
  }
  {
    const auto r = fsdp::fsdp_resolved_from_json(baseline_options("fsdp_mixed_sharding-strategy-SHARD-GRAD-OP"));
    EXPECT_EQ(r.options.sharding_strategy, fsdp::ShardingStrategy::kShardGradOp);
    EXPECT_EQ(r.param_dtype, at::kBFloat16);
    EXPECT_EQ(r.flat_param_dtype, at::kFloat);
    EXPECT_EQ(r.gradient_predivide_factor, 2.0);
    EXPECT_FALSE(r.options.offload_params);
  }
  EXPECT_TRUE(fsdp::fsdp_resolved_from_json(baseline_options("fsdp_mixed_fsdp-offload-params-true")).options.offload_params);
  {
    const auto r = fsdp2::fsdp2_resolved_from_json(baseline_options("fsdp2_mixed"));
    EXPECT_EQ(r.all_gather_dtype, at::kBFloat16);
    EXPECT_EQ(r.mp_reduce_dtype, std::nullopt);  // "None": MixedPrecisionPolicy left it unset
    EXPECT_EQ(r.mesh_dp_shard, 2);
    ASSERT_EQ(r.groups.size(), 3u);
    EXPECT_EQ(r.groups[0].reshard_after_forward, fsdp2::kReshardFalse);
  }
  {
    const auto r = ddp::ddp_resolved_from_json(baseline_options("ddp_low"));
    EXPECT_EQ(r.storage_dtype, at::kBFloat16);
    EXPECT_EQ(r.options.bucket_cap_mb, 25.0);
  }
  {
    const auto r = zero0::zero0_resolved_from_json(zero0_report_options("zero0_cfg_bf16_comm32"));
    EXPECT_EQ(r.precision.model_dtype, at::kBFloat16);
    EXPECT_EQ(r.precision.communication_data_type, at::kFloat);
    EXPECT_EQ(r.precision.grad_accum_dtype, at::kBFloat16);
    EXPECT_FALSE(r.precision.loss_scaler);
    EXPECT_EQ(r.allreduce_bucket_elements, 500000000);
    EXPECT_EQ(r.allreduce_buckets, 1);
    EXPECT_EQ(r.optimizer_wrapper, "FP16_UnfusedOptimizer");
    EXPECT_FALSE(r.options.fused_adam);
  }
  {
    const auto r = zero0::zero0_resolved_from_json(zero0_report_options("zero0_cfg_fp16_static"));
    EXPECT_EQ(r.precision.model_dtype, at::kHalf);
    EXPECT_EQ(r.precision.loss_scaler, std::optional<std::string>("static"));
    EXPECT_EQ(r.options.fp16.loss_scale, 128.0);
  }
  {
    const auto r = zero0::zero0_resolved_from_json(zero0_report_options("zero0_cfg_fp32_fused"));
    EXPECT_EQ(r.precision.model_dtype, at::kFloat);
    EXPECT_EQ(r.precision.communication_data_type, at::kBFloat16);
    EXPECT_TRUE(r.options.fused_adam);
    EXPECT_EQ(r.optimizer_wrapper, "none (the basic optimizer)");
  }
}

// zero0's engine, built here on one rank with the reports' model and optimizer, writes what the
// committed reports hold (the record's writer against the JSON zero0 wrote before it had one).
// Planted: zero0's writer without optimizer_wrapper fails every precision.
TEST(ResolvedOptions, Zero0EngineWritesTheReportsOptions) {
  for (const std::string precision : {"fp32", "bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    EngineSpec spec;
    spec.model = zb::models::preset("tiny");
    spec.precision = precision;
    spec.options = zero0::Zero0Options{};  // the defaults `zerobench run --backend zero0` completes
    json written;
    zb::test_support::run_ranks(1, [&](zb::runtime::World& world) {
      written = create_engine("zero0", spec, world)->resolved_options();
    });
    EXPECT_EQ(written, zero0_report_options("zero0_" + precision));
  }
}

// A report without the engine's keys (an older report, a test's options) reads as the defaults,
// and a dtype name no engine writes is refused naming the key.
TEST(ResolvedOptions, MissingKeysAreDefaultsAndAnUnknownDtypeIsNamed) {
  const auto r = zero3::zero3_resolved_from_json(json::object());
  EXPECT_EQ(r.sub_groups, -1);
  EXPECT_EQ(r.precision.model_dtype, std::nullopt);
  EXPECT_EQ(r.options.stage3_prefetch_bucket_size, zero3::Zero3Options{}.stage3_prefetch_bucket_size);
  try {
    fsdp::fsdp_resolved_from_json(json{{"param_dtype", "Float8"}});
    ADD_FAILURE() << "an unknown dtype was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("param_dtype"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Float8"), std::string::npos) << e.what();
  }
}
