// Counted collectives in flight: an async all-gather / reduce-scatter delivers the same bytes as
// the blocking one, is counted when waited for (once), holds its tensors until then, and a
// handle destroyed unwaited still completes; intervals for the host profiler are recorded.
#include <gtest/gtest.h>

#include "backends/common/comm.hpp"
#include "bench/run/rank_record.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::common::CollectiveKind;

TEST(CommAsync, AllGatherAndReduceScatterInFlightMatchTheBlockingResults) {
  test_support::run_ranks(2, [](runtime::World& world) {
    backends::common::Comm comm(world);
    comm.set_interval_recording(true);
    const int r = world.rank;
    auto in = at::full({4}, double(r + 1), at::kFloat);
    auto out = at::empty({8}, at::kFloat);
    auto pending = comm.all_gather_async(out, in, "x");
    EXPECT_TRUE(pending.pending());
    EXPECT_EQ(comm.stats()[size_t(CollectiveKind::kAllGather)].count, 0);  // counted at wait()
    const auto in_uses = in.use_count();
    pending.wait();
    pending.wait();  // idempotent
    EXPECT_FALSE(pending.pending());
    EXPECT_LT(in.use_count(), in_uses);  // the handle let go of its input
    EXPECT_TRUE(out.equal(at::cat({at::full({4}, 1.0, at::kFloat), at::full({4}, 2.0, at::kFloat)})));
    const auto& ag = comm.stats()[size_t(CollectiveKind::kAllGather)];
    EXPECT_EQ(ag.count, 1);
    EXPECT_EQ(ag.bytes, 8 * 4);

    auto grads = at::arange(8, at::kFloat) * double(r + 1);  // ranks hold g and 2g
    auto shard = at::empty({4}, at::kFloat);
    {
      auto rs = comm.reduce_scatter_sum_async(shard, grads, "y");
    }  // destroyed unwaited: it waits
    EXPECT_TRUE(shard.equal(at::arange(4 * r, 4 * r + 4, at::kFloat) * 3.0));
    EXPECT_EQ(comm.stats()[size_t(CollectiveKind::kReduceScatter)].bytes, 8 * 4);

    const auto intervals = comm.take_intervals();
    ASSERT_EQ(intervals.size(), 2u);
    EXPECT_EQ(intervals[0].label, "x");
    for (const auto& i : intervals) {
      EXPECT_LE(i.start_ns, i.end_ns);
      EXPECT_LE(i.wait_start_ns, i.wait_end_ns);
    }
    EXPECT_TRUE(comm.take_intervals().empty());
  });
}

// all_to_all_single (ZeRO++ qgZ's collective): rank j's chunk r lands in rank r's chunk j; counted
// once with the send buffer's bytes (nccl-tests alltoall); in the report's comm only once issued, so
// the report of a run without all-to-all keeps exactly its four kinds.
TEST(CommAllToAll, DeliversChunkRToRankRAndCountsTheSendBuffer) {
  for (const int w : {2, 3}) {
    test_support::run_ranks(w, [w](runtime::World& world) {
      backends::common::Comm comm(world);
      const int r = world.rank;
      EXPECT_FALSE(bench::comm_records(comm.stats(), comm.size()).count("all_to_all"));
      EXPECT_TRUE(bench::comm_records(comm.stats(), comm.size()).count("broadcast"));
      auto in = at::arange(2 * w, at::kFloat) + 100.0 * r;  // [w chunks of 2]: rank r's chunk j = 100r + 2j + {0,1}
      auto out = at::empty({2 * w}, at::kFloat);
      comm.all_to_all_single(out, in, "grads");
      for (int j = 0; j < w; ++j)  // out chunk j = rank j's chunk r
        EXPECT_TRUE(out.slice(0, 2 * j, 2 * j + 2).equal(at::arange(2 * r, 2 * r + 2, at::kFloat) + 100.0 * j))
            << "W=" << w << " rank " << r << " chunk " << j;
      auto pending = comm.all_to_all_single_async(out, in, "grads");
      pending.wait();
      const auto& s = comm.stats()[size_t(CollectiveKind::kAllToAll)];
      EXPECT_EQ(s.count, 2);
      EXPECT_EQ(s.bytes, 2 * (2 * w) * 4);
      const auto j = bench::comm_records(comm.stats(), comm.size());
      ASSERT_TRUE(j.count("all_to_all"));
      EXPECT_EQ(j.at("all_to_all").bytes, 2 * (2 * w) * 4);
      EXPECT_DOUBLE_EQ(backends::common::busbw_factor(CollectiveKind::kAllToAll, w), double(w - 1) / w);
      auto bad = at::empty({2 * w + 1}, at::kFloat);  // numel not a multiple of the group: refused
      EXPECT_THROW(comm.all_to_all_single(bad, bad, "bad"), c10::Error);
    });
  }
}

// --emulate-world-size: one process plays rank 1 of 4; the all-to-all keeps shapes and bytes and
// fills every chunk with this rank's own chunk (as if every rank held this rank's data).
TEST(CommAllToAll, EmulatedWorldKeepsBytesAndCopiesThisRanksChunk) {
  auto world = runtime::init_emulated_world(1, 4, at::kCPU);
  backends::common::Comm comm(world);
  comm.streams().set_logging(true);
  auto in = at::arange(8, at::kFloat);
  auto out = at::zeros({8}, at::kFloat);
  comm.all_to_all_single(out, in, "q");
  EXPECT_TRUE(out.equal(at::tensor({2.f, 3.f, 2.f, 3.f, 2.f, 3.f, 2.f, 3.f})));
  const auto& s = comm.stats()[size_t(CollectiveKind::kAllToAll)];
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.bytes, 8 * 4);
  EXPECT_EQ(s.not_measured, 1);
  EXPECT_FALSE(bench::comm_records(comm.stats(), comm.size()).at("all_to_all").busbw_gbps.has_value());
  // The dependency log has it as a collective named by kind and label, and its wait.
  using E = backends::common::StreamLogEntry;
  EXPECT_GE(comm.streams().find(E::Kind::kCollective, "", "all_to_all:q"), 0) << comm.streams().dump();
  EXPECT_GE(comm.streams().find(E::Kind::kWaitCollective, "", "q"), 0) << comm.streams().dump();
}
