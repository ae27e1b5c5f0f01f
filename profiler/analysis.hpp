// analysis.hpp — what the profile says about a window of activity: Holistic Trace Analysis'
// temporal breakdown (compute / non-compute / idle) and communication-computation overlap,
// exposed communication, time per kernel class and the top kernels. Owns: these definitions
// (docs/profiling.md); one definition per metric. The interval arithmetic is intervals.hpp; the
// results are the report's typed records (reports/run_report.hpp: RankProfile), whose JSON the
// report maps.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "profiler/activity.hpp"
#include "profiler/intervals.hpp"
#include "reports/run_report.hpp"

namespace zb::profiler {

struct StepWindow {
  int64_t step = 0;
  int64_t start_ns = 0, end_ns = 0;  // the trainer's timed region of the step
};

struct ClassTime {
  int64_t count = 0;
  int64_t total_ns = 0;  // sum of durations (concurrent kernels both count)
};

// One step on one rank. Kernels are clipped to the window; "time" means covered time (the
// union over streams), as HTA computes it, unless the name says sum.
struct StepProfile {
  int64_t step = 0;
  int64_t window_ns = 0;
  int64_t busy_ns = 0;           // any kernel/memory/communication activity running
  int64_t compute_ns = 0;        // HTA compute time: a compute kernel running
  int64_t non_compute_ns = 0;    // busy but no compute kernel: communication/memory only
  int64_t idle_ns = 0;           // nothing running
  int64_t comm_ns = 0;           // a communication kernel running
  int64_t comm_overlapped_ns = 0;  // communication while a compute kernel runs
  int64_t exposed_comm_ns = 0;   // communication with no compute alongside = comm - overlapped
  std::map<KernelClass, ClassTime> by_class;
  double overlap_ratio() const { return comm_ns > 0 ? double(comm_overlapped_ns) / double(comm_ns) : 0.0; }
};

StepProfile analyze_step(const std::vector<Activity>& activities, const StepWindow& window);

struct KernelSummary {
  std::string name;
  KernelClass cls = KernelClass::kElementwiseOther;
  int64_t count = 0;
  int64_t total_ns = 0;
};
// Kernels (and memory ops, collectives) inside any window, grouped by name, by total time.
std::vector<KernelSummary> top_kernels(const std::vector<Activity>& activities, const std::vector<StepWindow>& windows,
                                       size_t k);

// Per-unit compute time of one step, from the engines' NVTX ranges ("forward unitU" and
// "backward unitU" for decoder blocks U >= 1; "forward", "backward" per micro-batch;
// "optimizer_step"): the compute inside each range, summed over the step's micro-batches.
// Compute inside a range: on the host source, the training thread's compute spans (the range
// minus time blocked in wait()); on CUPTI, the covered time of compute kernels launched from
// inside the range (runtime call -> kernel by correlation id). The root unit (embedding, final
// norm, LM head: unit 0) is the rest of "forward"/"backward" once the blocks are taken out;
// `other_s` is the step's compute outside those three ranges (loss bookkeeping, callbacks).
// The root's compute is split where it runs: `root_forward_pre_s` is the part of forward_s[0]
// before the first block's range (the embedding), `root_backward_post_s` the part of
// backward_s[0] after the last block's range ends (the embedding's backward, the root's
// post-backward); the rest runs after the blocks in forward (final norm, LM head, loss) and
// before them in backward.
struct UnitTimes {
  std::vector<double> forward_s, backward_s;  // [unit]; unit 0 = root
  double forward_total_s = 0, backward_total_s = 0, optimizer_s = 0, window_s = 0;
  double other_s = 0;  // compute in the step outside forward, backward and optimizer_step
  double root_forward_pre_s = 0, root_backward_post_s = 0;
};
UnitTimes unit_times(const std::vector<Activity>& activities, const StepWindow& window);
// Their report record (seconds; the report owns the JSON).
reports::ProfileUnits units_record(const UnitTimes& t);
reports::ProfileStep step_record(const StepProfile& p);

// The rank's profile: per-step profiles, their medians, top kernels, and `units` (unit_times'
// median over the traced steps, element by element). The rank and the tracer's counts are the
// caller's (bench/run/rank_record.cpp).
reports::RankProfile rank_profile(const std::vector<Activity>& activities, const std::vector<StepWindow>& windows,
                                  size_t top_k = 10);

}  // namespace zb::profiler
