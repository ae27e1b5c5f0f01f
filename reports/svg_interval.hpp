// svg_interval.hpp — an SVG chart of point estimates with error bars (a median and its interval
// per label), optionally with a dashed reference line (e.g. a ratio of 1). Used by `zerobench
// compare`'s HTML; `zerobench table` can draw its intervals the same way.
// Owns: the layout of this one chart kind. Must not: compute the intervals (reports/stats.hpp).
#pragma once
#include <string>
#include <vector>

namespace zb::reports::svg {

struct IntervalPoint {
  std::string label;
  double value = 0, lo = 0, hi = 0;  // NaN value: the label is drawn as "no data"
};

// One marker per label with a whisker from lo to hi; reference_y NaN for none.
std::string interval_chart(const std::string& title, const std::vector<IntervalPoint>& points,
                           const std::string& y_label, double reference_y, const std::string& reference_label);

}  // namespace zb::reports::svg
