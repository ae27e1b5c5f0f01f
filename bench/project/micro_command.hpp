// micro_command.hpp — `zerobench micro`: the Google Benchmark micro-benchmark suite on W ranks.
// Owns: its flags, the launcher/rank roles, building Google Benchmark's argv (our defaults,
// then the user's --benchmark_* flags, then rank 0's JSON output), and --calibrate. Only rank 0
// writes Google Benchmark's own JSON (so tools/compare.py reads it) and prints its console
// table; the others run the same benchmarks silently. Must not: define benchmarks (the families:
// analysis/micro/collectives.cpp, compute.cpp) or fit models (analysis/projection/calibration).
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "bench/run/run_options.hpp"

namespace zb::bench::micro {

struct MicroOptions {
  int nproc = 1;
  bool quick = false;                 // CI: 1 KiB..64 KiB, fp32, the square GEMM, one unit's copies
  std::string out = "out/micro.json";  // Google Benchmark JSON (rank 0)
  std::string calibrate;              // also fit alpha/beta per collective into this file
  std::string device = "cpu";
  int threads = 0;                    // intra-op threads per rank; 0 = cores / local ranks
  std::string dtypes;                 // default fp32,bf16 (quick: fp32)
  std::string suite = "all";          // all | comm | compute
  int64_t min_bytes = 1024, max_bytes = int64_t(1) << 30;
  RunOptions model;                   // --model and overrides, --micro-batch, --seq-len
  double timeout_s = 0;
  std::vector<std::string> benchmark_args;  // the user's --benchmark_* flags, passed through
  bool min_bytes_given = false, max_bytes_given = false;
  bool concurrent_gemm = false;       // CPU: time the collectives beside a GEMM loop on each rank
  std::string for_report;             // --for REPORT: exactly what projecting it to --nproc needs
};

void add_micro_options(CLI::App& app, MicroOptions& o);

// argv is the full command line (the launcher re-runs it in each rank).
int micro_command(const MicroOptions& o, const std::vector<std::string>& argv);

}  // namespace zb::bench::micro
