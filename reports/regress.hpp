// regress.hpp — `zerobench regress`: compare current reports with committed baselines.
// Owns: matching cells by their configuration, and the verdict rules: timing flagged only when
// the median ratio passes the threshold AND a Mann-Whitney U test says worse; deterministic
// metrics (engine-owned bytes, comm counts and bytes, FLOPs, parameter counts) must match
// exactly; the numerics (every step's loss, grad norm and lr) bitwise, or within
// numerics_rtol when asked; the program-order memory peak (peak_program_bytes) exactly, the
// observed allocator peak (timing-dependent) shown but not gated — within a small threshold only
// when a report has no program-order peak; a cell that was ok and is not, or that is missing, is a
// regression. Google Benchmark JSON is compared per benchmark name with the same U-test
// (compare_benchmarks). Must not: run anything.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zb::reports {

struct RegressOptions {
  double threshold = 0.05;         // timing: median ratio beyond 5%
  double alpha = 0.05;             // timing: U-test significance
  double memory_threshold = 0.05;  // observed peaks, where a report has no program-order peak: 5% above
  bool gate_timing = true;         // false: timings are reported, never a regression (shared CPU CI)
  // Per-step loss, grad norm and lr: the largest relative difference allowed between runs on the
  // same kind of machine (same env.device, env.cpu_capability, torch and threads per rank). 0 (the
  // default) = bitwise, which a fixed thread count gives there (docs/regression.md).
  double numerics_rtol = 0.0;
  // ... and between runs on different kinds, or when a report does not say (older baselines):
  // other kernels round differently (measured over the 12 cpu-smoke cells, AVX2 vs AVX-512 EPYC:
  // up to 6.1e-3 on a bf16 cell's grad norm after 8 steps), so only a gross numerics change can
  // be told from that.
  double numerics_rtol_other_machine = 2e-2;
};

struct Check {
  std::string cell, metric, baseline, current, change;
  bool regression = false;
  std::string note;
};

struct RegressResult {
  std::vector<Check> checks;
  std::vector<std::string> missing, extra;  // cells only in the baseline / only in current
  bool regression() const;
  nlohmann::json to_json() const;
  std::string to_text() const;
};

// The configuration a cell is matched by when names do not match: model dims, backend,
// precision, options, train settings, world size (canonical JSON text).
std::string config_key(const nlohmann::json& report);
// Every setting both configurations record is equal (fields only one side has are ignored).
bool configs_compatible(const nlohmann::json& a, const nlohmann::json& b);

RegressResult compare_reports(const std::vector<nlohmann::json>& baseline, const std::vector<nlohmann::json>& current,
                              const RegressOptions& opts);

// Google Benchmark JSON (`zerobench micro --out`, or any benchmark binary's --benchmark_out):
// a top-level "benchmarks" array.
bool is_google_benchmark_json(const nlohmann::json& j);
// Per benchmark name, over its repetitions (--benchmark_repetitions; aggregate rows skipped):
// real_time is worse when higher; the throughput counters busbw, algbw, tflops and GBps are
// worse when lower; bytes and world_size must match exactly. A metric is a regression when its
// median moved the wrong way by more than opts.threshold AND the one-sided Mann-Whitney U test
// says so (p < opts.alpha), which needs >= 3 repetitions per side (fewer: reported, not gated).
// A benchmark missing from `current`, or failing there, is a regression.
RegressResult compare_benchmarks(const nlohmann::json& baseline, const nlohmann::json& current,
                                 const RegressOptions& opts);

}  // namespace zb::reports
