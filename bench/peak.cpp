// peak.cpp — peak FLOP/s resolution (see peak.hpp); the GEMM itself is bench/micro/gemm.
#include "bench/peak.hpp"

#include "bench/micro/gemm.hpp"
#include "runtime/device.hpp"

namespace zb::bench {

double measure_gemm_tflops(at::Device device, at::ScalarType dtype, int64_t n) {
  micro::Gemm gemm(device, dtype, {"square", n, n, n});
  return micro::measure_tflops(gemm, device);
}

Peak resolve_peak(double flag_tflops, at::Device device, at::ScalarType compute_dtype) {
  Peak p;
  if (flag_tflops > 0) {
    p.tflops = flag_tflops;
    p.source = "flag";
    return p;
  }
  const std::string name = runtime::device_name(device);
  if (device.is_cuda()) {
    // Always probe a large GEMM in the compute dtype on a GPU: MFU against the datasheet and
    // against what this device's cuBLAS actually reaches are both reported. An fp32 cell's
    // matmuls run on TF32 tensor cores only when cuBLAS may use TF32
    // (torch.backends.cuda.matmul.allow_tf32 / float32_matmul_precision; off by default).
    p.measured_gemm_tflops = measure_gemm_tflops(device, compute_dtype, micro::peak_probe_shape(device, compute_dtype).n);
    const std::string math =
        compute_dtype == at::kFloat ? (at::globalContext().allowTF32CuBLAS() ? "tf32" : "fp32") : "bf16";
    if (auto dt = runtime::datasheet_peak_tflops(name, math)) {
      p.tflops = *dt;
      p.source = "datasheet: " + name + " dense " + math;
      return p;
    }
  }
  const int64_t n = micro::peak_probe_shape(device, compute_dtype).n;
  p.measured_gemm_tflops = measure_gemm_tflops(device, compute_dtype, n);
  p.tflops = p.measured_gemm_tflops;
  p.source = "measured: " + std::string(c10::toString(compute_dtype)) + " GEMM " + std::to_string(n) + "^3 on " + name;
  return p;
}

}  // namespace zb::bench
