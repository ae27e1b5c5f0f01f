// The projection: the two-lane replay on hand-built programs with exact answers; each
// engine's program against the real engine on 2 Gloo ranks (the same collectives, in the same
// order, with the same bytes); the FLOP-based compute of the presets; `zerobench project` end
// to end (a report with a projection section, predicted beside measured in the table); a measured
// calibration's size coverage (`project` refuses what it did not measure, `micro --for` measures it).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <set>
#include <tuple>

#include "backends/backend_info.hpp"
#include "analysis/projection/coverage.hpp"
#include "backends/zero12/zero12_engine.hpp"
#include "analysis/projection/projection.hpp"
#include "analysis/projection/schedule.hpp"
#include "analysis/projection/simulate.hpp"
#include "models/model_config.hpp"
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
  t.activation_checkpointing = models::ActivationCheckpointing::full();
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

// Issue 37: `project` prices rows of documents from their real lengths. 64 documents of 4 tokens,
// rows of 8: pad holds one document a row (4 real tokens, padding 1/2), pack two (8 real),
// pack-naive 8 under one causal mask; the attention span is 4, 4 and 8. tokens/GPU/s counts
// real tokens; the masked kernel (pad, pack) computes all T² scores, one causal mask half.
TEST(ProjectRows, PadPackAndNaiveRowsArePricedFromTheDocumentLengths) {
  const auto dir = test_support::temp_path("project_rows");
  std::system(("mkdir -p " + dir).c_str());
  {
    std::ofstream f(dir + "/lengths.json");
    f << R"({"format": "zerobench-document-lengths", "version": 1, "documents": 64, "tokens": 256,
             "histogram": [{"length": 4, "count": 64}]})";
  }
  auto r = test_support::run_zerobench("run --nproc 1 --backend fsdp --precision fp32 --model tiny --steps 3 --warmup 1 "
                                       "--threads 1 --micro-batch 2 --seq-len 8 --data lengths:" + dir +
                                       "/lengths.json --batching pack --quiet --out " + dir + "/pack.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto measured = reports::read_report(dir + "/pack.json");
  const auto& mb = measured["summary"]["batching"];
  ASSERT_DOUBLE_EQ(mb["real_tokens_per_rank_per_step"].get<double>(), 16.0);
  const auto p = *find_preset("a100-nvlink");
  Calibration preset = Calibration::load("a100-nvlink");
  ProjectOptions o;
  o.world = 2;
  o.compute = "flops";
  std::map<std::string, json> out;
  for (const std::string b : {"", "pad", "pack-naive", "pad-longest"}) {
    o.batching = b;
    out[b.empty() ? "pack" : b] = project(measured, preset, o);
  }
  struct Want {
    double real, padding, span;
  };
  const std::map<std::string, Want> want = {
      {"pack", {16, 0, 4}}, {"pad", {8, 0.5, 4}}, {"pack-naive", {16, 0, 8}}, {"pad-longest", {8, 0, 4}}};
  const auto cfg = models::preset("tiny");
  for (const auto& [mode, w] : want) {
    const auto& rep = out.at(mode);
    const auto& b = rep["summary"]["batching"];
    EXPECT_EQ(b["mode"], mode);
    EXPECT_DOUBLE_EQ(b["real_tokens_per_rank_per_step"].get<double>(), w.real) << mode;
    EXPECT_DOUBLE_EQ(b["padding_fraction"].get<double>(), w.padding) << mode;
    EXPECT_DOUBLE_EQ(b["attention_span"].get<double>(), w.span) << mode;
    EXPECT_EQ(rep["summary"]["tokens_per_rank_per_step"], 16);  // slots, padding included
    const double step = rep["projection"]["step_time_s"].get<double>();
    EXPECT_DOUBLE_EQ(rep["projection"]["tokens_per_gpu_per_s"].get<double>(), w.real / step) << mode;
    const auto f = models::flops_per_real_token(cfg, w.span, models::ActivationCheckpointing::none());
    EXPECT_DOUBLE_EQ(rep["summary"]["flops_per_token"]["palm"].get<double>(), f.palm) << mode;
    EXPECT_TRUE(reports::validate_report(rep).empty()) << mode;
  }
  // Same slots, same masked kernel: pad's step costs pack's, for half the real tokens.
  EXPECT_DOUBLE_EQ(out["pad"]["projection"]["step_time_s"].get<double>(), out["pack"]["projection"]["step_time_s"].get<double>());
  // pad-longest: pad's rows collated 4 wide (every document is 4 tokens): priced as rows of 4,
  // not --seq-len 8 (before 2026-11-28 it was priced at 8, pad's step).
  EXPECT_DOUBLE_EQ(out["pad-longest"]["projection"]["compute"]["row_width"].get<double>(), 4.0);
  backends::TrainConfig narrow;
  narrow.micro_batch = 2, narrow.seq_len = 4, narrow.batching = "pad";
  EXPECT_DOUBLE_EQ(out["pad-longest"]["projection"]["compute"]["forward_s"][1].get<double>(),
                   flops_unit_costs(cfg, narrow, "fp32", p).forward_s[1]);
  EXPECT_LT(out["pad-longest"]["projection"]["compute"]["forward_s"][1].get<double>(),
            out["pad"]["projection"]["compute"]["forward_s"][1].get<double>());
  // The mask's dense attention: 2·tokens·T·H more per block forward than one causal mask.
  const double tokens = 2.0 * 8;
  const double extra = 2 * tokens * 8 * double(cfg.hidden) / (p.peak_tflops * 1e12 * p.attention_efficiency);
  EXPECT_NEAR(out["pack"]["projection"]["compute"]["forward_s"][1].get<double>() -
                  out["pack-naive"]["projection"]["compute"]["forward_s"][1].get<double>(),
              extra, 1e-15);
  // Bad input, one line, exit 2: rows of documents without documents; --batching under measured compute.
  r = test_support::run_zerobench("run --nproc 1 --backend fsdp --precision fp32 --model tiny --steps 2 --warmup 1 "
                                  "--threads 1 --micro-batch 2 --seq-len 8 --quiet --out " + dir + "/markov.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& bad : {dir + "/markov.json --calibration a100-nvlink --nproc 2 --batching pad",
                                dir + "/pack.json --calibration a100-nvlink --nproc 2 --compute measured --batching pad",
                                dir + "/pack.json --calibration a100-nvlink --nproc 2 --batching packed"}) {
    r = test_support::run_zerobench("project " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
  }
  std::system(("rm -rf " + dir).c_str());
}

// Issue 35, finding 5: a measured calibration prices a collective only inside the sizes it
// measured (within kRangeTolerance); `project` refuses otherwise, and `micro --for REPORT`
// measures exactly the sizes the report's run issues.
namespace {
// A `zerobench micro` JSON with t = 10 us + S / 1 GB/s for every (kind, dtype, size) given.
json micro_json(const std::vector<std::tuple<std::string, std::string, int64_t>>& entries, int world) {
  json bs = json::array();
  for (const auto& [kind, dtype, bytes] : entries)
    bs.push_back({{"name", kind + "/" + dtype + "/W:" + std::to_string(world) + "/bytes:" + std::to_string(bytes)},
                  {"run_type", "iteration"}, {"real_time", 10.0 + double(bytes) / 1e3}, {"time_unit", "us"},
                  {"bytes", double(bytes)}, {"busbw", 0.0}, {"world_size", double(world)}});
  return {{"context", {{"zerobench_world_size", std::to_string(world)}, {"zerobench_pg_backend", "gloo"}}},
          {"benchmarks", bs}};
}

// The step's collectives as micro entries (exactly what `micro --for` measures).
std::vector<std::tuple<std::string, std::string, int64_t>> entries_of(const StepSizes& s) {
  std::vector<std::tuple<std::string, std::string, int64_t>> out;
  for (const auto& c : s.collectives)
    for (const int64_t b : c.bytes) out.push_back({backends::common::collective_name(c.kind), c.dtype, b});
  return out;
}

ScheduleInput small_fsdp_w2() {
  ScheduleInput in;
  in.backend = "fsdp";
  in.precision = "fp32";
  in.model = models::preset("small");
  in.train.micro_batch = 2;
  in.train.seq_len = 128;
  in.world = 2;
  return in;
}
}  // namespace

TEST(ProjectCoverage, AGridThatStopsBelowTheStepsMessagesIsRefusedNamingItsRangeAndTheSizesNeeded) {
  const auto in = small_fsdp_w2();
  const auto need = step_sizes(in);
  // The recorded sizes are the program's own issues (the engine's, test above), nothing else.
  std::set<std::pair<std::string, int64_t>> issued, recorded;
  const auto program = build_program(in, flat_calibration(1e-4, 1.0));
  for (const auto& a : program.actions())
    if (a.kind == Action::kIssue) issued.insert({backends::common::collective_name(a.coll), a.bytes});
  int64_t largest_gather = 0;
  for (const auto& c : need.collectives) {
    EXPECT_EQ(c.dtype, "fp32");
    EXPECT_EQ(c.world, 2);
    for (const int64_t b : c.bytes) recorded.insert({backends::common::collective_name(c.kind), b});
    if (c.kind == CollectiveKind::kAllGather) largest_gather = *c.bytes.rbegin();
  }
  EXPECT_EQ(recorded, issued);
  EXPECT_GT(largest_gather, int64_t(1) << 20);  // MBs: far beyond `micro --quick`'s 64 KiB
  EXPECT_TRUE(need.h2d_bytes.empty() && need.d2h_bytes.empty());
  EXPECT_EQ(need.host_optimizer_params, 0);

  // `micro --quick`'s grid, 1 KiB .. 64 KiB: the finding's calibration. Refused, one line.
  std::vector<std::tuple<std::string, std::string, int64_t>> grid;
  for (const char* k : {"all_gather", "reduce_scatter", "all_reduce", "broadcast"})
    for (int64_t s = 1024; s <= 65536; s *= 4) grid.push_back({k, "fp32", s});
  const auto quick = Calibration::fit(micro_json(grid, 2), "quick.json");
  const auto why = uncovered(quick, need, "REMEDY");
  EXPECT_NE(why.find("all_gather fp32 at W=2 from 1024 to 65536 bytes"), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(largest_gather) + " bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("REMEDY"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;

  // Exactly the step's sizes: covered; each measured size priced at its measured time.
  auto exact = entries_of(need);
  const auto cal = Calibration::fit(micro_json(exact, 2), "exact.json");
  EXPECT_EQ(uncovered(cal, need, "REMEDY"), "");
  EXPECT_DOUBLE_EQ(cal.collective_s(CollectiveKind::kAllGather, "fp32", largest_gather, 2, 1),
                   10e-6 + double(largest_gather) * 1e-9);
  // The planted fault: the calibration's all-gathers stop below the step's largest. Refused.
  exact.erase(std::remove(exact.begin(), exact.end(), std::make_tuple(std::string("all_gather"), std::string("fp32"),
                                                                       largest_gather)),
              exact.end());
  const auto short_cal = Calibration::fit(micro_json(exact, 2), "short.json");
  const auto why_short = uncovered(short_cal, need, "REMEDY");
  EXPECT_NE(why_short.find("all_gather fp32 at W=2 from"), std::string::npos) << why_short;
  EXPECT_NE(why_short.find("1 outside it: " + std::to_string(largest_gather) + " bytes"), std::string::npos)
      << why_short;
  // Another dtype's fit does not price it; the edges' tolerance is 5%.
  EXPECT_NE(uncovered(Calibration::fit(micro_json({{"all_gather", "bf16", 1024}}, 2), "bf16.json"), need, "R")
                .find("has no all_gather fp32 measurements"),
            std::string::npos);
  EXPECT_TRUE(in_range(104, 100, 100));
  EXPECT_FALSE(in_range(106, 100, 100));
  EXPECT_TRUE(in_range(96, 100, 100));
  EXPECT_FALSE(in_range(94, 100, 100));
  // A preset has no measured range: datasheet figures price any size.
  EXPECT_EQ(uncovered(Calibration::load("a100-nvlink"), need, "R"), "");
}

TEST(ProjectCoverage, MicroForMeasuresExactlyTheRunsSizesAndProjectRefusesACalibrationThatStopsShort) {
  const auto dir = test_support::temp_path("coverage");
  auto r = test_support::run_zerobench("run --nproc 1 --backend fsdp --precision fp32 --model tiny --steps 3 --warmup 1 "
                                       "--threads 1 --profile --profile-steps 1 --quiet --out " + dir + "/w1.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = reports::read_report(dir + "/w1.json");
  ProjectOptions po;
  po.world = 2;
  const auto need = step_sizes(projection_input(report, po, ExecModel::kHostIsDevice));
  std::set<std::string> want;
  for (const auto& c : need.collectives)
    for (const int64_t b : c.bytes)
      want.insert(std::string(backends::common::collective_name(c.kind)) + "/" + c.dtype + "/W:2/bytes:" +
                  std::to_string(b));
  ASSERT_FALSE(want.empty());
  r = test_support::run_zerobench("micro --for " + dir + "/w1.json --nproc 2 --out " + dir +
                                  "/m.json --benchmark_min_time=0.005 --benchmark_repetitions=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto m = json::parse(std::ifstream(dir + "/m.json"));
  std::set<std::string> got, other;
  for (const auto& b : m["benchmarks"]) {
    std::string name = b["name"];
    if (const auto at = name.rfind("/manual_time"); at != std::string::npos) name.erase(at);  // Google Benchmark's suffix
    if (b.contains("busbw")) got.insert(name);
    else other.insert(name);
  }
  EXPECT_EQ(got, want);  // the set of sizes: deterministic
  ASSERT_EQ(other.size(), 1u);  // what else project reads: the square GEMM of the run's dtype (no offload here)
  EXPECT_EQ(other.begin()->rfind("gemm/fp32/square/", 0), 0u) << *other.begin();
  EXPECT_EQ(m["context"]["zerobench_threads_per_rank"], "1");  // the report's threads: the GEMM probe compares
  // The two-command path: the micro JSON covers the run.
  r = test_support::run_zerobench("project " + dir + "/w1.json --calibration " + dir + "/m.json --nproc 2 --out " + dir +
                                  "/p.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto p = reports::read_report(dir + "/p.json");
  EXPECT_NE(p["projection"]["collective_basis"]["all_gather"].get<std::string>().find("measured size"),
            std::string::npos);
  // Planted: the calibration's all-gathers stop below the run's largest. Exit 2, one line naming the range.
  auto cal = Calibration::fit(m, "m.json").to_json();
  int64_t largest = 0, kept = 0;
  for (auto& f : cal["collectives"]) {
    if (f["kind"] != "all_gather") continue;
    auto& pts = f["measured"];
    largest = pts.back()[0].get<int64_t>();
    pts.erase(pts.size() - 1);
    ASSERT_FALSE(pts.empty());
    kept = pts.back()[0].get<int64_t>();
    f["max_bytes"] = kept;
  }
  ASSERT_GT(largest, kept * 21 / 20);
  reports::write_json_atomic(dir + "/short.json", cal);
  r = test_support::run_zerobench("project " + dir + "/w1.json --calibration " + dir + "/short.json --nproc 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("all_gather fp32 at W=2 from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::to_string(kept) + " bytes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::to_string(largest) + " bytes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("zerobench micro --for"), std::string::npos) << r.output;
  // --for needs the W to project to, and chooses the sizes itself.
  for (const std::string bad : {"", " --nproc 2 --quick", " --nproc 2 --max-bytes 4096", " --nproc 2 --model small"}) {
    r = test_support::run_zerobench("micro --for " + dir + "/w1.json" + bad + " --out " + dir + "/x.json");
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
  }
  std::system(("rm -rf " + dir).c_str());
}

// The offload quantities follow the same rule: FSDP1 CPUOffload's copies (each unit's shard both
// ways, the grad norm's 4 bytes) and its host AdamW over the rank's shard must be measured.
TEST(ProjectCoverage, OffloadCopiesAndTheHostOptimizerMustLieInTheirMeasuredSizes) {
  auto in = small_fsdp_w2();
  in.options = {{"offload_params", true}};
  const auto need = step_sizes(in);
  ASSERT_FALSE(need.h2d_bytes.empty());
  EXPECT_EQ(need.h2d_bytes, need.d2h_bytes);
  EXPECT_EQ(*need.h2d_bytes.begin(), 4);  // the local grad norm's round trip
  EXPECT_EQ(need.host_optimizer_params, shard_elements("fsdp", in.model, in.options, 2));
  // Collectives covered, offload not measured: refused naming the copies.
  auto cal = Calibration::fit(micro_json(entries_of(need), 2), "exact.json");
  auto why = uncovered(cal, need, "R");
  EXPECT_NE(why.find("has no measured host-to-device copy sizes"), std::string::npos) << why;
  // One block's shard measured (the general suite's size): the other sizes are outside it.
  const int64_t block = *std::next(need.h2d_bytes.begin());
  cal.offload_sizes.h2d_s[block] = cal.offload_sizes.d2h_s[block] = 1e-3;
  why = uncovered(cal, need, "R");
  EXPECT_NE(why.find("measured host-to-device copies of " + std::to_string(block) + " bytes"), std::string::npos) << why;
  // Every copy size and the host AdamW's parameters measured: covered, and a copy priced as measured.
  for (const int64_t b : need.h2d_bytes) cal.offload_sizes.h2d_s[b] = cal.offload_sizes.d2h_s[b] = 1e-3 + double(b) * 1e-12;
  why = uncovered(cal, need, "R");
  EXPECT_NE(why.find("has no measured host AdamW sizes"), std::string::npos) << why;
  cal.offload_sizes.host_adam_ns[need.host_optimizer_params] = 1.0;
  EXPECT_EQ(uncovered(cal, need, "R"), "");
  EXPECT_DOUBLE_EQ(*cal.measured_copy_s(true, block), 1e-3 + double(block) * 1e-12);
  EXPECT_FALSE(cal.measured_copy_s(true, block + 4).has_value());
}
