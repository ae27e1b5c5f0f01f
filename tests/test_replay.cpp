// The projection's schedule validated apart from its costs (analysis/projection/replay.hpp): the
// recorded traces in tests/data/replay/ (scripts/record-replay-traces.sh: tiny model, Gloo, W=2
// and W=4, 2 traced steps) replayed through each engine's schedule with their own per-op
// durations must land within 5% of the measured step on every rank and step; planted schedule
// faults (a schedule that waits for every collective at once, one that issues other
// collectives) must miss; the trace reader on a hand-built trace with exact answers. Nothing
// here measures time: the traces were recorded once.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "analysis/projection/replay.hpp"
#include "models/model_config.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using namespace zb::analysis::projection;
using nlohmann::json;

namespace {
const std::string kData = std::string(zb::bench::source_dir()) + "/tests/data/replay/";

json load(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

struct Recorded {
  json report, trace;
};
Recorded recorded(const std::string& name) { return {load(kData + name + ".report.json"), load(kData + name + ".trace.json")}; }

const std::vector<std::string> kCells = {"ddp_w2",   "fsdp_w2",  "fsdp2_w2", "zero3_w2", "zero3_small_buckets_w2",
                                         "ddp_w4",   "fsdp_w4",  "fsdp2_w4", "zero3_w4", "zero3_small_buckets_w4"};

// The program an engine's schedule builds for a traced step, with placeholder collective costs.
Program program_for(const ScheduleInput& base, const TracedStep& s) {
  ScheduleInput in = base;
  in.costs = s.costs;
  return build_program(in, zero_cost_calibration(in.world));
}

// The planted fault: the same program, but every collective waited for as soon as it is issued
// (no prefetch, no reduce-scatter left in flight) — a wrong "which op waits for which".
Program waiting_at_once(const Program& p) {
  Program q;
  for (const auto& a : p.actions()) {
    if (a.kind == Action::kCompute) {
      q.compute(a.name, a.duration_s);
    } else if (a.kind == Action::kIssue) {
      const int id = q.issue(a.coll, a.name.substr(a.name.find(' ') + 1), a.bytes, a.duration_s, a.after_compute);
      q.wait(id);
    } else if (a.kind == Action::kWait) {
      q.wait(a.target);
    }
  }
  return q;
}
}  // namespace

TEST(Replay, EveryBackendsScheduleReplaysItsOwnTraceWithinFivePercentOnEveryRankAndStep) {
  for (const auto& cell : kCells) {
    const auto r = recorded(cell);
    const auto out = replay(r.report, r.trace);
    const int W = r.report["env"]["world_size"];
    ASSERT_EQ(out["steps"].size(), size_t(2 * W)) << cell;  // 2 traced steps per rank
    for (const auto& s : out["steps"]) {
      EXPECT_LT(std::abs(s["error"].get<double>()), 0.05)
          << cell << " rank " << s["rank"] << " step " << s["step"] << ": measured " << s["measured_s"] << " s, replayed "
          << s["replayed_s"] << " s";
      EXPECT_GT(s["collectives"].get<int>(), 0) << cell;
    }
    EXPECT_LT(out["max_abs_error"].get<double>(), 0.05) << cell;
  }
}

TEST(Replay, AScheduleThatWaitsForEveryCollectiveAtOnceMissesByMoreThanFivePercent) {
  // Where collectives overlap compute in the engine (FSDP's and FSDP2's prefetches and
  // reduce-scatters, ZeRO-3's with small buckets), waiting at once must show in the replay.
  for (const std::string cell : {"fsdp_w2", "fsdp_w4", "fsdp2_w2", "fsdp2_w4", "zero3_small_buckets_w2",
                                 "zero3_small_buckets_w4"}) {
    const auto r = recorded(cell);
    const auto in = schedule_input_of_report(r.report);
    double worst = 0;
    for (const auto& s : traced_steps(r.trace, in.train.grad_accum)) {
      EXPECT_LT(std::abs(replay_step(in, s).error()), 0.05) << cell;
      worst = std::max(worst, std::abs(replay_program(waiting_at_once(program_for(in, s)), s).error()));
    }
    EXPECT_GT(worst, 0.05) << cell << ": a schedule with no overlap replays within 5% — the gate cannot see it";
  }
}

TEST(Replay, AScheduleThatIssuesOtherCollectivesThanTheTraceIsRefusedNamingTheFirst) {
  auto r = recorded("zero3_small_buckets_w2");
  r.report["config"]["backend"]["options"]["reduce_bucket_size"] = 30000;  // other buckets than the run's
  try {
    replay(r.report, r.trace);
    FAIL() << "a schedule with other reduce-scatter buckets replayed";
  } catch (const RunError& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter bucket"), std::string::npos) << e.what();
  }
  r = recorded("fsdp_w2");
  r.report["config"]["model"]["layers"] = 3;  // a unit the run did not have
  EXPECT_THROW(replay(r.report, r.trace), std::exception);
}

TEST(Replay, TheTraceReaderTakesWindowsCallsAndWakeUpsFromTheTraceExactly) {
  // One DDP step on rank 0 of a W=2 tiny run (one gradient bucket), in microseconds: forward
  // [10, 40), backward [40, 80), the bucket's all-reduce issued at 80 (its call [80, 81) on the
  // training thread), Gloo's completion stamp at 83.5, the thread back at 84 (blocked [81, 84)),
  // optimizer [86, 95), compute to 96. The window is [10, 96); the replay must give it back.
  const auto model = models::preset("tiny");
  const int64_t bytes = models::count_params(model).total * 4;
  auto x = [](const std::string& name, int64_t tid, double ts, double dur) {
    return json{{"ph", "X"}, {"name", name}, {"pid", 0}, {"tid", tid}, {"ts", ts}, {"dur", dur}};
  };
  const int64_t R = 1000000, C = 1000002, X = 1000003;  // profiler/chrome_trace.hpp's lanes
  json ev = json::array({x("step 7", R, 0, 100), x("data", R, 1, 8), x("forward", R, 10, 30), x("backward", R, 40, 40),
                         x("all_reduce grads", R, 80, 1), x("optimizer_step", R, 86, 9), x("training thread", C, 10, 71),
                         x("training thread", C, 84, 12), x("all_reduce grads", X, 80, 3.5)});
  ev.back()["args"] = {{"bytes", bytes}};
  const json trace = {{"traceEvents", ev}};
  const auto steps = traced_steps(trace, 1);
  ASSERT_EQ(steps.size(), 1u);
  const auto& s = steps[0];
  EXPECT_EQ(s.step, 7);
  EXPECT_NEAR(s.window_s, 86e-6, 1e-12);
  ASSERT_EQ(s.collectives.size(), 1u);
  EXPECT_NEAR(s.collectives[0].issue_s, 70e-6, 1e-12);
  EXPECT_NEAR(s.collectives[0].call_s, 1e-6, 1e-12);
  EXPECT_NEAR(s.collectives[0].complete_s, 73.5e-6, 1e-12);
  EXPECT_NEAR(s.collectives[0].resumed_s, 74e-6, 1e-12);  // the end of the wait it completed in
  EXPECT_NEAR(s.costs.forward_s.at(0), 30e-6, 1e-12);
  EXPECT_NEAR(s.costs.backward_s.at(0), 40e-6, 1e-12);  // the issue call taken out
  EXPECT_NEAR(s.costs.optimizer_s, 9e-6, 1e-12);
  EXPECT_NEAR(s.costs.other_s, 3e-6, 1e-12);  // compute 82 = 30 + 40 + 9 + 3 (+ the call's 1)
  // F [0,30) B [30,70) call [70,71) all-reduce [71,74) optimizer [74,83) other [83,86).
  const auto r = replay_step(schedule_input_of_report(recorded("ddp_w2").report), s);
  EXPECT_NEAR(r.replayed_s, 86e-6, 1e-12);
  EXPECT_NEAR(r.error(), 0.0, 1e-9);
}

TEST(ReplayCli, PrintsReplayedBesideMeasuredAndRefusesBadInputWithExitTwo) {
  auto res = test_support::run_zerobench("project " + kData + "fsdp_w2.report.json --replay " + kData + "fsdp_w2.trace.json");
  ASSERT_EQ(res.exit_code, 0) << res.output;
  EXPECT_NE(res.output.find("| fsdp | 2 | 0 |"), std::string::npos) << res.output;
  EXPECT_NE(res.output.find("largest |error|"), std::string::npos) << res.output;
  res = test_support::run_zerobench("project " + kData + "fsdp_w2.report.json --replay /nonexistent.json");
  EXPECT_EQ(res.exit_code, 2) << res.output;
  res = test_support::run_zerobench("project " + kData + "fsdp_w2.report.json --replay " + kData + "fsdp_w2.report.json");
  EXPECT_EQ(res.exit_code, 2) << res.output;  // a report is not a trace
  res = test_support::run_zerobench("project " + kData + "fsdp_w2.report.json");
  EXPECT_EQ(res.exit_code, 2) << res.output;  // neither --calibration nor --replay
}
