// The one interval library (profiler/intervals.hpp) that the measured profile
// (profiler/analysis.cpp) and the projection's simulator (analysis/projection/simulate.cpp) both
// use: union, covered length, intersection, subtraction, in trace nanoseconds and in seconds,
// and the simulator's overlap numbers read back from its own spans with the same functions.
#include <gtest/gtest.h>

#include "analysis/projection/simulate.hpp"
#include "profiler/intervals.hpp"

using namespace zb;
using profiler::Interval;

namespace {
using Iv = std::pair<double, double>;
}  // namespace

TEST(Intervals, UnionSortsMergesTouchingAndDropsEmpty) {
  EXPECT_EQ(profiler::union_of<double>({{5, 9}, {0, 3}, {2, 4}, {9, 10}, {7, 7}, {12, 11}}),
            (std::vector<Iv>{{0, 4}, {5, 10}}));
  EXPECT_TRUE(profiler::union_of<double>({}).empty());
  EXPECT_EQ(profiler::interval_union({{3, 4}, {1, 2}}), (std::vector<Interval>{{1, 2}, {3, 4}}));
}

TEST(Intervals, CoveredIntersectionAndSubtractionAgreeAcrossUnits) {
  const std::vector<Iv> a = {{0, 4}, {5, 10}}, b = {{3, 6}, {8, 20}};
  EXPECT_DOUBLE_EQ(profiler::covered_length(a), 9.0);
  EXPECT_DOUBLE_EQ(profiler::intersection_length(a, b), 1 + 1 + 2);
  EXPECT_DOUBLE_EQ(profiler::intersection_length(b, a), 1 + 1 + 2);  // symmetric
  EXPECT_DOUBLE_EQ(profiler::intersection_length<double>({}, a), 0.0);
  EXPECT_EQ(profiler::subtract_cover<double>({0, 10}, {{-5, 1}, {3, 4}, {9, 12}}), (std::vector<Iv>{{1, 3}, {4, 9}}));
  EXPECT_EQ(profiler::subtract_cover<double>({0, 10}, {{0, 10}}), std::vector<Iv>{});
  // The profiler's nanosecond names are the same functions.
  EXPECT_EQ(profiler::covered_ns({{0, 4}, {5, 10}}), 9);
  EXPECT_EQ(profiler::intersection_ns({{0, 4}, {5, 10}}, {{3, 6}, {8, 20}}), 4);
  EXPECT_EQ(profiler::subtract({0, 10}, {{-5, 1}, {3, 4}, {9, 12}}), (std::vector<Interval>{{1, 3}, {4, 9}}));
}

// A CPU program: compute 0-4, an all-gather issued at 4 (3 s) overlapping compute 4-6, a wait,
// compute 7-9, then a reduce-scatter 9-11 that nothing overlaps. The simulator's totals are
// what the interval functions give on its spans, in seconds and (scaled) in nanoseconds.
TEST(Intervals, SimulatedOverlapIsTheIntervalLibrarysOnItsSpans) {
  using backends::common::CollectiveKind;
  analysis::projection::Program p;
  p.compute("F0", 4);
  const int ag = p.issue(CollectiveKind::kAllGather, "unit1", 64, 3, false);
  p.compute("F1", 2);
  p.wait(ag);
  p.compute("B1", 2);
  const int rs = p.issue(CollectiveKind::kReduceScatter, "unit1", 64, 2, true);
  p.wait(rs);
  const auto t = analysis::projection::simulate(p, analysis::projection::ExecModel::kHostIsDevice);
  EXPECT_DOUBLE_EQ(t.step_s, 11.0);
  EXPECT_DOUBLE_EQ(t.compute_s, 8.0);
  EXPECT_DOUBLE_EQ(t.comm_s, 5.0);
  EXPECT_DOUBLE_EQ(t.comm_overlapped_s, 2.0);
  EXPECT_DOUBLE_EQ(t.exposed_comm_s, 3.0);
  std::vector<Iv> compute, comm;
  std::vector<Interval> compute_ns, comm_ns;
  for (const auto& s : t.spans) {
    (s.comm ? comm : compute).push_back({s.start_s, s.end_s});
    (s.comm ? comm_ns : compute_ns).push_back({int64_t(s.start_s * 1e9), int64_t(s.end_s * 1e9)});
  }
  const auto cu = profiler::union_of(compute), co = profiler::union_of(comm);
  EXPECT_EQ(t.compute_s, profiler::covered_length(cu));
  EXPECT_EQ(t.comm_overlapped_s, profiler::intersection_length(co, cu));
  EXPECT_EQ(int64_t(t.comm_overlapped_s * 1e9),
            profiler::intersection_ns(profiler::interval_union(comm_ns), profiler::interval_union(compute_ns)));
}
