// The projection: the two-lane replay on hand-built programs with exact answers; each
// engine's program against the real engine on 2 Gloo ranks (the same collectives, in the same
// order, with the same bytes); the FLOP-based compute of the presets; `zerobench project` end
// to end (a report with a projection section, predicted beside measured in the table).
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>

#include "backends/backend_info.hpp"
#include "backends/zero12/zero12_engine.hpp"
#include "analysis/projection/projection.hpp"
#include "analysis/projection/schedule.hpp"
#include "analysis/projection/simulate.hpp"
#include "reports/report.hpp"
#include "reports/table.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using namespace zb::analysis::projection;
using nlohmann::json;
using backends::common::CollectiveKind;

namespace {
// A calibration whose collectives cost `alpha` seconds plus bytes at `busbw` GB/s, any W.
Calibration flat_calibration(double alpha, double busbw_gbps, const std::string& pg = "gloo") {
  Calibration c;
  c.source = "test";
  c.pg_backend = pg;
  for (int k = 0; k < int(CollectiveKind::kCount); ++k)
    for (const char* d : {"fp32", "bf16"}) {
      CollectiveFit f;
      f.kind = CollectiveKind(k);
      f.dtype = d;
      f.world_size = 2;
      f.alpha_s = alpha;
      f.busbw_gbps = busbw_gbps;
      c.fits.push_back(f);
    }
  return c;
}

// Issue order of a program as Comm's trace writes it ("all_gather:unit3"), and bytes per kind.
std::vector<std::string> issues_of(const Program& p, std::map<std::string, int64_t>* bytes = nullptr) {
  std::vector<std::string> out;
  for (const auto& a : p.actions()) {
    if (a.kind != Action::kIssue) continue;
    const auto sp = a.name.find(' ');
    out.push_back(a.name.substr(0, sp) + ":" + a.name.substr(sp + 1));
    if (bytes) (*bytes)[a.name.substr(0, sp)] += a.bytes;
  }
  return out;
}

struct EngineStep {
  std::vector<std::string> trace;  // the last step's collectives, in issue order
  std::map<std::string, int64_t> bytes, counts;
  json options;
};

// Trains `backend` on 2 thread-ranks and returns rank 0's last step of collectives.
EngineStep engine_step(const std::string& backend, const backends::EngineSpec& spec) {
  EngineStep out;
  std::mutex m;
  test_support::run_ranks(2, [&](runtime::World& world) {
    auto engine = backends::create_engine(backend, spec, world);
    engine->comm().set_tracing(true);
    auto data = models::make_data_source("random", spec.model.vocab, 1);
    backends::common::Comm side(world.side_channel());
    const auto result = bench::run_training(*engine, spec, *data, side);
    if (world.rank != 0) return;
    std::lock_guard<std::mutex> lock(m);
    int64_t n = 0;
    for (int k = 0; k < int(CollectiveKind::kCount); ++k) {
      const auto& s = result.comm_last_step[size_t(k)];
      n += s.count;
      out.bytes[backends::common::collective_name(CollectiveKind(k))] = s.bytes;
      out.counts[backends::common::collective_name(CollectiveKind(k))] = s.count;
    }
    const auto& t = engine->comm().trace();
    out.trace.assign(t.end() - n, t.end());
    out.options = engine->resolved_options();
  });
  return out;
}

// The engine's last step and the projection's program for the same spec at W=2 agree.
void expect_program_matches_engine(const std::string& backend, const backends::EngineSpec& spec) {
  const auto real = engine_step(backend, spec);
  ScheduleInput in;
  in.backend = backend;
  in.precision = spec.precision;
  in.options = real.options;
  in.model = spec.model;
  in.train = spec.train;
  in.world = 2;
  in.costs.forward_s.assign(size_t(spec.model.layers + 1), 1e-3);
  in.costs.backward_s.assign(size_t(spec.model.layers + 1), 2e-3);
  const auto cal = flat_calibration(1e-4, 1.0);
  std::map<std::string, int64_t> bytes;
  const auto program = build_program(in, cal);
  const auto issued = issues_of(program, &bytes);
  EXPECT_EQ(issued, real.trace) << backend << " " << spec.precision;
  for (const auto& [kind, b] : real.bytes) EXPECT_EQ(bytes[kind], b) << backend << " " << kind;
}
}  // namespace

TEST(Simulate, OnTheCpuTheThreadComputesSoAnIssueFollowsComputeAndAWaitBlocksIt) {
  Program p;
  p.compute("F1", 1.0);
  const int ag = p.issue(CollectiveKind::kAllGather, "unit2", 8, 2.0, false);  // [1,3)
  p.compute("X", 0.5);                                                        // [1,1.5) overlaps
  p.wait(ag);                                                                 // host -> 3
  p.compute("F2", 1.0);                                                       // [3,4)
  const auto t = simulate(p, ExecModel::kHostIsDevice);
  EXPECT_DOUBLE_EQ(t.step_s, 4.0);
  EXPECT_DOUBLE_EQ(t.compute_s, 2.5);
  EXPECT_DOUBLE_EQ(t.comm_s, 2.0);
  EXPECT_DOUBLE_EQ(t.comm_overlapped_s, 0.5);
  EXPECT_DOUBLE_EQ(t.exposed_comm_s, 1.5);
}

TEST(Simulate, OnCudaTheHostRunsAheadCollectivesQueueOnOneStreamAndHostSyncsDelayIssues) {
  Program p;
  const int ag1 = p.issue(CollectiveKind::kAllGather, "unit1", 8, 1.0, false);  // [0,1)
  p.wait(ag1);
  const int f1 = p.compute("F1", 3.0);                                          // [1,4)
  const int ag2 = p.issue(CollectiveKind::kAllGather, "unit2", 8, 2.0, false);  // [1,3): prefetched under F1
  p.wait(ag2);
  p.compute("F2", 3.0);                                                         // [4,7)
  const int rs = p.issue(CollectiveKind::kReduceScatter, "unit2", 8, 2.0, true);  // after compute: [7,9)
  p.host_sync(f1);                                                              // host -> 4 (already later)
  p.compute("B", 1.0);                                                          // [7,8)
  p.wait(rs);
  p.compute("opt", 1.0);                                                        // [9,10)
  const auto t = simulate(p, ExecModel::kAsyncDevice);
  EXPECT_DOUBLE_EQ(t.step_s, 10.0);
  EXPECT_DOUBLE_EQ(t.comm_s, 5.0);
  EXPECT_DOUBLE_EQ(t.exposed_comm_s, 1.0 + 1.0);  // the first gather, and the reduce-scatter past B
  // A host sync on late compute holds back a collective the host would otherwise issue at once.
  Program q;
  const int c = q.compute("F", 5.0);
  q.host_sync(c);
  const int g = q.issue(CollectiveKind::kAllGather, "x", 8, 1.0, false);
  q.wait(g);
  EXPECT_DOUBLE_EQ(simulate(q, ExecModel::kAsyncDevice).step_s, 6.0);
  EXPECT_DOUBLE_EQ(simulate(q, ExecModel::kHostIsDevice).step_s, 6.0);
}

TEST(Schedule, FsdpOneBlockOnTheCpuMatchesTheStepWrittenOutByHand) {
  // One block: AG root, AG block (both waited at once), F1, F0; backward: the block's gather
  // prefetched (BACKWARD_PRE) under the root's LM-head backward, B1, RS block, RS root (the
  // host waits for each at the next post-backward / the final callback), grad-norm AR, AdamW.
  ScheduleInput in;
  in.backend = "fsdp";
  in.precision = "fp32";
  in.model = test_support::small_spec(1).model;
  in.model.layers = 1;
  in.train.grad_accum = 1;
  in.world = 2;
  in.costs.forward_s = {4.0, 3.0};
  in.costs.backward_s = {5.0, 6.0};
  in.costs.optimizer_s = 9.0;
  const auto cal = flat_calibration(0.0, 1e-6);  // 1 KB/s: whole seconds for these sizes
  const auto p = build_program(in, cal);
  std::vector<double> d;  // collective times in issue order: AG0, AG1, AG1', RS1, RS0, AR
  for (const auto& a : p.actions())
    if (a.kind == Action::kIssue) d.push_back(a.duration_s);
  ASSERT_EQ(d.size(), 6u);
  const auto t = simulate(p, ExecModel::kHostIsDevice);
  EXPECT_NEAR(t.step_s, d[0] + d[1] + 3 + 4 + std::max(5.0, d[2]) + 6 + d[3] + d[4] + d[5] + 9, 1e-9);
  EXPECT_NEAR(t.exposed_comm_s, d[0] + d[1] + std::max(0.0, d[2] - 5) + d[3] + d[4] + d[5], 1e-9);
}

TEST(Schedule, FsdpProgramsIssueTheEnginesCollectivesInOrderWithItsBytes) {
  auto spec = test_support::small_spec(1);
  spec.train.steps = 3;
  for (const char* precision : {"mixed", "low", "fp32"}) {
    spec.precision = precision;
    spec.options = json::object();
    expect_program_matches_engine("fsdp", spec);
  }
  spec.precision = "mixed";
  spec.train.grad_accum = 2;
  for (const json& o : {json{{"forward_prefetch", true}}, json{{"backward_prefetch", "BACKWARD_POST"}},
                        json{{"backward_prefetch", "NO_PREFETCH"}}, json{{"sharding_strategy", "SHARD_GRAD_OP"}},
                        json{{"sharding_strategy", "NO_SHARD"}}}) {
    spec.options = o;
    expect_program_matches_engine("fsdp", spec);
  }
}

TEST(Schedule, Fsdp2ProgramsIssueTheEnginesCollectivesInOrderWithItsBytes) {
  auto spec = test_support::small_spec(1);
  spec.train.steps = 3;
  for (const char* precision : {"mixed", "low", "fp32"}) {
    spec.precision = precision;
    spec.options = json::object();
    expect_program_matches_engine("fsdp2", spec);
  }
  spec.precision = "mixed";
  spec.train.grad_accum = 2;  // no_sync: one reduce-scatter per group per step
  spec.options = json::object();
  expect_program_matches_engine("fsdp2", spec);
  spec.options = {{"reshard_after_forward", false}};  // no all-gather in backward
  expect_program_matches_engine("fsdp2", spec);
  spec.train.sync_each_batch = true;
  expect_program_matches_engine("fsdp2", spec);
}

TEST(Schedule, Fsdp2RefusesWhatItDoesNotModelNamingIt) {
  ScheduleInput in;
  in.backend = "fsdp2";
  in.precision = "mixed";
  in.model = test_support::small_spec(1).model;
  in.world = 2;
  const auto cal = flat_calibration(0.0, 1.0);
  in.options = {{"reshard_after_forward", 2}};
  try {
    build_program(in, cal);
    FAIL() << "an int reshard_after_forward was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("reshard_after_forward 2"), std::string::npos) << e.what();
  }
  in.options = {{"mesh", {{"dp_replicate", 2}, {"dp_shard", 1}}}};
  EXPECT_THROW(build_program(in, cal), UsageError);
}

TEST(Schedule, Zero3ProgramsFollowPrefetchReleaseAndBucketsAsTheEngineDoes) {
  auto spec = test_support::small_spec(1);
  spec.train.steps = 3;
  spec.precision = "bf16";
  spec.options = json::object();  // DeepSpeed's defaults: everything prefetched at once
  expect_program_matches_engine("zero3", spec);
  // Small buckets, a short reuse distance and a low persistence threshold exercise every rule.
  spec.options = {{"stage3_prefetch_bucket_size", 3000}, {"reduce_bucket_size", 5000},
                  {"stage3_param_persistence_threshold", 64}, {"stage3_max_reuse_distance", 2000},
                  {"stage3_max_live_parameters", 20000}};
  expect_program_matches_engine("zero3", spec);
  spec.train.grad_accum = 2;
  spec.precision = "fp32";
  spec.options["overlap_comm"] = false;
  expect_program_matches_engine("zero3", spec);
}

TEST(Schedule, Zero1AndZero2ProgramsReduceTheirBucketsAndGatherThePartitionsAsTheEngineDoes) {
  auto spec = test_support::small_spec(1);
  spec.train.steps = 3;
  for (const char* backend : {"zero1", "zero2"}) {
    for (const char* precision : {"fp32", "bf16"}) {
      spec.precision = precision;
      spec.train.grad_accum = 1;
      spec.options = json::object();  // DeepSpeed's defaults: one bucket, reduced at the end
      expect_program_matches_engine(backend, spec);
      // Small buckets (parameters larger than a bucket too), overlap_comm, accumulation.
      spec.train.grad_accum = 2;
      spec.options = {{"reduce_bucket_size", 3000}, {"overlap_comm", true}};
      expect_program_matches_engine(backend, spec);
      spec.options = {{"reduce_bucket_size", 5000}, {"reduce_scatter", false}};
      expect_program_matches_engine(backend, spec);
      // A size at which the order the gradient hooks fire decides the packing (stage 2, stage 1
      // with overlap_comm): the LM head and final norm share the first bucket with the last
      // block's down projection, as DeepSpeed's hooks fire them.
      spec.options = {{"reduce_bucket_size", 80000}, {"overlap_comm", true}};
      expect_program_matches_engine(backend, spec);
    }
  }
}

// The planted fault: the engine's hooks fired in per-unit order (the LM head and final norm after
// every block, as before issue 35) pack the 80,000-element buckets unlike DeepSpeed, and the
// program (DeepSpeed's order) no longer issues the engine's collectives.
TEST(Schedule, Zero2ProgramCatchesAnEngineWhoseHooksFireInUnitOrder) {
  auto spec = test_support::small_spec(1);
  spec.train.steps = 3;
  spec.precision = "bf16";
  spec.options = {{"reduce_bucket_size", 80000}};
  backends::zero12::plant_fault("unit_hooks");
  const auto planted = engine_step("zero2", spec);
  backends::zero12::plant_fault("");
  const auto real = engine_step("zero2", spec);
  ScheduleInput in;
  in.backend = "zero2";
  in.precision = spec.precision;
  in.options = real.options;
  in.model = spec.model;
  in.train = spec.train;
  in.world = 2;
  in.costs.forward_s.assign(size_t(spec.model.layers + 1), 1e-3);
  in.costs.backward_s.assign(size_t(spec.model.layers + 1), 2e-3);
  const auto issued = issues_of(build_program(in, flat_calibration(1e-4, 1.0)));
  EXPECT_EQ(issued, real.trace);
  EXPECT_EQ(real.counts.at("all_reduce"), 7 + 2);  // 7 buckets, the overflow and norm all-reduces
  EXPECT_EQ(planted.counts.at("all_reduce"), 8 + 2);
  EXPECT_NE(issued, planted.trace);
}

TEST(Schedule, DdpAllReducesItsBucketsAfterTheLastBackward) {
  auto spec = test_support::small_spec(2);
  spec.train.steps = 3;
  spec.precision = "fp32";
  spec.options = {{"bucket_cap_mb", 0.05}};
  expect_program_matches_engine("ddp", spec);
}

TEST(FlopsCosts, MatmulsAttentionAndElementwiseTrafficAtThePresetsRates) {
  auto cfg = models::preset("granite-7b");
  cfg.layers = 2;
  backends::TrainConfig t;
  t.micro_batch = 8;
  t.seq_len = 4096;
  const auto p = *find_preset("a100-nvlink");
  const auto u = flops_unit_costs(cfg, t, "mixed", p);
  ASSERT_EQ(u.forward_s.size(), 3u);
  const double tokens = 8.0 * 4096;
  const double linear = 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008;  // q, k, v, o (MHA) and the MLP
  const double expect = 2 * tokens * linear / (312e12 * p.gemm_efficiency) +
                        2 * tokens * 4096 * 4096 / (312e12 * 0.5) +
                        tokens * elementwise_bytes_per_token(cfg, 2) / 2039e9;
  EXPECT_NEAR(u.forward_s[1], expect, 1e-12);
  EXPECT_NEAR(u.backward_s[2], 2 * expect, 1e-12);
  t.activation_checkpointing = true;
  EXPECT_NEAR(flops_unit_costs(cfg, t, "mixed", p).backward_s[1], 3 * expect, 1e-12);
  // The elementwise tally for bf16 activations: 108 H + 20 KV + 10 F bytes per token.
  EXPECT_DOUBLE_EQ(elementwise_bytes_per_token(cfg, 2), 108.0 * 4096 + 20.0 * 4096 + 10.0 * 11008);
}

TEST(ProjectCli, AProfiledRunProjectsToAReportThatTheTableShowsBesideTheMeasurement) {
  const auto dir = test_support::temp_path("project");
  auto r = test_support::run_zerobench("run --nproc 1 --backend fsdp --precision mixed --model tiny --steps 4 --warmup 1 "
                                       "--threads 1 --profile --profile-steps 2 --quiet --out " + dir + "/w1.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto w1 = json::parse(std::ifstream(dir + "/w1.json"));
  const auto& units = w1["profile"]["units"];
  ASSERT_EQ(units["forward_s"].size(), 3u);  // root + 2 blocks
  for (const auto& v : units["forward_s"]) EXPECT_GT(v.get<double>(), 0.0);
  EXPECT_GT(units["optimizer_s"].get<double>(), 0.0);
  // A W=1 projection with a measured calibration is the measured compute with no communication.
  Calibration none = flat_calibration(0.0, 0.0);
  none.host_cores = 0;
  ProjectOptions o;
  o.world = 1;
  const auto self = project(w1, none, o);
  double sum = units["optimizer_s"].get<double>() + units["other_s"].get<double>();
  for (const char* k : {"forward_s", "backward_s"})
    for (const auto& v : units[k]) sum += v.get<double>();
  EXPECT_NEAR(self["projection"]["step_time_s"].get<double>(), sum, 1e-12);
  EXPECT_DOUBLE_EQ(self["projection"]["exposed_comm_s"].get<double>(), 0.0);
  EXPECT_TRUE(reports::validate_report(self).empty());
  // The CLI with a preset: a schema-valid report with the interface's keys.
  r = test_support::run_zerobench("project " + dir + "/w1.json --calibration a100-nvlink --nproc 8 --nodes 2 --out " + dir +
                                  "/p.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto p = reports::read_report(dir + "/p.json");
  for (const char* k : {"step_time_s", "tokens_per_gpu_per_s", "mfu", "exposed_comm_s"})
    EXPECT_GT(p["projection"][k].get<double>(), 0.0) << k;
  EXPECT_EQ(p["env"]["world_size"], 8);
  EXPECT_EQ(p["projection"]["compute"]["mode"], "flops");
  // Predicted beside measured: a projection of the measured workload fills the two columns.
  auto measured = w1;
  measured["_cell"] = "measured";
  auto projected = self;
  projected["_cell"] = "projected";
  const auto md = reports::render_table({measured, projected}, {});
  EXPECT_NE(md.find("predicted tokens/GPU/s"), std::string::npos) << md;
  EXPECT_NE(md.find("| projected |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| - | - | ok |"), std::string::npos) << md;  // the measured row has a prediction
  // Bad input: one line, exit 2.
  for (const std::string bad : {" --calibration nope --nproc 2", " --calibration a100-nvlink --nproc 3 --nodes 2",
                                " --calibration a100-nvlink --nproc 2 --compute measured --micro-batch 4"}) {
    r = test_support::run_zerobench("project " + dir + "/w1.json" + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
  }
  auto unprofiled = w1;
  unprofiled["profile"] = nullptr;
  reports::write_json_atomic(dir + "/np.json", unprofiled);
  r = test_support::run_zerobench("project " + dir + "/np.json --calibration a100-nvlink --nproc 2 --compute flops");
  EXPECT_EQ(r.exit_code, 0) << r.output;  // FLOPs need no profile
  r = test_support::run_zerobench("project " + dir + "/np.json --calibration " + dir + "/p.json --nproc 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // a report is not a calibration
  std::system(("rm -rf " + dir).c_str());
}
