// test_resolved_options.cpp — each backend's resolved-options record (<X>Resolved in
// backends/<x>/<x>_options.hpp or ddp_config.hpp: what its engine's resolved_options() writes as
// the report's config.backend.options, and what its projection program and crossval rules read)
// against reports zerobench wrote: every committed cpu-smoke baseline's options read into the
// record and written back is the same JSON (one mapping both ways: a key the writer forgets or the
// reader drops is caught), and the record's typed fields hold what the report says.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "backends/ddp/ddp_config.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "backends/zero12/zero12_options.hpp"
#include "backends/zero3/zero3_options.hpp"

using namespace zb::backends;
using json = nlohmann::json;

namespace {
const std::string kResolvedSmoke = std::string(ZEROBENCH_SOURCE_DIR) + "/reports/baselines/cpu-smoke/";

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

// Planted: a key left out of a writer (e.g. zero3's sub_groups, fsdp's cpu_offload) or a field the
// reader does not read (it then writes the default) fails the cells of that backend.
TEST(ResolvedOptions, EveryBaselineReportsOptionsRoundTripThroughItsBackendsRecord) {
  for (const char* cell : kResolvedCells) {
    SCOPED_TRACE(cell);
    std::string backend;
    const json o = baseline_options(cell, &backend);
    ASSERT_TRUE(o.is_object());
    EXPECT_EQ(resolved_round_trip(backend, o), o);
  }
}

TEST(ResolvedOptions, TheRecordsTypedFieldsAreTheReportsValues) {
  {
    const auto r = zero3::zero3_resolved_from_json(baseline_options("zero3_bf16"));
    EXPECT_EQ(r.model_dtype, at::kBFloat16);
    EXPECT_EQ(r.communication_data_type, at::kBFloat16);
    EXPECT_EQ(r.persistent_params, 19);
    EXPECT_EQ(r.persistent_numel, 369280);
    EXPECT_GE(r.sub_groups, 1);
    EXPECT_FALSE(r.options.offload_optimizer.enabled());
    EXPECT_FALSE(r.loss_scaler);
  }
  {
    const auto r = zero3::zero3_resolved_from_json(baseline_options("zero3_bf16_zero3-offload-optimizer-cpu"));
    EXPECT_TRUE(r.options.offload_optimizer.enabled());
    EXPECT_EQ(r.options.host_optimizer, zero3::kCpuAdam);
  }
  {
    const auto r = zero12::zero12_resolved_from_json(baseline_options("zero2_fp16"), 2);
    EXPECT_EQ(r.model_dtype, at::kHalf);
    EXPECT_EQ(r.loss_scaler, std::optional<std::string>("DynamicLossScaler"));
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
}

// A report without the engine's keys (an older report, a test's options) reads as the defaults,
// and a dtype name no engine writes is refused naming the key.
TEST(ResolvedOptions, MissingKeysAreDefaultsAndAnUnknownDtypeIsNamed) {
  const auto r = zero3::zero3_resolved_from_json(json::object());
  EXPECT_EQ(r.sub_groups, -1);
  EXPECT_EQ(r.model_dtype, std::nullopt);
  EXPECT_EQ(r.options.stage3_prefetch_bucket_size, zero3::Zero3Options{}.stage3_prefetch_bucket_size);
  try {
    fsdp::fsdp_resolved_from_json(json{{"param_dtype", "Float8"}});
    ADD_FAILURE() << "an unknown dtype was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("param_dtype"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Float8"), std::string::npos) << e.what();
  }
}
