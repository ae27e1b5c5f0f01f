// intervals.hpp — interval arithmetic on half-open [start, end) intervals: the one definition
// of "covered time", "overlap" and "time not covered" that the measured profile
// (profiler/analysis.cpp: HTA's compute/comm overlap and exposed communication, the host
// source's compute spans) and the projected one (analysis/projection/simulate.cpp: the two
// lanes' overlap) both use, so projected and measured overlap come from the same code. Owns:
// union into a sorted disjoint cover, covered length, intersection length of two covers, and
// an interval minus a cover. Must not: know activities, steps or lanes (its callers do).
// Generic over the time type (int64 ns for traces, double s for the simulator); the ns names
// below are the profiler's.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace zb::profiler {

// Sorted, disjoint cover of `v` (empty intervals dropped; touching ones merged).
template <class T>
std::vector<std::pair<T, T>> union_of(std::vector<std::pair<T, T>> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const std::pair<T, T>& i) { return i.second <= i.first; }), v.end());
  std::sort(v.begin(), v.end());
  std::vector<std::pair<T, T>> out;
  for (const auto& i : v) {
    if (!out.empty() && i.first <= out.back().second)
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return out;
}

// Total length of a disjoint cover (summed in order).
template <class T>
T covered_length(const std::vector<std::pair<T, T>>& disjoint) {
  T n = 0;
  for (const auto& i : disjoint) n += i.second - i.first;
  return n;
}

// Length of the intersection of two disjoint covers (sorted, as union_of returns them).
template <class T>
T intersection_length(const std::vector<std::pair<T, T>>& a, const std::vector<std::pair<T, T>>& b) {
  T n = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const T lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) n += hi - lo;
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return n;
}

// `outer` minus the disjoint cover `holes`: the pieces of `outer` no hole covers, in order.
template <class T>
std::vector<std::pair<T, T>> subtract_cover(std::pair<T, T> outer, const std::vector<std::pair<T, T>>& holes) {
  std::vector<std::pair<T, T>> out;
  T cursor = outer.first;
  for (const auto& h : holes) {
    if (h.second <= cursor) continue;
    if (h.first >= outer.second) break;
    if (h.first > cursor) out.push_back({cursor, h.first});
    cursor = std::max(cursor, h.second);
  }
  if (cursor < outer.second) out.push_back({cursor, outer.second});
  return out;
}

// The profiler's names, in trace nanoseconds.
using Interval = std::pair<int64_t, int64_t>;  // [start, end) ns
std::vector<Interval> interval_union(std::vector<Interval> intervals);
int64_t covered_ns(const std::vector<Interval>& disjoint);
int64_t intersection_ns(const std::vector<Interval>& a, const std::vector<Interval>& b);
std::vector<Interval> subtract(Interval outer, const std::vector<Interval>& holes);

}  // namespace zb::profiler
