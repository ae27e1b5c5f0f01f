// coverage.hpp — what one step of a projected run asks its calibration to price, and whether a
// measured calibration covers it. Owns: the sizes a step's program issues (each collective by
// kind, dtype and group size; each offload copy by direction; the host optimizer's parameters),
// read off the program itself at zero cost, and the one-line refusal when a size lies outside
// what the calibration measured (docs/projection.md §2: a measured quantity prices only inside
// its measured range, within kRangeTolerance). `zerobench micro --for REPORT` measures exactly
// these sizes; `zerobench project` refuses what is not covered. Must not: price anything
// (calibration.hpp) or build a backend's program itself (schedule.hpp looks it up).
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "analysis/projection/calibration.hpp"
#include "analysis/projection/schedule.hpp"

namespace zb::analysis::projection {

struct StepSizes {
  struct Collective {
    CollectiveKind kind = CollectiveKind::kAllGather;
    std::string dtype;          // the calibration's dtype key: fp32 | bf16 | fp16
    int world = 0;              // the group's ranks (> 1: a one-rank collective is a local copy)
    std::set<int64_t> bytes;    // nccl-tests sizes
  };
  std::vector<Collective> collectives;  // per (kind, dtype, world), in the program's first-issue order
  std::set<int64_t> h2d_bytes, d2h_bytes;  // offload copies
  int64_t host_optimizer_params = 0;       // 0: the step has no host optimizer
};

// The sizes of one step of `in`'s program (its costs and offload rates are ignored).
StepSizes step_sizes(ScheduleInput in);

// "" when `cal` covers every size of `need` (a preset prices any size: datasheet figures, no
// measured range), else one line naming the first quantity not covered, its measured range, the
// sizes the step needs, and `remedy` (how to measure them).
std::string uncovered(const Calibration& cal, const StepSizes& need, const std::string& remedy);

}  // namespace zb::analysis::projection
