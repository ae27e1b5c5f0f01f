// The run's ShardLayout (backends/shard_layout.hpp, BackendInfo::training.shard_layout): each backend's
// shard and replicate groups and per-unit padding as its engine builds them; the closed forms and
// the memory estimates read theirs from it; the consistency gate (check_layout) and the report's
// validation (config.shard_layout) fail on a planted inconsistency; fsdp_family::shard_groups builds
// the process groups a layout names (and refuses a layout made for another world).
#include <gtest/gtest.h>

#include <stdexcept>

#include "backends/backend_info.hpp"
#include "backends/fsdp_family/process_groups.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using nlohmann::json;

namespace {

backends::EngineSpec tiny_spec(const std::string& precision, json options) {
  backends::EngineSpec spec;
  spec.model = models::preset("tiny");
  spec.precision = precision;
  spec.train.micro_batch = 2;
  spec.train.seq_len = 64;
  spec.options = std::move(options);
  return spec;
}

backends::ShardLayout layout(const std::string& backend, const backends::EngineSpec& spec, backends::Topology topo) {
  return backends::backend(backend).training.shard_layout(spec, topo);
}

int64_t total_numel(const backends::EngineSpec& spec) { return models::count_params(spec.model).total; }

}  // namespace

TEST(ShardLayout, EachBackendsGroups) {
  const backends::Topology two_nodes(4, 2);
  // FSDP1 FULL_SHARD: the world; HYBRID_SHARD: the node (rank 3 is in {2,3} and replicates {1,3}).
  auto l = layout("fsdp", tiny_spec("fp32", json::object()), two_nodes);
  EXPECT_EQ(l.shard_size, 4);
  EXPECT_EQ(l.replicate_size(), 1);
  EXPECT_FALSE(l.separate_groups);
  l = layout("fsdp", tiny_spec("fp32", {{"sharding_strategy", "HYBRID_SHARD"}}), two_nodes);
  EXPECT_EQ(l.shard_size, 2);
  EXPECT_EQ(l.replicate_size(), 2);
  EXPECT_TRUE(l.separate_groups);
  EXPECT_EQ(l.shard_group(3), (std::vector<int>{2, 3}));
  EXPECT_EQ(l.replicate_group(3), (std::vector<int>{1, 3}));
  EXPECT_EQ(l.shard_index(3), 1);
  l = layout("fsdp", tiny_spec("fp32", {{"sharding_strategy", "NO_SHARD"}}), two_nodes);
  EXPECT_EQ(l.shard_size, 1);
  EXPECT_EQ(l.replicate_size(), 4);
  // A world of one runs NO_SHARD (_init_core_state), whatever was asked.
  EXPECT_EQ(layout("fsdp", tiny_spec("fp32", {{"sharding_strategy", "HYBRID_SHARD"}}), 1).shard_size, 1);
  // FSDP2: the mesh's dp_shard; HSDP builds its own groups.
  l = layout("fsdp2", tiny_spec("mixed", {{"dp_replicate_size", 2}}), two_nodes);
  EXPECT_EQ(l.shard_size, 2);
  EXPECT_TRUE(l.separate_groups);
  EXPECT_FALSE(layout("fsdp2", tiny_spec("mixed", json::object()), two_nodes).separate_groups);
  // ZeRO-3 over the world; DDP not sharded.
  EXPECT_EQ(layout("zero3", tiny_spec("bf16", json::object()), two_nodes).shard_size, 4);
  l = layout("ddp", tiny_spec("fp32", json::object()), two_nodes);
  EXPECT_EQ(l.shard_size, 1);
  EXPECT_EQ(l.replicate_size(), 4);
  // Errors stay the engine's: an HSDP mesh that is not the world is a UsageError.
  EXPECT_THROW(layout("fsdp2", tiny_spec("mixed", {{"dp_replicate_size", 3}}), two_nodes), zb::UsageError);
}

TEST(ShardLayout, PaddingIsEachBackendsOwnRule) {
  for (const int W : {1, 3, 4}) {
    for (const auto& [backend, precision] : std::vector<std::pair<std::string, std::string>>{
             {"ddp", "fp32"}, {"fsdp", "fp32"}, {"fsdp2", "fp32"}, {"zero3", "fp32"}}) {
      const auto spec = tiny_spec(precision, json::object());
      const auto l = layout(backend, spec, W);
      ASSERT_EQ(l.unit_numel.size(), size_t(models::unit_count(spec.model))) << backend;
      int64_t numel = 0;
      for (size_t u = 0; u < l.unit_numel.size(); ++u) {
        numel += l.unit_numel[u];
        EXPECT_EQ(l.unit_padded[u] % l.shard_size, 0) << backend << " W=" << W << " unit " << u;
        EXPECT_GE(l.unit_padding(int(u)), 0);
      }
      EXPECT_EQ(numel, total_numel(spec)) << backend;
      // FSDP1 pads a unit's flat parameter once: less than S elements.
      for (size_t u = 0; u < l.unit_numel.size(); ++u) {
        if (backend == "fsdp") {
          EXPECT_LT(l.unit_padding(int(u)), l.shard_size);
        }
        if (backend == "ddp" || W == 1) {
          EXPECT_EQ(l.unit_padding(int(u)), 0) << backend;
        }
      }
    }
  }
  // At W = 3 the tiny model's units do not divide evenly: some padding is really there.
  const auto l = layout("zero3", tiny_spec("fp32", json::object()), 3);
  int64_t padding = 0;
  for (size_t u = 0; u < l.unit_numel.size(); ++u) padding += l.unit_padding(int(u));
  EXPECT_GT(padding, 0);
}

// The closed forms and the estimates read the layout: a rank's sharded storage is
// shard_numel() elements, and every estimate names the layout's groups.
TEST(ShardLayout, ClosedFormsAndEstimatesFollowIt) {
  const backends::Topology two_nodes(4, 2);
  const auto hybrid = tiny_spec("fp32", {{"sharding_strategy", "HYBRID_SHARD"}});
  const auto& fsdp = backends::backend("fsdp");
  EXPECT_EQ(fsdp.training.expected_bytes(hybrid, two_nodes, 0).params,
            layout("fsdp", hybrid, two_nodes).shard_numel() * 4);
  const auto zspec = tiny_spec("fp32", json::object());
  EXPECT_EQ(backends::backend("zero3").training.expected_bytes(zspec, 3, 0).master_params,
            layout("zero3", zspec, 3).shard_numel() * 4);
  const auto hsdp = tiny_spec("fp32", {{"dp_replicate_size", 2}});
  EXPECT_EQ(backends::backend("fsdp2").training.expected_bytes(hsdp, two_nodes, 0).params,
            layout("fsdp2", hsdp, two_nodes).shard_numel() * 4);
  for (const auto& [backend, spec] : std::vector<std::pair<std::string, backends::EngineSpec>>{
           {"ddp", tiny_spec("fp32", json::object())}, {"fsdp", hybrid}, {"fsdp2", hsdp}, {"zero3", zspec}}) {
    const auto l = layout(backend, spec, two_nodes);
    const auto e = backends::backend(backend).training.estimate_peak(spec, two_nodes, 1, true);
    EXPECT_EQ(e.world, l.world) << backend;
    EXPECT_EQ(e.ranks_per_node, l.ranks_per_node) << backend;
    EXPECT_EQ(e.shard_group, l.shard_size) << backend;
  }
}

// The gate every backend's hook passes through: plant each inconsistency, watch it fail.
TEST(ShardLayout, CheckLayoutCatchesAnInconsistentLayout) {
  auto good = layout("fsdp", tiny_spec("fp32", json::object()), 4);
  EXPECT_NO_THROW(backends::check_layout(good));
  auto bad = good;
  bad.shard_size = 3;  // does not divide the world
  EXPECT_THROW(backends::check_layout(bad), std::logic_error);
  bad = good;
  bad.unit_padded[1] += 1;  // no longer a multiple of the shard group
  EXPECT_THROW(backends::check_layout(bad), std::logic_error);
  bad = good;
  bad.unit_padded[0] = bad.unit_numel[0] - 4;  // padded below the real size
  EXPECT_THROW(backends::check_layout(bad), std::logic_error);
  bad = good;
  bad.unit_padded.pop_back();
  EXPECT_THROW(backends::check_layout(bad), std::logic_error);
}

// config.shard_layout in a report: what to_json writes validates; a planted mismatch does not.
TEST(ShardLayout, ReportKeyValidates) {
  const auto l = layout("fsdp", tiny_spec("fp32", {{"sharding_strategy", "HYBRID_SHARD"}}), backends::Topology(4, 2));
  const json j = backends::to_json(l);
  EXPECT_EQ(j["world"], 4);
  EXPECT_EQ(j["ranks_per_node"], 2);
  EXPECT_EQ(j["shard_group"]["size"], 2);
  EXPECT_EQ(j["shard_group"]["ranks"], json({0, 1}));
  EXPECT_EQ(j["replicate_group"]["size"], 2);
  EXPECT_EQ(j["replicate_group"]["ranks"], json({0, 2}));
  EXPECT_EQ(j["unit_padding"].size(), l.unit_numel.size());
  auto report = reports::failed_report("failed", "x", {{"shard_layout", j}});
  EXPECT_TRUE(reports::validate_report(report).empty());
  report["config"]["shard_layout"]["replicate_group"]["size"] = 3;  // 2 x 3 is not the world of 4
  auto problems = reports::validate_report(report);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("config/shard_layout"), std::string::npos) << problems[0];
  report["config"]["shard_layout"] = j;
  report["config"]["shard_layout"].erase("world");
  problems = reports::validate_report(report);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "config/shard_layout/world: missing");
  report["config"]["shard_layout"] = j;
  report["config"]["shard_layout"]["unit_padding"][0] = -1;
  EXPECT_EQ(reports::validate_report(report).size(), 1u);
}

// fsdp_family::shard_groups: the process groups a layout names, on real Gloo groups.
TEST(ShardLayout, ShardGroupsBuildsTheLayoutsProcessGroups) {
  const auto l = layout("fsdp", tiny_spec("fp32", {{"sharding_strategy", "HYBRID_SHARD"}}), backends::Topology(4, 2));
  test_support::run_ranks(4, [&](runtime::World& world) {
    const auto g = backends::fsdp_family::shard_groups(world, l, "test");
    EXPECT_EQ(g.shard.size, 2);
    EXPECT_EQ(g.shard.rank, l.shard_index(world.rank));
    EXPECT_EQ(g.replicate.size, 2);
    EXPECT_EQ(g.replicate.rank, world.rank / 2);
    // Without separate groups the world itself is the shard group.
    const auto full = layout("fsdp", tiny_spec("fp32", json::object()), 4);
    EXPECT_EQ(backends::fsdp_family::shard_groups(world, full, "test_full").shard.size, 4);
    // A layout made for another world is refused, not silently used.
    const auto other = layout("fsdp", tiny_spec("fp32", json::object()), 2);
    EXPECT_THROW(backends::fsdp_family::shard_groups(world, other, "test_other"), std::logic_error);
  });
}
