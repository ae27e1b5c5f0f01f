// schedule.hpp — each engine's step as a host program (simulate.hpp): which collective is
// issued where, what it overlaps and where compute waits for it. Owns: the per-engine
// schedules and the bytes of every collective (the backends' closed forms: FSDP-mode pads each
// unit's flat parameter to a multiple of the shard group, ZeRO3-mode each parameter to a
// multiple of W). Must not: cost anything itself (durations come from the Calibration and the
// unit costs it is given) or read reports.
//
// kHostIsDevice programs follow zerobench's own engines on Gloo line by line (fsdp_engine.cpp,
// zero3_engine.cpp, ddp_engine.cpp: that is what a CPU run measures). kAsyncDevice programs
// follow upstream's CUDA streams (what the engines do on CUDA once they use side streams like
// upstream): FSDP1 (torch/distributed/fsdp/_runtime_utils.py) all-gathers on the unshard stream,
// rate-limited to two in flight by _FreeEventQueue (_limiter_utils.py), reduce-scatters on the
// post-backward stream after the compute stream, and the compute stream waits for those only in
// _post_backward_final_callback; DeepSpeed (partitioned_param_coordinator.py, stage3.py)
// all-gathers on its all-gather stream and reduce-scatters IPG buckets on the
// reduce-and-partition stream, whose host synchronize() in independent_gradient_partition_epilogue
// ends backward. docs/projection.md lists each rule.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "backends/engine.hpp"
#include "bench/projection/calibration.hpp"
#include "bench/projection/simulate.hpp"

namespace zb::bench::projection {

// Compute per micro-batch, per unit (unit 0 = root: embedding, final norm, LM head).
struct UnitCosts {
  std::vector<double> forward_s, backward_s;
  double optimizer_s = 0;  // per optimizer step, on this world size's shard
  double other_s = 0;      // per step: compute outside forward, backward and the optimizer
  // Where the root's compute runs (profiler/analysis.hpp unit_times): this much of forward_s[0]
  // before the first block (the embedding), of backward_s[0] after the last block's backward
  // (the embedding's gradient); the rest after the blocks in forward, before them in backward.
  double root_forward_pre_s = 0, root_backward_post_s = 0;
  // The split of forward_s[0] / backward_s[0] into {before the blocks, after the blocks}.
  std::pair<double, double> root_forward() const;
  std::pair<double, double> root_backward() const;
};

struct ScheduleInput {
  std::string backend;               // ddp | fsdp | fsdp2 | zero3
  std::string precision;
  nlohmann::json options = nlohmann::json::object();  // the report's config.backend.options (resolved)
  models::ModelConfig model;
  backends::TrainConfig train;
  int world = 1, nodes = 1;
  UnitCosts costs;
  ExecModel exec = ExecModel::kHostIsDevice;
};

// The program of one optimizer step (grad_accum micro-batches, then the optimizer).
// Throws UsageError for a backend or option the projection does not model (named).
Program build_program(const ScheduleInput& in, const Calibration& cal);

// Parameter elements one rank stores at `world` (the optimizer's work scales with it).
int64_t shard_elements(const std::string& backend, const models::ModelConfig& model, const nlohmann::json& options,
                       int world);

// Backends the projection models.
bool projection_supports(const std::string& backend);

}  // namespace zb::bench::projection
