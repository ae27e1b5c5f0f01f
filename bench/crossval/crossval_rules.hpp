// crossval_rules.hpp — the known differences between zerobench and the framework it is checked
// against (docs/crossval.md, "Explained, not changed"), looked up in the backend's descriptor:
// each backend's rules live in its folder (BackendInfo::crossval, backends/crossval_reference.hpp
// says what a rule may and may not do). compare_mode accepts a difference only when the upstream
// number equals the rule's prediction.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "backends/crossval_reference.hpp"
#include "bench/crossval/crossval_compare.hpp"

namespace zb::bench {

using backends::CommExplanation;
using backends::CrossvalBound;
using backends::StateExplanation;

// Model-state category `category` of rank `rank`; `zb` = zerobench's model_states_bytes of that
// rank by category (compare_mode's flattened map: "host.<category>" for offloaded ones),
// `report` = zerobench's run report (the rule sees its config.backend.options, the resolved
// options, and env.pg_backend: backends::CrossvalCase).
std::optional<StateExplanation> explain_state(const CrossvalContext& c, const reports::RunReport& report, int rank,
                                              const std::string& category, const nlohmann::json& zb);

// Collectives of `kind` issued by rank `rank` in step `step`, where zerobench issued
// `zb_count` calls of `zb_bytes`.
std::optional<CommExplanation> explain_comm(const CrossvalContext& c, const reports::RunReport& report, int rank,
                                            int64_t step, const std::string& kind, int64_t zb_count, int64_t zb_bytes);

// The bound `backend` measured for `precision` on the CPU (its CrossvalReference::measured_bound);
// nullopt: the generic bound.
std::optional<CrossvalBound> measured_bound(const std::string& backend, const std::string& precision);

}  // namespace zb::bench
