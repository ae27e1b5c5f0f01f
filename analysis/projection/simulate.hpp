// simulate.hpp — replaying one rank's step (a backends/common/program.hpp Program) on two lanes
// (compute, comm), plus offload's copy lanes (one per direction). Owns: the timing rules of the two execution models (program.hpp describes
// them) and the timeline's totals, whose interval math is profiler/intervals (the measured
// profile's too). Must not: know engines (each backend's projection program builds its
// Program) or costs (callers put durations in).
#pragma once
#include <string>
#include <vector>

#include "backends/common/program.hpp"

namespace zb::analysis::projection {

// The program IR (backends/common/program.hpp): what each backend's projection program builds.
using backends::common::Action;
using backends::common::ExecModel;
using backends::common::Program;

struct Span {
  std::string name;
  bool comm = false;
  double start_s = 0, end_s = 0;
  backends::common::CollectiveKind kind = backends::common::CollectiveKind::kAllGather;
  int64_t bytes = 0;
  bool copy = false;  // an offload copy (kCopy) on a copy lane; `comm` is false for it
};

struct Timeline {
  double step_s = 0;
  double compute_s = 0;          // compute lane busy
  double comm_s = 0;             // comm lane busy
  double comm_overlapped_s = 0;  // comm while compute runs
  double exposed_comm_s = 0;     // comm_s - comm_overlapped_s (HTA's definition, docs/profiling.md)
  double copy_s = 0;             // offload copy lanes busy (either direction)
  double exposed_copy_s = 0;     // copy time with no compute running (CPU: all of it, the host copies)
  std::vector<Span> spans;
};

Timeline simulate(const Program& program, ExecModel model);

}  // namespace zb::analysis::projection
