// harness.hpp — the micro-benchmark harness (nccl-tests' common.cu, under Google Benchmark).
// Owns: the rank's world and counted Comm, timing one iteration device-synchronised, and
// keeping W ranks in lockstep. Google Benchmark chooses how many iterations to run from the
// times it sees, and a collective loop deadlocks unless every rank runs the same count; so each
// iteration's time is the MAX over ranks, exchanged on an uncounted side group after the timed
// region, and handed to Google Benchmark as manual time (UseManualTime). Every rank then sees
// bit-identical times and makes identical decisions. Each benchmark family (collectives.cpp,
// compute.cpp) is a small table of functions registered through here. Must not: choose sizes
// or shapes (the families do) or write output (only rank 0's Google Benchmark reporters do).
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/common/comm.hpp"
#include "models/model_config.hpp"
#include "runtime/device.hpp"
#include "runtime/world.hpp"

namespace benchmark {
class State;
}

namespace zb::analysis::micro {

// What the suite runs (filled from `zerobench micro` flags).
struct SuiteOptions {
  bool quick = false;                  // CI: small sizes, few shapes
  std::vector<at::ScalarType> dtypes;  // collectives and compute
  int64_t min_bytes = 1024;            // collectives: nccl-tests' -b
  int64_t max_bytes = int64_t(1) << 30;  // ... -e (step factor 4: -f 4)
  bool comm = true, compute = true;    // which families
  models::ModelConfig model;           // GEMM shapes and buffer sizes come from its units
  int64_t tokens = 0;                  // micro_batch x seq_len: the GEMMs' token dimension
  bool concurrent_gemm = false;        // collectives timed beside a GEMM loop (concurrent_gemm.hpp)
  // `zerobench micro --for REPORT`: exactly the sizes projecting that run needs
  // (analysis/projection/coverage.hpp). When set, the collectives are these instead of the grid,
  // and the compute family is the square GEMM in the run's compute dtype and these offload sizes.
  struct Exact {
    struct Collective {
      backends::common::CollectiveKind kind;
      at::ScalarType dtype;
      int64_t bytes;  // nccl-tests size
    };
    std::vector<Collective> collectives;
    std::vector<int64_t> h2d_bytes, d2h_bytes;  // offload copies
    int64_t host_adam_params = 0;               // 0: no host optimizer
    at::ScalarType gemm_dtype = at::kFloat;     // the square GEMM (the run's compute dtype)
  };
  std::optional<Exact> exact;
};

// "fp32" | "bf16" | "fp16" (the names benchmark entries and calibration files use).
std::string dtype_name(at::ScalarType t);
at::ScalarType parse_dtype(const std::string& name);  // throws UsageError

class Harness {
 public:
  explicit Harness(const runtime::World& world);
  int rank() const { return world_.rank; }
  int size() const { return world_.size; }
  at::Device device() const { return world_.device; }
  backends::common::Comm& comm() { return comm_; }

  // Runs fn once between device-synchronised clock reads; returns the max over ranks.
  double time_iteration(const std::function<void()>& fn);
  // Every rank enters the benchmark's loop together (outside the timed region).
  void barrier();
  // The Google Benchmark loop every family uses: fn per iteration, manual time = time_iteration.
  // Returns the mean seconds per iteration (what the counters divide by).
  double run_loop(benchmark::State& state, const std::function<void()>& fn);

 private:
  double max_over_ranks(double v);
  runtime::World world_, side_;
  backends::common::Comm comm_;
  std::unique_ptr<runtime::RegionTimer> timer_;
};

// Registration of each family (every rank registers the same benchmarks in the same order).
void register_collective_benchmarks(Harness& h, const SuiteOptions& o);
void register_compute_benchmarks(Harness& h, const SuiteOptions& o);  // also registers offload.cpp's
void register_offload_benchmarks(Harness& h, const SuiteOptions& o);

// Collective sizes in bytes: min, x4, ..., <= max (nccl-tests -b/-e/-f 4).
std::vector<int64_t> collective_sizes(int64_t min_bytes, int64_t max_bytes);

}  // namespace zb::analysis::micro
