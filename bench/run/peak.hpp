// peak.hpp — the peak FLOP/s that MFU divides by. Owns: choosing it (flag > datasheet for a
// known GPU > a GEMM measured here, in the run's compute dtype) and saying which it used. The
// GEMM is the micro-benchmark suite's probe (analysis/micro/gemm.hpp): the same kernel and shape
// as the suite's `gemm/<dtype>/square` entry, so `zerobench micro` reproduces a run's peak.
#pragma once
#include <ATen/ATen.h>

#include <string>

namespace zb::bench {

struct Peak {
  double tflops = 0;
  std::string source;              // "flag", "datasheet: NVIDIA A100...", "measured: BFloat16 GEMM 512^3 x.W^T on cpu"
  double measured_gemm_tflops = 0; // 0 if not measured
};

// The peak probe's GEMM throughput on `device` in `dtype` (micro::peak_probe_shape: square, a
// Linear's forward layout; warm-up, then ~0.3 s of repeats).
double measure_gemm_tflops(at::Device device, at::ScalarType dtype);

Peak resolve_peak(double flag_tflops, at::Device device, at::ScalarType compute_dtype);

}  // namespace zb::bench
