// schedule.hpp — each backend's step as a host program (backends/common/program.hpp), looked up
// through the backend descriptor: BackendInfo::analysis.projection (backends/common/projection_program.hpp)
// holds each backend's program builder and shard rule, implemented in its own folder
// (backends/<x>/<x>_program.cpp). Owns: the lookup, the cost callback the builders price their
// collectives with (the Calibration), and the list of modelled backends the projection's errors
// name. Must not: name a backend, build a program itself, or read reports. docs/projection.md
// lists each backend's rules.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "analysis/projection/calibration.hpp"
#include "analysis/projection/simulate.hpp"
#include "backends/common/projection_program.hpp"

namespace zb::backends {
struct BackendInfo;
}

namespace zb::analysis::projection {

using ScheduleInput = backends::common::ProgramInput;
using backends::common::UnitCosts;

// The program of one optimizer step (grad_accum micro-batches, then the optimizer).
// Throws UsageError for a backend or option the projection does not model (named).
Program build_program(const ScheduleInput& in, const Calibration& cal);
// The same with any collective cost (coverage.hpp records the sizes a program asks for).
Program build_program(const ScheduleInput& in, const backends::common::CollectiveCost& cost);

// Parameter elements one rank stores at `world` (the optimizer's work scales with it): the
// backend's shard rule; the full model for a backend without one.
int64_t shard_elements(const std::string& backend, const models::ModelConfig& model, const nlohmann::json& options,
                       int world);

// Backends the projection models (a projection program registered).
bool projection_supports(const std::string& backend);
// A backend's descriptor if the projection models it, else nullptr.
const backends::BackendInfo* modelled_backend(const std::string& backend);
// The modelled backends' names, comma-separated in registry order ("a, b, c").
std::string modelled_backend_list();
// For the projection's error lines: the modelled backends with per-unit times ("an a, b or c
// report", the article as the first name is read) and those without ("d has no unit ranges").
std::string per_unit_report_phrase();
std::string no_unit_ranges_phrase();

}  // namespace zb::analysis::projection
