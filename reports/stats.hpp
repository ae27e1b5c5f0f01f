// stats.hpp — the statistics behind `zerobench regress` (Mann-Whitney U) and `zerobench compare`
// (distribution-free confidence intervals for a median). Owns: these formulas. Must not: know what
// the numbers are (step times, ratios) or read reports.
#pragma once
#include <vector>

namespace zb::reports {

// One-sided Mann-Whitney U test: p-value for "samples of `a` tend to be greater than `b`",
// normal approximation with tie and continuity correction (fine for n >= 5 per side).
double mann_whitney_greater_p(const std::vector<double>& a, const std::vector<double>& b);

// Median (mean of the two middle values for even n); NaN for an empty sample.
double median(std::vector<double> v);

// A confidence interval for the population median from order statistics: [x_(k), x_(n+1-k)] of
// the sorted sample. Distribution-free: it assumes only independent draws from one continuous
// distribution, and its coverage is exact, 1 - 2 * P(Binomial(n, 1/2) <= k - 1) (Conover,
// "Practical Nonparametric Statistics", 3rd ed., §3.2; Hollander & Wolfe §3.6). k is the largest
// whose coverage is at least `level`; when even k = 1 (the sample's min and max) falls short (n < 6
// for 0.95) the interval is [min, max] and `coverage` says what it really is. n = 0: all NaN.
struct MedianInterval {
  double median = 0, lo = 0, hi = 0;
  double coverage = 0;  // exact confidence of [lo, hi] (0 for n = 0; 1 side of it is n = 1's point)
  int n = 0;            // sample size
  int k = 0;            // lo = k-th smallest, hi = k-th largest (1-based); 0 for n = 0
};
MedianInterval median_interval(const std::vector<double>& sample, double level = 0.95);

// Coverage of [x_(k), x_(n+1-k)] for the median of n draws: 1 - 2 * P(Binomial(n, 1/2) <= k - 1).
double order_statistic_coverage(int n, int k);

}  // namespace zb::reports
