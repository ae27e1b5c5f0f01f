// gemm.cpp — the GEMM probe (see gemm.hpp).
#include "analysis/micro/gemm.hpp"

#include <set>
#include <tuple>

#include "runtime/device.hpp"

namespace zb::analysis::micro {

Gemm::Gemm(at::Device device, at::ScalarType dtype, const GemmShape& shape) : shape_(shape) {
  at::NoGradGuard no_grad;
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  // The stored tensors; a_ and b_ are the [m, k] and [k, n] views the product reads.
  a_ = shape.a_transposed ? at::randn({shape.k, shape.m}, opts).t() : at::randn({shape.m, shape.k}, opts);
  b_ = shape.b_transposed ? at::randn({shape.n, shape.k}, opts).t() : at::randn({shape.k, shape.n}, opts);
  c_ = at::empty({shape.m, shape.n}, opts);
}

void Gemm::run() {
  at::NoGradGuard no_grad;
  at::mm_out(c_, a_, b_);
}

GemmShape peak_probe_shape(at::Device device, at::ScalarType dtype) {
  const int64_t n = device.is_cuda() ? 8192 : (dtype == at::kFloat ? 1024 : 512);
  GemmShape s{"square", n, n, n};
  s.b_transposed = true;  // x·Wᵀ, as nn.Linear's forward (at::linear) calls it
  return s;
}

std::vector<GemmShape> model_gemm_shapes(const models::ModelConfig& cfg, int64_t tokens) {
  std::vector<GemmShape> out;
  std::set<std::tuple<int64_t, int64_t, int64_t, bool, bool>> seen;
  auto add = [&](const std::string& name, int64_t m, int64_t n, int64_t k, bool a_t, bool b_t) {
    if (seen.insert({m, n, k, a_t, b_t}).second) {
      GemmShape s{name, m, n, k};
      s.a_transposed = a_t;
      s.b_transposed = b_t;
      out.push_back(s);
    }
  };
  const auto units = models::unit_param_specs(cfg);
  // The root (LM head) and one block: every block has the same shapes.
  for (size_t u = 0; u < std::min<size_t>(units.size(), 2); ++u) {
    for (const auto& p : units[u]) {
      if (p.is_norm || p.name == "embedding" || p.shape.size() != 2) continue;
      const int64_t out_f = p.shape[0], in_f = p.shape[1];
      add(p.name + ".fwd", tokens, out_f, in_f, false, true);
      add(p.name + ".dgrad", tokens, in_f, out_f, false, false);
      add(p.name + ".wgrad", out_f, in_f, tokens, true, false);
    }
  }
  return out;
}

double measure_tflops(Gemm& gemm, at::Device device, double min_time_s) {
  gemm.run();  // warm-up
  auto timer = runtime::make_region_timer(device);
  int64_t reps = 0;
  double elapsed = 0;
  while (elapsed < min_time_s || reps < 3) {
    timer->start();
    gemm.run();
    elapsed += timer->stop_s();
    ++reps;
  }
  return gemm.shape().flops() * double(reps) / elapsed / 1e12;
}

}  // namespace zb::analysis::micro
