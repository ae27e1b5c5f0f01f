// intervals.cpp — the nanosecond instances of the interval arithmetic (see intervals.hpp).
#include "profiler/intervals.hpp"

namespace zb::profiler {

std::vector<Interval> interval_union(std::vector<Interval> v) { return union_of(std::move(v)); }
int64_t covered_ns(const std::vector<Interval>& d) { return covered_length(d); }
int64_t intersection_ns(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  return intersection_length(a, b);
}
std::vector<Interval> subtract(Interval outer, const std::vector<Interval>& holes) {
  return subtract_cover(outer, holes);
}

}  // namespace zb::profiler
