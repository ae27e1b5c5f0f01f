// stats.cpp — Mann-Whitney U and the order-statistic median interval (see stats.hpp).
#include "reports/stats.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace zb::reports {

double mann_whitney_greater_p(const std::vector<double>& a, const std::vector<double>& b) {
  const double n1 = double(a.size()), n2 = double(b.size());
  if (a.empty() || b.empty()) return 1.0;
  std::vector<std::pair<double, int>> all;
  for (double v : a) all.emplace_back(v, 0);
  for (double v : b) all.emplace_back(v, 1);
  std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  // Mid-ranks for ties; tie term sum(t^3 - t) for the variance.
  double rank_sum_a = 0, tie_term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double mid = (double(i) + double(j) + 1) / 2.0;  // ranks are 1-based
    for (size_t k = i; k < j; ++k)
      if (all[k].second == 0) rank_sum_a += mid;
    const double t = double(j - i);
    tie_term += t * t * t - t;
    i = j;
  }
  const double u = rank_sum_a - n1 * (n1 + 1) / 2.0;  // U for a
  const double n = n1 + n2;
  const double mean = n1 * n2 / 2.0;
  const double var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)));
  if (var <= 0) return u > mean ? 0.0 : 1.0;
  const double z = (u - mean - 0.5) / std::sqrt(var);  // continuity correction toward the null
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

}  // namespace zb::reports

namespace zb::reports {

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double order_statistic_coverage(int n, int k) {
  if (n <= 0 || k <= 0 || 2 * k > n + 1) return 0.0;
  // P(Bin(n, 1/2) <= k - 1) = sum_{i < k} C(n, i) / 2^n, in logs so n in the thousands is fine.
  double tail = 0;
  for (int i = 0; i < k; ++i)
    tail += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::max(0.0, 1.0 - 2.0 * tail);
}

MedianInterval median_interval(const std::vector<double>& sample, double level) {
  MedianInterval r;
  r.n = int(sample.size());
  if (sample.empty()) {
    r.median = r.lo = r.hi = std::nan("");
    return r;
  }
  std::vector<double> v = sample;
  std::sort(v.begin(), v.end());
  r.median = median(v);
  int k = 1;
  while (2 * (k + 1) <= r.n + 1 && order_statistic_coverage(r.n, k + 1) >= level) ++k;
  r.k = k;
  r.lo = v[size_t(k - 1)];
  r.hi = v[size_t(r.n - k)];
  r.coverage = r.n == 1 ? 0.0 : order_statistic_coverage(r.n, k);
  return r;
}

}  // namespace zb::reports
