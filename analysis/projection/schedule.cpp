// schedule.cpp — the backends' step programs looked up through the descriptor (see schedule.hpp).
#include "analysis/projection/schedule.hpp"

#include "backends/backend_info.hpp"
#include "runtime/errors.hpp"

namespace zb::analysis::projection {

const backends::BackendInfo* modelled_backend(const std::string& backend) {
  for (const auto& b : backends::registered_backends())
    if (b.name == backend && b.analysis.projection.program) return &b;
  return nullptr;
}

bool projection_supports(const std::string& backend) { return modelled_backend(backend) != nullptr; }

std::string modelled_backend_list() {
  std::string out;
  for (const auto& b : backends::registered_backends())
    if (b.analysis.projection.program) out += (out.empty() ? "" : ", ") + b.name;
  return out;
}

namespace {
// "x", "x or y", "x, y or z" (`last` joins the last two).
std::string joined(const std::vector<std::string>& names, const char* last) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? last : ", ") + names[i];
  return out;
}
std::vector<std::string> modelled_names(bool per_unit_times) {
  std::vector<std::string> out;
  for (const auto& b : backends::registered_backends())
    if (b.analysis.projection.program && b.analysis.projection.per_unit_times == per_unit_times) out.push_back(b.name);
  return out;
}
}  // namespace

std::string per_unit_report_phrase() {
  const auto names = modelled_names(true);
  const bool vowel = !names.empty() && std::string("aefhilmnorsx").find(names.front().front()) != std::string::npos;
  return std::string(vowel ? "an " : "a ") + joined(names, " or ") + " report";
}

std::string no_unit_ranges_phrase() {
  const auto names = modelled_names(false);
  if (names.empty()) return "";
  return joined(names, " and ") + (names.size() == 1 ? " has" : " have") + " no unit ranges";
}

Program build_program(const ScheduleInput& in, const backends::common::CollectiveCost& cost) {
  const auto* b = modelled_backend(in.backend);
  if (!b)
    throw UsageError("projection: backend '" + in.backend + "' has no modelled schedule (" + modelled_backend_list() +
                     ")");
  return b->analysis.projection.program(in, cost);
}

Program build_program(const ScheduleInput& in, const Calibration& cal) {
  return build_program(
      in, [&cal](backends::common::CollectiveKind kind, const std::string& dtype, int64_t bytes, int world, int nodes) {
        return cal.collective_s(kind, dtype, bytes, world, nodes);
      });
}

int64_t shard_elements(const std::string& backend, const models::ModelConfig& model, const nlohmann::json& options,
                       int world) {
  for (const auto& b : backends::registered_backends())
    if (b.name == backend && b.analysis.projection.shard_elements)
      return b.analysis.projection.shard_elements(model, options, world);
  int64_t total = 0;  // no shard rule: every rank holds the whole model
  for (const auto& unit : models::unit_param_specs(model))
    for (const auto& p : unit) total += p.numel();
  return total;
}

}  // namespace zb::analysis::projection
