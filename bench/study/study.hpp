// study.hpp — `zerobench study precision`: the FSDP vs DeepSpeed blog's convergence finding,
// measured. Runs FSDP low, FSDP mixed, ZeRO3 bf16, FSDP2 low, FSDP2 mixed and an fp32 reference on the learnable
// Markov language at several learning rates (same seed, data and W), with the lost-update
// diagnostic on, then writes a summary (final loss vs the entropy floor, steps to a loss target,
// mean lost-update fraction), per-run reports and SVG/HTML figures.
// Owns: the study's cells and its summary. Must not: reimplement running (it is a matrix).
#pragma once
#include <string>
#include <vector>

namespace zb::bench {

struct PrecisionStudyOptions {
  std::string out_dir = "out/precision";
  std::vector<double> lrs = {3e-5, 3e-3};  // a small lr where bf16 weights swallow updates, a large one
  int64_t steps = 300;
  int nproc = 2;
  std::string model = "tiny";
  int64_t micro_batch = 4;
  int64_t seq_len = 128;
  uint64_t seed = 1234;
  bool scale_lr_by_world_size = false;  // also run FSDP low at lr x W (the blog's "fix")
  std::vector<std::string> modes;       // a subset of the modes (empty = all); fp32 always runs
  bool force = false;
  double timeout_s = 900;
};

int precision_study_command(const PrecisionStudyOptions& opts);

}  // namespace zb::bench
