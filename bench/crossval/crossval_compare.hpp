// crossval_compare.hpp — the comparison half of `zerobench crossval`: from zerobench's report
// and the reference's per-rank results (scripts/crossval/common.py) to one mode's verdict.
// Owns: the tolerances and their derivation (docs/crossval.md), the per-step loss / grad-norm
// check, the per-step lr and batch (SHA-256) of every rank (equal to the bit), model-state bytes per category per rank, collectives per step per kind, the
// performance ratios (reported, never asserted), and what counts as agreement: exactly W ranks
// and T steps on each side, finite losses and grad norms, every category and every rank's
// collectives of every kind compared. A difference is accepted only when a rule of
// crossval_rules.hpp predicts the upstream value exactly. Must not: run anything or read files.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "backends/engine.hpp"
#include "reports/run_report.hpp"

namespace zb::bench {

struct CrossvalContext {
  std::string backend;    // zerobench's backend name
  int world_size = 1;
  backends::EngineSpec spec;  // resolved: model, train, precision, backend options (unplanted)
  std::string device = "cpu";  // where both sides ran: "cpu" (Gloo) | "cuda" (NCCL)
};

// Relative tolerances for loss and grad norm per step (docs/crossval.md derives them, per device:
// measured on cpu; on cuda the same bounds, not yet measured on a GPU — measured_on_device false).
struct Tolerance {
  double loss_rel = 1e-5;
  double grad_norm_rel = 1e-5;
  std::string basis;
  bool measured_on_device = true;
};
Tolerance tolerance_for(const std::string& backend, const std::string& precision, int64_t steps,
                        const std::string& device = "cpu");

// One mode: `report` is zerobench's run report (the typed record: every field read is typed);
// `upstream` the reference's rank<r>.json files in rank order — their own shape
// (scripts/crossval/common.py: one rank per file, `steps[].comm.{kinds,other}`,
// `model_states_bytes`), not a report. Returns the mode's section of the crossval document
// (SCHEMA in reports/SCHEMA.md, "crossval"), with "verdict": {"agree", "reasons"}.
nlohmann::json compare_mode(const CrossvalContext& ctx, const reports::RunReport& report,
                            const std::vector<nlohmann::json>& upstream);

}  // namespace zb::bench
