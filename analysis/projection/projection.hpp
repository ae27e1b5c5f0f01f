// projection.hpp — what `zerobench project` computes: a measured report + a calibration -> the
// same workload predicted on W ranks x N nodes, as a report (same schema) with a `projection`
// section. Owns: where each compute time comes from (measured per-unit times, or FLOPs at a
// preset's rates), the report it writes, and its options (the flags that fill them and the
// printing: bench/project_command). Must not: model schedules (schedule.hpp) or
// collectives (calibration.hpp). Equations: docs/projection.md.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "analysis/projection/calibration.hpp"
#include "analysis/projection/schedule.hpp"
#include "reports/run_report.hpp"

namespace zb::analysis::projection {

struct ProjectOptions {
  std::string report;        // the measured report (with --profile: profile.units)
  std::string calibration;   // calibration JSON, `micro` JSON, or preset name
  std::string out;
  int world = 0;             // --nproc
  int nodes = 1;
  std::string backend;       // "" = the report's
  std::string compute = "auto";  // auto | measured | flops
  int64_t layers = 0, micro_batch = 0, seq_len = 0, grad_accum = 0;  // 0 = the report's
  bool activation_checkpointing = false;  // flops mode: recompute each block's forward
  std::string data, batching;  // flops mode: price these documents / rows ("" = the report's; docs/data.md)
  double peak_tflops = 0;    // 0: the preset's, else the calibration's measured GEMM, else the report's
  bool timeline = false;     // include every simulated span in the output
  std::string cpu_contention = "auto";  // auto | cores | gemm (docs/projection.md)
  std::string replay;        // a `run --trace` file of the report's run: replay it (replay.hpp) instead
};

// The schedule input of projecting `report` with `o` (backend, its options as the target W runs
// them, model, batch, W, nodes) under `exec`; costs and offload rates left empty. `project` fills
// them; `zerobench micro --for` sizes its collectives from it (coverage.hpp step_sizes).
// The report is read through its typed record (reports/run_report.hpp); the JSON overloads parse
// it there first.
ScheduleInput projection_input(const reports::RunReport& report, const ProjectOptions& o, ExecModel exec);
ScheduleInput projection_input(const nlohmann::json& report, const ProjectOptions& o, ExecModel exec);

// The projection itself (tests call it directly): a report in, a report JSON out.
nlohmann::json project(const reports::RunReport& report, const Calibration& cal, const ProjectOptions& o);
nlohmann::json project(const nlohmann::json& report, const Calibration& cal, const ProjectOptions& o);

// Per-unit compute of one micro-batch from FLOPs at a preset's rates (docs/projection.md):
// matmuls at peak x gemm_efficiency, causal attention at peak x attention_efficiency,
// elementwise traffic (elementwise_bytes_per_token) at the HBM bandwidth; backward = 2x forward,
// plus one more forward per block with activation checkpointing. Rows `width` wide (0: the
// seq_len; pad-longest: the mean width of its micro-batches, models::RowStats::width).
UnitCosts flops_unit_costs(const models::ModelConfig& cfg, const backends::TrainConfig& t, const std::string& precision,
                           const Preset& p, double width = 0);
// Bytes the eager elementwise ops of one decoder block's forward read and write per token
// (RMSNorm x2 in fp32, RoPE on q and k, the attention output's transpose copy, two residual
// adds, SiLU and the gate product), activations `act_bytes` wide. Tally in projection.cpp.
double elementwise_bytes_per_token(const models::ModelConfig& cfg, int act_bytes);

}  // namespace zb::analysis::projection
