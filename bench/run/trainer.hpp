// trainer.hpp — the training loop every backend runs under: data, micro-batches, LR schedule,
// timing, loss/grad-norm records, memory and comm snapshots. Owns: what a "step" is and when
// each measurement is taken. Must not: know how an engine shards or communicates.
#pragma once
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/common/comm.hpp"
#include "backends/engine.hpp"
#include "bench/run/run_options.hpp"
#include "models/data.hpp"
#include "profiler/activity.hpp"
#include "profiler/analysis.hpp"
#include "profiler/tracer.hpp"
#include "runtime/memory.hpp"

namespace zb::bench {

using CommSnapshot = std::array<backends::common::CollectiveStats, size_t(backends::common::CollectiveKind::kCount)>;

struct StepRecord {
  int64_t step = 0;
  double loss = 0;       // mean over ranks and micro-batches
  double grad_norm = 0;  // global, before clipping
  double lr = 0;
  // AdamW's (beta1, beta2) this step's update used, when the schedule sets them (DeepSpeed's
  // OneCycle with cycle_momentum); otherwise unset: the configured betas throughout.
  std::optional<std::pair<double, double>> betas;
  double time_s = 0;     // forward + backward + optimizer, device-synchronised
  bool measured = false; // false for warm-up steps
  double lost_update_fraction = -1;  // over all ranks; -1 unless train.measure_lost_updates
  CommSnapshot comm{};   // this rank's collectives in this step (crossval compares them per step)
  int64_t recompute_flops = 0;  // FLOPs this rank's backward spent recomputing checkpointed blocks
  // This step's memory high-water marks (the peaks are reset as the step starts): the counting
  // CPU allocator or CUDA allocated bytes, and on CUDA the caching allocator's allocated/reserved.
  int64_t peak_tracked_bytes = 0;
  // CPU: the same step's program-order peak (runtime::program_peak_bytes: comm buffers held from
  // issue to wait, so it does not depend on when collectives complete) and what could make it
  // inexact (all 0 when it is exact). -1 on CUDA, where device memory is not in the ledger.
  int64_t peak_program_bytes = -1;
  runtime::ProgramLedgerStats program_ledger{};
  int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;  // 0 on CPU
  // Offload: this step's host<->device copies (Engine::offload_traffic), and on CUDA the host's
  // high-water mark of the counting CPU allocator (host buffers that are not pinned; 0 on CPU,
  // where peak_tracked_bytes already counts every buffer).
  backends::common::OffloadTraffic offload{};
  int64_t peak_host_tracked_bytes = 0;
  backends::LossScaleStep loss_scale{};  // fp16 (Engine::loss_scale_step); enabled = false otherwise
  // SHA-256 of this rank's step input: every micro-batch's tokens then targets, int64 bytes in
  // order (crossval compares it with the reference's, scripts/crossval/common.py batch_sha256).
  std::string batch_sha256;
};

// What the profiled steps recorded (see RunOptions::profile).
struct ProfileResult {
  std::string source;  // "cupti" or "host"
  std::vector<profiler::Activity> activities;  // device/host activity and NVTX ranges
  std::vector<profiler::StepWindow> windows;   // each traced step's timed region
  std::vector<double> step_times_s;            // the traced steps' times (tracer on)
  int64_t dropped_records = 0;
  profiler::SkippedRecords skipped_records;    // read but not turned into activity
  double processing_s = 0;                     // tracer buffer processing, outside the steps
};

struct TrainResult {
  std::vector<StepRecord> steps;
  backends::ModelStateBytes model_state_bytes;  // at the end of the last micro-batch's backward
  int64_t tracked_after_init_bytes = 0;
  runtime::CudaMemoryStats cuda_after_init{};  // caching allocator after init (zeros on CPU)
  // Peaks over the steps from peak_from_step on (see run_training): never warm-up, never the first
  // step this process runs (ZeRO-3 records its module trace there; cuBLAS/NCCL set up), never the
  // profiled steps; the GEMM peak probe's blocks are gone before (bench/run/peak.cpp).
  int64_t peak_from_step = 0;
  int64_t peak_tracked_bytes = 0;
  int64_t peak_program_bytes = -1;              // CPU: the program-order peak over those steps (-1 on CUDA)
  runtime::ProgramLedgerStats program_ledger{};  // over those steps: counts summed, bytes the largest
  int64_t peak_host_tracked_bytes = 0;          // CUDA runs: the host's (StepRecord), over those steps
  runtime::CudaMemoryStats cuda_peaks{};        // peak_* over those steps; the rest: at the last of them
  CommSnapshot comm_last_step{};                // one step's traffic (the last)
  CommSnapshot comm_total{};                    // every step
  backends::common::OffloadTraffic offload_total{};  // host<->device copies over every step
  std::optional<ProfileResult> profile;         // with profile_steps > 0
  // A run that went wrong: the step whose loss or global grad norm was NaN/Inf (every rank sees
  // the same averaged loss and global norm, so every rank stops there); steps ends with it.
  int64_t diverged_step = -1;
  std::string diverged_what;  // "loss nan", "grad_norm inf", ...
};

// What a checkpointed run adds to the loop (bench/lifecycle/checkpoint.hpp): the step to start
// at (a resume: LR schedule and data position follow the step index) and a call after each step.
struct TrainHooks {
  int64_t first_step = 0;
  std::function<void(int64_t step)> after_step;
};

// Runs spec.train.steps optimizer steps, or up to the first whose loss or grad norm is NaN/Inf
// (result.diverged_step). `side` is an uncounted group for averaging the loss.
// With profile_steps > 0 (and no divergence), that many more steps run traced after spec.train.steps.
TrainResult run_training(backends::Engine& engine, const backends::EngineSpec& spec, const models::DataSource& data,
                         backends::common::Comm& side, const FaultInjection& fault = {}, int profile_steps = 0,
                         const TrainHooks& hooks = {});

}  // namespace zb::bench
