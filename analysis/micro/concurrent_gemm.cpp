// concurrent_gemm.cpp — see concurrent_gemm.hpp.
#include "analysis/micro/concurrent_gemm.hpp"

#include "analysis/micro/gemm.hpp"
#include "runtime/errors.hpp"

namespace zb::analysis::micro {

ConcurrentGemm::ConcurrentGemm(at::Device device, at::ScalarType dtype) {
  if (!device.is_cpu()) throw UsageError("--concurrent-gemm is for CPU collectives (Gloo)");
  auto gemm = std::make_shared<Gemm>(device, dtype, peak_probe_shape(device, dtype));
  thread_ = std::thread([this, gemm] {
    at::NoGradGuard no_grad;
    while (!stop_.load()) {
      runs_.fetch_add(1);
      gemm->run();
    }
  });
}

ConcurrentGemm::~ConcurrentGemm() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

}  // namespace zb::analysis::micro
