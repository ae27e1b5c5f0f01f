// compare_command.hpp — `zerobench compare A B [C …]`: the sides (config files or
// backend:precision[:key=value,…] specs, bench/compare/sides.hpp) trained on one workload,
// repetitions interleaved (A1 B1 A2 B2 …) as a matrix (bench/matrix/matrix.hpp: timeouts, resume,
// failed runs recorded) into OUT/runs/, then OUT/compare.{json,md,html} (+ loss.svg,
// grad_norm.svg). `--from-dir OUT` re-renders from OUT/plan.json and the reports already there.
// Owns: compare's flags, the plan (sides x rounds -> cells) and the output files. Must not:
// compute statistics (analysis.hpp) or word the verdict (verdict.hpp). docs/compare.md.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace zb::bench::compare {

struct CompareOptions {
  std::vector<std::string> sides;
  // The workload every side trains. Defaults sized for a useful interval in a few minutes on a
  // 2-core CPU (docs/compare.md "Defaults"); 0 / empty = the run's own default (not passed).
  std::string model = "tiny", model_dir;
  int nproc = 2;
  int64_t seq_len = 64, steps = 4, warmup = 1;
  int64_t micro_batch = 0, grad_accum = 0;  // 0: each side's own (a config file's, else the run default)
  int64_t layers = 0;                         // 0: the model's own
  bool activation_checkpointing = false;      // every side recomputes each block (HF's gradient_checkpointing)
  int64_t lr_warmup_steps = 0;                // HF's warmup_steps for every side (only when given)
  std::string lr_warmup_ratio;                // or as a fraction of --steps, passed as written
  int threads = 0;
  std::string device = "cpu", data, batching;
  uint64_t seed = 0;
  double timeout_s = 600;  // per run
  int repeat = 6;          // rounds; 6 is the smallest n whose min-max median interval reaches 95%
  bool no_profile = false;
  std::string out, from_dir;
  bool dry_run = false;
};

void add_compare_options(CLI::App& app, CompareOptions& o);

// 0: written (a difference, however large, is a result); 1: written, but a run failed;
// 2: bad input (a bad side, flag or --from-dir), before anything runs; 130: interrupted.
int compare_command(const CompareOptions& o, const CLI::App& app);

}  // namespace zb::bench::compare
