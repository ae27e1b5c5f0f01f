// stats.hpp — the significance test behind `zerobench regress`.
#pragma once
#include <vector>

namespace zb::reports {

// One-sided Mann-Whitney U test: p-value for "samples of `a` tend to be greater than `b`",
// normal approximation with tie and continuity correction (fine for n >= 5 per side).
double mann_whitney_greater_p(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace zb::reports
