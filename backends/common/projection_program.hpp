// projection_program.hpp — what a backend gives the projection (analysis/projection/): the
// program of one optimizer step built from its options and the measured or FLOP-derived
// compute, and the parameter elements one rank's optimizer steps over. Owns: the inputs of a
// projection program (ProgramInput, UnitCosts, the collective cost callback), the hooks a
// backend fills (ProjectionHooks, on BackendInfo::analysis.projection) and the small helpers the
// backends' builders share (dtype names and widths, per-unit shares). Must not: cost a
// collective itself (the cost callback, analysis/projection/calibration, does), simulate
// (analysis/projection/simulate) or name a backend.
#pragma once
#include <nlohmann/json.hpp>

#include <c10/core/ScalarType.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/common/program.hpp"
#include "backends/engine.hpp"

namespace zb::backends::common {

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

struct ProgramInput {
  std::string backend;  // a registered backend's name
  std::string precision;
  nlohmann::json options = nlohmann::json::object();  // the report's config.backend.options (resolved)
  models::ModelConfig model;
  TrainConfig train;
  int world = 1, nodes = 1;
  UnitCosts costs;
  ExecModel exec = ExecModel::kHostIsDevice;
  OffloadRates offload;  // the calibration's (program.hpp): offload copies and the host optimizer
};

// Seconds for one collective of `bytes` (nccl-tests size) in `dtype` ("fp32"/"bf16"/"fp16") on
// `world` ranks over `nodes` nodes (analysis/projection/calibration.hpp Calibration::collective_s).
using CollectiveCost =
    std::function<double(CollectiveKind kind, const std::string& dtype, int64_t bytes, int world, int nodes)>;

// A backend's projection hooks (BackendInfo::analysis.projection). `program` empty: the projection does
// not model the backend (`project` refuses it, naming the backends that are modelled).
struct ProjectionHooks {
  // The program of one optimizer step (grad_accum micro-batches, then the optimizer). Throws
  // UsageError for an option the program does not model (named).
  std::function<Program(const ProgramInput& in, const CollectiveCost& cost)> program;
  // Parameter elements one rank stores at `world` (padding included; the optimizer's work
  // scales with it). Empty: the full model on every rank.
  std::function<int64_t(const models::ModelConfig& model, const nlohmann::json& options, int world)> shard_elements;
  // The engine records one NVTX range per unit and the program consumes per-unit compute
  // (profile.units has layers + 1 entries); false: one forward/backward range (DDP).
  bool per_unit_times = false;
  // The report's resolved options as this backend resolves them at `world` ranks, when the
  // projection's world size differs from the run's (FSDP1 resolved NO_SHARD at world size 1 and
  // recorded what was asked for). Empty: the options as recorded.
  std::function<nlohmann::json(const nlohmann::json& options, int world)> options_at_world;
};

// Helpers the backends' builders share.
struct ProgramDtype {
  std::string name;  // fp32 | bf16 | fp16: the calibration's dtype key
  int64_t bytes = 4;
};
// fp32, bf16 or fp16 as the calibration names it; UsageError for another dtype.
ProgramDtype program_dtype(at::ScalarType t);
// A resolved record's dtype (backends/precision_plan.hpp dtype_key), else `fallback`.
ProgramDtype program_dtype_or(const std::optional<at::ScalarType>& t, const ProgramDtype& fallback);
// The compute dtype of a precision mode for the program: fp32 for "fp32", bf16 otherwise.
ProgramDtype program_compute_dtype(const std::string& precision);
// v[u], or 0 past the end (a unit with no measured time).
double unit_share(const std::vector<double>& v, size_t u);

}  // namespace zb::backends::common
