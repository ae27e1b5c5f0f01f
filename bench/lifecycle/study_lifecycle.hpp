// study_lifecycle.hpp — `zerobench study lifecycle`: the article's loading and checkpoint problems,
// measured. For each model (an HF folder it writes once) and world size it runs every load
// strategy x state-dict type as `zerobench run --model-dir … --load-strategy … --checkpoint-dir …`
// and tabulates the per-rank load RSS increase, bytes read, load time, save time, bytes written and
// the longest wait while rank 0 wrote; then projects the CPU RAM per rank each strategy needs to
// load 7B and 70B models at W=8 (the article's ~2 TB vs ~140 GB), model-info style.
// Owns: the study's cells, table and projection. Must not: reimplement running (subprocesses).
#pragma once
#include <string>
#include <vector>

namespace zb::bench::lifecycle {

struct LifecycleStudyOptions {
  std::string out_dir = "out/lifecycle";
  std::vector<std::string> models = {"tiny", "small"};
  std::vector<int> worlds = {2, 4};
  std::string backend;  // empty: the registry's lifecycle_study_backend() (the article's FSDP-mode)
  double timeout_s = 900;
};

int lifecycle_study_command(const LifecycleStudyOptions& opts);

// CPU bytes one rank holds to load a model of `params` parameters at `bytes_per_param` by
// `strategy` on `world` ranks (`largest_unit_params`: the biggest unit rank0-broadcast's other
// ranks receive at a time). Rank 0 and the others differ for rank0-broadcast only.
struct LoadRamProjection {
  double rank0_bytes = 0, other_bytes = 0, node_bytes = 0;
};
LoadRamProjection project_load_ram(const std::string& strategy, int64_t params, int64_t largest_unit_params,
                                   int bytes_per_param, int world);

}  // namespace zb::bench::lifecycle
