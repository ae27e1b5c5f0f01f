// concurrent_gemm.hpp — compute running beside a collective benchmark (`micro --concurrent-gemm`).
// On a CPU training step the training thread computes while Gloo's worker threads move a
// collective's data (docs/projection.md §5a: the collectives of a traced step took longer than
// the same collectives alone); this runs the run's own peak-probe GEMM (gemm.hpp, the square
// shape) in a loop on a thread of its own for as long as it lives, so that a collective timed
// meanwhile shares the host as in training. Owns: that thread and stopping it. Must not: time
// anything (the harness times the collective) or run on a GPU (a device sync would wait for it).
#pragma once
#include <ATen/ATen.h>

#include <atomic>
#include <thread>

namespace zb::analysis::micro {

class ConcurrentGemm {
 public:
  ConcurrentGemm(at::Device device, at::ScalarType dtype);  // starts the loop
  ~ConcurrentGemm();                                         // stops it, joins the thread
  ConcurrentGemm(const ConcurrentGemm&) = delete;
  ConcurrentGemm& operator=(const ConcurrentGemm&) = delete;
  int64_t runs() const { return runs_.load(); }  // GEMMs started so far (one may be running)

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> runs_{0};
  std::thread thread_;
};

}  // namespace zb::analysis::micro
