// replay.hpp — the projection's schedule validated apart from its costs: a measured run's own
// per-op durations, read back from its `--trace` file, replayed through the schedule the
// projection would use (build_program + simulate) at the run's own world size, and the replayed
// step set beside the run's measured step. Where they differ, the schedule (which op waits for
// which) is wrong, not the cost model: every duration is the run's own.
// Owns: reading a Chrome trace written by `zerobench run --trace` back into the profiler's
// activities, the traced steps' windows, per-op durations (per-unit compute through
// profiler/analysis's unit_times, each collective's time on its comm lane), matching the
// program's collectives to the traced ones, and `zerobench project --replay`'s output.
// Must not: cost anything from a calibration (durations come only from the trace) or model an
// engine (each backend's program does, backends/<x>/<x>_program.cpp).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "analysis/projection/schedule.hpp"
#include "reports/run_report.hpp"

namespace zb::analysis::projection {

struct TracedCollective {
  CollectiveKind kind = CollectiveKind::kAllGather;
  std::string label;            // "unit3", "bucket", ...
  int64_t bytes = 0;
  double issue_s = 0, complete_s = 0;  // from the window's start (complete: Gloo's own stamp)
  // When the training thread could see it done: the end of the wait (gap in the compute
  // spans) it completed in — waking a thread on a busy host takes time too; else complete_s.
  double resumed_s = 0;
  // The training thread's time inside the issue call (its NVTX range) before the collective is
  // queued: Gloo's reduce-scatter clones its input there. 0 for a blocking collective, whose
  // call is part of its wait.
  double call_s = 0;
  // The block range ("forward unit2", "backward unit2") the issue falls in, and the compute
  // from that range's start to the issue: where inside a block the issue happened.
  std::string block_range;
  double block_compute_before_s = 0;
};

// One rank's traced step, as its trace file holds it.
struct TracedStep {
  int rank = 0;
  int64_t step = 0;
  double window_s = 0;  // the measured step: the trainer's timed region (first to last compute span)
  UnitCosts costs;      // per micro-batch: profiler::unit_times over the window / grad_accum,
                        // the collectives' issue calls taken out (they are call_s)
  std::vector<TracedCollective> collectives;  // in issue order
};

// Every rank's traced steps in a `zerobench run --trace` file (Chrome JSON Object Format; host
// source: NVTX ranges, the training thread's compute spans, collectives in flight). Throws
// UsageError when the file holds none (a CUDA/CUPTI trace, or not a zerobench trace).
std::vector<TracedStep> traced_steps(const nlohmann::json& trace, int64_t grad_accum);

// The schedule input of a report's own run (backend, options, model, batch, W, nodes); no costs.
// Read through the typed record; the JSON overload parses it there first.
ScheduleInput schedule_input_of_report(const reports::RunReport& report);
ScheduleInput schedule_input_of_report(const nlohmann::json& report);

// One replayed step: the program built for the run with the step's own durations.
struct ReplayedStep {
  int rank = 0;
  int64_t step = 0;
  double measured_s = 0, replayed_s = 0;
  double error() const { return measured_s > 0 ? (replayed_s - measured_s) / measured_s : 0.0; }
  double compute_s = 0, comm_s = 0, exposed_comm_s = 0;  // the replay's
  int collectives = 0;
};

// A calibration with a zero-cost fit for every collective kind at `world` ranks: a program built
// with it leaves each collective's duration to the trace it is replayed against.
Calibration zero_cost_calibration(int world);

// Replays one traced step. Throws RunError when the program's collectives (kind, label, bytes,
// in issue order) differ from the trace's: the schedule issues something the engine did not.
ReplayedStep replay_step(const ScheduleInput& in, const TracedStep& step);
// The same with a given program (its compute durations kept; its collectives get the trace's
// lane times and call times): what replay_step runs, open to tests that plant a wrong schedule.
ReplayedStep replay_program(Program program, const TracedStep& step);

// `zerobench project REPORT --replay TRACE`: every rank's every traced step replayed;
// {"steps": [...], "max_abs_error", "median_error", ...}.
nlohmann::json replay(const reports::RunReport& report, const nlohmann::json& trace);
nlohmann::json replay(const nlohmann::json& report, const nlohmann::json& trace);

}  // namespace zb::analysis::projection
