// peak.cpp — peak FLOP/s resolution (see peak.hpp); the GEMM itself is analysis/micro/gemm.
#include "bench/run/peak.hpp"

#include "analysis/micro/gemm.hpp"
#include "runtime/device.hpp"
#include "runtime/gpu_skus.hpp"
#include "runtime/memory.hpp"

namespace zb::bench {

double measure_gemm_tflops(at::Device device, at::ScalarType dtype) {
  double tflops = 0;
  {
    analysis::micro::Gemm gemm(device, dtype, analysis::micro::peak_probe_shape(device, dtype));
    tflops = analysis::micro::measure_tflops(gemm, device);
  }
  // The operands (3 x 8192^2 on a GPU, 384 MiB in bf16) and cuBLAS's workspace go back to the
  // driver: the run's reserved bytes and their peak are the training's, not the probe's.
  runtime::empty_cuda_cache(device);
  return tflops;
}

Peak resolve_peak(double flag_tflops, at::Device device, at::ScalarType compute_dtype) {
  Peak p;
  if (flag_tflops > 0) {
    p.tflops = flag_tflops;
    p.source = "flag";
    return p;
  }
  const std::string name = runtime::device_name(device);
  const auto probe = analysis::micro::peak_probe_shape(device, compute_dtype);
  // Always probe a large GEMM in the compute dtype: on a GPU, MFU against the datasheet and
  // against what this device's cuBLAS actually reaches are both reported. An fp32 cell's matmuls
  // run on TF32 tensor cores only when cuBLAS may use TF32
  // (torch.backends.cuda.matmul.allow_tf32 / float32_matmul_precision; off by default).
  p.measured_gemm_tflops = measure_gemm_tflops(device, compute_dtype);
  if (device.is_cuda()) {
    // The datasheet figure by exact SKU (runtime/gpu_skus.hpp: name and memory size); a MIG slice
    // or an unknown GPU falls through to the measured GEMM.
    const std::string math =
        compute_dtype == at::kFloat ? (at::globalContext().allowTF32CuBLAS() ? "tf32" : "fp32") : "bf16";
    if (auto sku = runtime::gpu_sku(name, runtime::device_total_memory_bytes(device))) {
      p.tflops = *runtime::sku_peak_tflops(*sku, math);
      p.source = "datasheet: " + sku->name + " (" + name + ") dense " + math;
      return p;
    }
  }
  p.tflops = p.measured_gemm_tflops;
  p.source = "measured: " + std::string(c10::toString(compute_dtype)) + " GEMM " + std::to_string(probe.n) + "^3 x.W^T on " + name +
             (device.is_cuda() ? " (no datasheet figure: MIG slice or unknown SKU)" : "");
  return p;
}

}  // namespace zb::bench
