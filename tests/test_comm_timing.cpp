// Comm's timing, where it would mislead: emulated collectives (local copies) are reported as not
// measured — no time, no busbw — and the NCCL timing handles a Comm keeps until
// collect_device_times() stay bounded when it is never called (the side channel), without losing
// the durations of those that completed. The NCCL device-timing path runs on CPU here through a
// process group that says it is NCCL: durations to time and busbw, and a duration NCCL cannot
// give (timing off) counted as untimed with its reason.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "backends/common/comm.hpp"
#include "bench/run/rank_record.hpp"
#include "reports/report.hpp"
#include "reports/run_report.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::common::CollectiveKind;
using backends::common::Comm;

namespace {
// A process group that says it is NCCL: each all-reduce's work reports a fixed device duration,
// complete or not as asked (what WorkNCCL::getDuration / isCompleted give after its end event).
// `timed` false: getDuration throws as WorkNCCL's does when the group's timing is off.
class TimedWork final : public c10d::Work {
 public:
  TimedWork(bool completed, bool timed) : completed_(completed), timed_(timed) {}
  bool isCompleted() override { return completed_; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds = kNoTimeout) override { return true; }
  float getDuration() const override {
    if (!timed_) throw std::runtime_error("getDuration only works if timing was enabled");
    return 0.25f;  // ms
  }

 private:
  bool completed_, timed_;
};

class TimedBackend final : public c10d::Backend {
 public:
  TimedBackend(int size, bool completed, bool timed) : c10d::Backend(0, size), completed_(completed), timed_(timed) {}
  const std::string getBackendName() const override { return "timed"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&, const c10d::AllreduceOptions&) override {
    return c10::make_intrusive<TimedWork>(completed_, timed_);
  }

 private:
  bool completed_, timed_;
};

runtime::World timed_world(bool completed, bool timed = true) {
  runtime::World w;
  w.size = 2;
  w.pg_backend = "nccl";  // Comm keeps a timing handle per collective, as on NCCL
  w.store = c10::make_intrusive<c10d::HashStore>();
  w.pg = c10::make_intrusive<TimedBackend>(2, completed, timed);
  return w;
}
}  // namespace

TEST(CommTiming, TimingHandlesStayBoundedAndCompletedDurationsAreKept) {
  const int n = 1000;
  Comm comm(timed_world(/*completed=*/true));
  auto t = at::ones({4});
  size_t most = 0;
  for (int i = 0; i < n; ++i) {
    comm.all_reduce_sum(t, "x");
    most = std::max(most, comm.pending_timing_handles());
  }
  EXPECT_LE(most, Comm::kMaxTimingHandles);
  comm.collect_device_times();
  EXPECT_EQ(comm.pending_timing_handles(), 0u);
  const auto& s = comm.stats()[size_t(CollectiveKind::kAllReduce)];
  EXPECT_EQ(s.count, n);
  EXPECT_EQ(s.untimed, 0);
  EXPECT_NEAR(s.time_s, n * 0.25e-3, 1e-12);  // every duration read once, none lost or doubled
}

TEST(CommTiming, HandlesThatNeverCompleteAreDroppedAsUntimedNotKeptForever) {
  const int n = 1000;
  Comm comm(timed_world(/*completed=*/false));
  auto t = at::ones({4});
  for (int i = 0; i < n; ++i) comm.all_reduce_sum(t, "x");
  EXPECT_EQ(comm.pending_timing_handles(), Comm::kMaxTimingHandles);
  const auto& s = comm.stats()[size_t(CollectiveKind::kAllReduce)];
  EXPECT_EQ(s.untimed, int64_t(n - Comm::kMaxTimingHandles));
  EXPECT_NE(comm.timing_error().find("without device time"), std::string::npos) << comm.timing_error();
  comm.collect_device_times();  // the kept ones are read after the step's sync
  EXPECT_NEAR(s.time_s, double(Comm::kMaxTimingHandles) * 0.25e-3, 1e-12);
}

TEST(CommTiming, DeviceDurationsGiveBusbwAndOnesNcclCannotGiveAreCountedUntimedWithTheReason) {
  const int n = 10;
  auto t = at::ones({4});  // 16 bytes
  Comm timed(timed_world(/*completed=*/true));
  for (int i = 0; i < n; ++i) timed.all_reduce_sum(t, "x");
  timed.collect_device_times();
  // busbw = bytes / time x 2(W-1)/W (nccl-tests): 160 B / 2.5 ms x 1 = 64000 B/s.
  const auto j = bench::comm_records(timed.stats(), timed.size()).at("all_reduce");
  EXPECT_EQ(j.bytes, n * 16);
  EXPECT_NEAR(j.time_s.value(), n * 0.25e-3, 1e-15);  // a sum of n float ms / 1e3
  EXPECT_NEAR(j.busbw_gbps.value(), 64000 / 1e9, 1e-15);
  EXPECT_FALSE(j.untimed.has_value());
  EXPECT_TRUE(timed.timing_error().empty());

  Comm untimed(timed_world(/*completed=*/true, /*timed=*/false));
  for (int i = 0; i < n; ++i) untimed.all_reduce_sum(t, "x");
  untimed.collect_device_times();
  const auto u = bench::comm_records(untimed.stats(), untimed.size()).at("all_reduce");
  EXPECT_EQ(u.count, n);
  EXPECT_EQ(u.untimed, n);
  EXPECT_EQ(u.time_s.value(), 0.0);
  EXPECT_EQ(u.busbw_gbps.value(), 0.0);  // no time: no bandwidth, not a division by zero
  EXPECT_EQ(untimed.timing_error(), "all_reduce: getDuration only works if timing was enabled");
  EXPECT_EQ(untimed.pending_timing_handles(), 0u);
}

TEST(CommTiming, EmulatedCollectivesAreReportedAsNotMeasured) {
  auto world = runtime::init_emulated_world(1, 4, at::kCPU);
  Comm comm(world);
  auto in = at::ones({8}), out = at::empty({32}), g = at::ones({32}), shard = at::empty({8});
  comm.all_gather(out, in, "w");
  comm.reduce_scatter_sum(shard, g, "g");
  comm.all_reduce_sum(shard, "n");
  // As the report writes them (bench/run/rank_record.hpp): null, never a number.
  const auto records = bench::comm_records(comm.stats(), comm.size());
  for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce"}) {
    SCOPED_TRACE(kind);
    reports::RankRecord rank;
    rank.comm[kind] = records.at(kind);
    const auto j = reports::to_json(rank)["comm"][kind];
    EXPECT_EQ(j["count"], 1);
    EXPECT_EQ(j["not_measured"], 1);
    EXPECT_TRUE(j["time_s"].is_null());
    EXPECT_TRUE(j["busbw_gbps"].is_null());
    EXPECT_NE(j["timing"].get<std::string>().find("not measured"), std::string::npos);
  }
  EXPECT_EQ(records.at("all_gather").bytes, 32 * 4);  // bytes still counted as the real collective's
  // A real (Gloo) group measures: a number, no not_measured.
  test_support::run_ranks(2, [](runtime::World& w) {
    Comm c(w);
    auto x = at::ones({8});
    c.all_reduce_sum(x, "n");
    const auto k = bench::comm_records(c.stats(), c.size()).at("all_reduce");
    EXPECT_TRUE(k.time_s.has_value());
    EXPECT_TRUE(k.busbw_gbps.has_value());
    EXPECT_FALSE(k.not_measured.has_value());
  });
}

TEST(CommTiming, AnEmulatedRunsReportGivesNoCommTimeOrBusbw) {
  const auto out = test_support::temp_path("emu_timing.json");
  const auto r = test_support::run_zerobench(
      "run --emulate-world-size 2 --model tiny --layers 1 --vocab 256 --micro-batch 1 --seq-len 16 --steps 1 "
      "--warmup 0 --backend fsdp --precision mixed --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = reports::read_report(out);
  std::remove(out.c_str());
  const auto& ag = report["ranks"][0]["comm"]["all_gather"];
  EXPECT_GT(ag["count"].get<int64_t>(), 0);
  EXPECT_TRUE(ag["busbw_gbps"].is_null()) << ag.dump();
  EXPECT_TRUE(ag["time_s"].is_null()) << ag.dump();
}
