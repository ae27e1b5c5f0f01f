// Counted collectives in flight: an async all-gather / reduce-scatter delivers the same bytes as
// the blocking one, is counted when waited for (once), holds its tensors until then, and a
// handle destroyed unwaited still completes; intervals for the host profiler are recorded.
#include <gtest/gtest.h>

#include "backends/common/comm.hpp"
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
