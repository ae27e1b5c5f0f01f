// metrics.hpp — every throughput metric zerobench reports, one definition each (DESIGN §4).
// Owns: the formulas. Must not: measure anything (callers pass measured numbers in).
#pragma once
#include <cstdint>
#include <vector>

namespace zb::reports {

struct Distribution {
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0, mean = 0;
  int64_t n = 0;
};
// Percentiles by linear interpolation between order statistics (numpy's default).
Distribution summarize(std::vector<double> samples);
double percentile(std::vector<double> sorted_samples, double q);

// tokens per GPU per second = tokens one rank processes per optimizer step / step time.
double tokens_per_gpu_per_s(int64_t tokens_per_rank_per_step, double step_time_s);
// Model FLOPs utilisation: flops_per_token * tokens/GPU/s / peak. With 6N per token this is the
// blog's mfu_6n; with 6*N_non_emb + 12*L*H*Q*T it is PaLM/torchtitan's mfu; with recompute, hfu.
double flops_utilisation(double flops_per_token, double tokens_per_gpu_per_s, double peak_tflops);
// nccl-tests: algbw = bytes / time; busbw = algbw * factor.
double bus_bandwidth_gbps(int64_t bytes, double seconds, double factor);

}  // namespace zb::reports
