// calibration.hpp — the communication (and, for GPU presets, compute) cost model the projection
// uses. Owns: the alpha-beta model of one collective, fitting it to a `zerobench micro` run,
// the datasheet presets with their sources, and the calibration file. Must not: know any
// backend's schedule (backends/<x>/<x>_program.cpp) or simulate anything (simulate.hpp).
//
// One collective of nccl-tests size S bytes (comm.hpp's convention) on W ranks:
//     t(S) = alpha + S * f(W) / B_bus
// f is nccl-tests' bus-bandwidth factor (comm.hpp's busbw_factor: (W-1)/W all-gather and
// reduce-scatter, 2(W-1)/W all-reduce, 1 broadcast), so B_bus is the busbw nccl-tests would
// report for large S and alpha the latency it shows for small S (doc/PERFORMANCE.md).
//  - measured: alpha and B_bus fitted per (kind, dtype, W) by weighted least squares over the
//    micro run's sizes (weights 1/t^2: relative residuals, so 1 KiB and 1 GiB count alike);
//    alpha < 0 is refitted through the origin. A W with no fit uses the nearest measured W:
//    B_bus is kept (nccl-tests: busbw does not depend on W) and alpha scaled by the ring's
//    step count (W-1, or 2(W-1) for all-reduce). A size the micro run measured at this W is
//    priced with its own measured time (`zerobench micro --for REPORT` measures exactly the
//    sizes a run issues); a measured fit prices only inside its measured size range
//    (in_range; coverage.hpp refuses a projection that needs more).
//  - preset: B_bus = the NVLink figure inside a node; across N > 1 nodes a ring crosses the
//    network, the slowest link bounds it (PERFORMANCE.md: "busbw should reflect the speed of
//    the hardware bottleneck"), B_bus = min(NVLink, per-GPU network). alpha follows NCCL's own
//    ring model (src/graph/tuning.cc, ncclTopoTuneModel, Simple protocol): base latency +
//    (steps - inter-node steps) x NVLink step latency + inter-node steps x network step latency,
//    steps = W-1 (all-gather, reduce-scatter), 2(W-1) (all-reduce), inter-node steps = N-1
//    (2(N-1) for all-reduce).
// Sources of every preset figure: docs/projection.md.
#pragma once
#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/common/comm.hpp"
#include "backends/common/program.hpp"

namespace zb::analysis::projection {

using backends::common::CollectiveKind;

struct CollectiveFit {
  CollectiveKind kind = CollectiveKind::kAllGather;
  std::string dtype;  // fp32 | bf16
  int world_size = 0;
  double alpha_s = 0;
  double busbw_gbps = 0;
  int points = 0;
  double max_rel_residual = 0;  // max |fit - measured| / measured over the points
  int64_t min_bytes = 0, max_bytes = 0;
  std::map<int64_t, double> measured_s;  // size (bytes) -> median seconds per op, as measured
};

// A measured quantity prices a size only within this relative margin of its smallest and
// largest measured size (sizes are rounded to whole elements per rank; docs/projection.md §2).
constexpr double kRangeTolerance = 0.05;
bool in_range(int64_t size, int64_t min, int64_t max);

// The offload benchmarks' sizes and times (`zerobench micro`'s offload/ entries, medians): the
// copies by bytes (median seconds per copy) and the host AdamW by parameters (median ns per
// parameter). Empty for presets and for files from before they were recorded.
struct OffloadSizes {
  std::map<int64_t, double> h2d_s, d2h_s;  // bytes -> seconds
  std::map<int64_t, double> host_adam_ns;  // parameters -> ns per parameter
};

struct Preset {
  std::string name, gpu;
  double peak_tflops = 0;          // dense bf16
  double intra_busbw_gbps = 0;     // NVLink, per GPU per direction
  double inter_busbw_gbps = 0;     // network per GPU (400 Gb/s = 50 GB/s)
  int gpus_per_node = 8;
  double base_latency_us = 0, intra_step_latency_us = 0, inter_step_latency_us = 0;
  double hbm_gbps = 0;             // memory-bound ops
  double gemm_efficiency = 0;      // achievable dense bf16 matmul / peak (MAMF)
  double attention_efficiency = 0; // FlashAttention-2 fwd+bwd / peak
  double pcie_gbps = 0;            // host <-> GPU per direction (offload copies)
  std::vector<std::pair<std::string, std::string>> sources;  // figure -> source
};

// Presets by name: a100-nvlink, h100-sxm.
const std::vector<Preset>& presets();
std::optional<Preset> find_preset(const std::string& name);

class Calibration {
 public:
  // A calibration file, a `zerobench micro` Google Benchmark JSON (fitted on load), or a
  // preset name. Throws UsageError naming the file or listing the presets.
  static Calibration load(const std::string& file_or_preset);
  static Calibration fit(const nlohmann::json& micro_json, const std::string& source);
  static Calibration from_preset(const Preset& p);
  static Calibration from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;

  // Seconds for one collective of `bytes` (nccl-tests size) on `world` ranks over `nodes`
  // nodes in `dtype` ("fp32"/"bf16"). 0 for world 1 (a local copy, part of measured compute).
  double collective_s(CollectiveKind kind, const std::string& dtype, int64_t bytes, int world, int nodes) const;
  // How collective_s got its numbers for (kind, world): "fit W=2", "fit W=2 scaled to W=4", "preset".
  std::string collective_basis(CollectiveKind kind, const std::string& dtype, int world, int nodes) const;
  // The fit collective_s prices (kind, dtype, world) with: the same dtype first, then the
  // nearest W (another dtype only when none has it); nullptr when the kind has no fit.
  const CollectiveFit* nearest_fit(CollectiveKind kind, const std::string& dtype, int world) const;
  // A host<->device copy of exactly `bytes` as the micro run measured it, if it did.
  std::optional<double> measured_copy_s(bool to_device, int64_t bytes) const;

  std::string source;          // "measured: FILE" or "preset: NAME"
  std::string device;          // the micro run's device, or the preset GPU
  std::string pg_backend;      // gloo | nccl (measured)
  int host_cores = 0;          // measured: logical CPUs of the host
  int threads_per_rank = 0;    // measured
  int world_size = 0;          // measured: the micro run's W
  std::vector<CollectiveFit> fits;
  std::optional<Preset> preset;
  // Measured square-GEMM TFLOP/s by dtype (the micro run's `gemm/<dtype>/square`), if run.
  std::vector<std::pair<std::string, double>> gemm_tflops;
  // Offload: measured offload/h2d, offload/d2h GBps and offload/host_adamw ns per parameter
  // (medians over the micro run's entries), or the preset's PCIe figure; zeros when unknown.
  backends::common::OffloadRates offload;
  OffloadSizes offload_sizes;  // what the rates were measured on (coverage.hpp checks the sizes)
};

// Ring steps of one collective: W-1 (all-gather, reduce-scatter), 2(W-1) (all-reduce), 1 (broadcast).
int ring_steps(CollectiveKind kind, int world);

}  // namespace zb::analysis::projection
