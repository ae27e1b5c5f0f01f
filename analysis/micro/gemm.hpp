// gemm.hpp — the GEMM probe: one dense matmul C[m,n] = A[m,k] · B[k,n] on a device in a dtype,
// with each operand stored as the training stores it (a Linear's weight is [out, in], so its
// forward multiplies by a transposed view). Owns: the operands, the kernel call and its FLOP
// count, and the model's own matmul shapes.
// Used by the micro-benchmark suite (every shape, timed by Google Benchmark) and by `zerobench
// run`'s peak probe (one square shape, timed by measure_tflops) — one kernel path for both, so
// the peak a run's MFU divides by is the suite's `gemm/.../square` number. Must not: time
// anything itself except in measure_tflops.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "models/model_config.hpp"

namespace zb::analysis::micro {

struct GemmShape {
  std::string name;  // "square", or "<weight>.<pass>": wq.fwd, w_down.wgrad, lm_head.dgrad
  int64_t m = 0, n = 0, k = 0;
  // Operand storage: A held as [k, m] and B as [n, k], each multiplied through a transposed view
  // (the layouts select different kernels: on an AVX2 CPU without AVX-512, ATen's bf16 GEMM runs
  // x·Wᵀ about 3.6x faster than x·W at 512^3; 2026-11-29, docs/metrics.md).
  bool a_transposed = false, b_transposed = false;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

class Gemm {
 public:
  Gemm(at::Device device, at::ScalarType dtype, const GemmShape& shape);
  void run();  // C = A · B (at::mm_out over the stored operands' views), on the device's current stream
  const GemmShape& shape() const { return shape_; }
  // The [m, k] and [k, n] operands (transposed views where the shape says so) and C.
  const at::Tensor& a() const { return a_; }
  const at::Tensor& b() const { return b_; }
  const at::Tensor& c() const { return c_; }

 private:
  GemmShape shape_;
  at::Tensor a_, b_, c_;
};

// The square shape `zerobench run` probes for its peak: 8192 on a GPU, 1024 (fp32) or 512 on a CPU,
// in a Linear's forward layout (x·Wᵀ: B transposed), the matmul a training step runs most.
GemmShape peak_probe_shape(at::Device device, at::ScalarType dtype);

// Every distinct matmul of one training step of `cfg` at `tokens` = micro_batch x seq_len rows,
// for each linear weight W [out, in] (unit_param_specs; norms and the embedding lookup are not
// matmuls): forward  y = x·Wᵀ      [tokens, in] x [in, out]     B transposed (W is [out, in])
//           dgrad    dx = dy·W     [tokens, out] x [out, in]    both as stored
//           wgrad    dW = dyᵀ·x    [out, tokens] x [tokens, in] A transposed (dy is [tokens, out])
// Shapes that repeat in the same layout (wq and wo are both [H, H]) appear once, under their first
// weight's name.
std::vector<GemmShape> model_gemm_shapes(const models::ModelConfig& cfg, int64_t tokens);

// One warm-up, then repeats until >= min_time_s and >= 3 repeats, device-synchronised: TFLOP/s.
double measure_tflops(Gemm& gemm, at::Device device, double min_time_s = 0.3);

}  // namespace zb::analysis::micro
