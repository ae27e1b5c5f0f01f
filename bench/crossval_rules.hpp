// crossval_rules.hpp — the catalogue of known differences between zerobench and the framework
// it is checked against (docs/crossval.md, "Explained, not changed"). Each rule predicts, from
// zerobench's resolved configuration alone (the backend options, the model, the world size, the
// engine's resolved options in zerobench's report), the exact value the upstream framework must
// report, and names the upstream file and function that explain it. compare_mode accepts a
// difference only when the upstream number equals the prediction.
// Must not: read the upstream's output (a rule checked against the upstream's own numbers
// explains nothing), run anything or read files.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "bench/crossval_compare.hpp"

namespace zb::bench {

struct StateExplanation {
  int64_t expected = 0;            // the upstream's bytes in this category
  bool zerobench_reports = true;   // whether zerobench reports the category at all
  std::string reason, upstream;    // why; the upstream file: function
};
// Model-state category `category` of rank `rank`; `zb` = zerobench's model_states_bytes of that
// rank, `report` = zerobench's run report (config.backend.options: its resolved options).
std::optional<StateExplanation> explain_state(const CrossvalContext& c, const nlohmann::json& report, int rank,
                                              const std::string& category, const nlohmann::json& zb);

struct CommExplanation {
  int64_t count = 0, bytes = 0;  // the upstream's calls and bytes of this kind in this step
  std::string reason, upstream;
};
// Collectives of `kind` issued by rank `rank` in step `step`, where zerobench issued
// `zb_count` calls of `zb_bytes`.
std::optional<CommExplanation> explain_comm(const CrossvalContext& c, const nlohmann::json& report, int rank,
                                            int64_t step, const std::string& kind, int64_t zb_count, int64_t zb_bytes);

}  // namespace zb::bench
