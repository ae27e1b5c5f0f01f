// metrics.cpp — metric formulas (see metrics.hpp).
#include "reports/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zb::reports {

double percentile(std::vector<double> s, double q) {
  if (s.empty()) return 0.0;
  std::sort(s.begin(), s.end());
  const double pos = q * double(s.size() - 1);
  const auto lo = size_t(std::floor(pos));
  const auto hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (s[hi] - s[lo]) * (pos - double(lo));
}

Distribution summarize(std::vector<double> s) {
  Distribution d;
  d.n = int64_t(s.size());
  if (s.empty()) return d;
  std::sort(s.begin(), s.end());
  d.median = percentile(s, 0.5);
  d.p10 = percentile(s, 0.1);
  d.p90 = percentile(s, 0.9);
  d.min = s.front();
  d.max = s.back();
  d.mean = std::accumulate(s.begin(), s.end(), 0.0) / double(s.size());
  return d;
}

double tokens_per_gpu_per_s(int64_t tokens_per_rank_per_step, double step_time_s) {
  return step_time_s > 0 ? double(tokens_per_rank_per_step) / step_time_s : 0.0;
}

double flops_utilisation(double flops_per_token, double tokens_per_gpu_per_s, double peak_tflops) {
  return peak_tflops > 0 ? flops_per_token * tokens_per_gpu_per_s / (peak_tflops * 1e12) : 0.0;
}

double bus_bandwidth_gbps(int64_t bytes, double seconds, double factor) {
  return seconds > 0 ? double(bytes) / seconds * factor / 1e9 : 0.0;
}

}  // namespace zb::reports
