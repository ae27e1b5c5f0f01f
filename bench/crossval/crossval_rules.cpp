// crossval_rules.cpp — the known differences, dispatched to the backend's rules (see
// crossval_rules.hpp).
#include "bench/crossval/crossval_rules.hpp"

#include "backends/backend_info.hpp"

namespace zb::bench {

namespace {
const backends::CrossvalReference* reference(const std::string& backend) {
  for (const auto& b : backends::registered_backends())
    if (b.name == backend && b.crossval) return &*b.crossval;
  return nullptr;
}

// What a rule sees of the report: the resolved options ({} when it has none), the process-group
// backend ("" when unknown).
const nlohmann::json& options_of(const reports::RunReport& report) {
  static const nlohmann::json none = nlohmann::json::object();
  const auto& b = report.config.backend;
  return b && b->options ? *b->options : none;
}
std::string pg_backend_of(const reports::RunReport& report) {
  return report.env && report.env->pg_backend ? *report.env->pg_backend : "";
}
}  // namespace

std::optional<StateExplanation> explain_state(const CrossvalContext& c, const reports::RunReport& report, int rank,
                                              const std::string& category, const nlohmann::json& zb) {
  const auto* ref = reference(c.backend);
  if (!ref || !ref->explain_state) return std::nullopt;
  return ref->explain_state(backends::CrossvalCase{c.spec, c.world_size, options_of(report), pg_backend_of(report)}, rank,
                            category, zb);
}

std::optional<CommExplanation> explain_comm(const CrossvalContext& c, const reports::RunReport& report, int rank,
                                            int64_t step, const std::string& kind, int64_t zb_count, int64_t zb_bytes) {
  const auto* ref = reference(c.backend);
  if (!ref || !ref->explain_comm) return std::nullopt;
  return ref->explain_comm(backends::CrossvalCase{c.spec, c.world_size, options_of(report), pg_backend_of(report)}, rank,
                           step, kind, zb_count, zb_bytes);
}

std::optional<CrossvalBound> measured_bound(const std::string& backend, const std::string& precision) {
  const auto* ref = reference(backend);
  if (!ref || !ref->measured_bound) return std::nullopt;
  return ref->measured_bound(precision);
}

}  // namespace zb::bench
