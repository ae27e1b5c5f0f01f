// crossval_loss_scale.cpp — see crossval_loss_scale.hpp.
#include "bench/crossval/crossval_loss_scale.hpp"

namespace zb::bench {

using json = nlohmann::json;

LossScaleComparison compare_loss_scale(const reports::RunReport& report, const std::vector<json>& upstream,
                                       std::vector<std::string>& reasons) {
  LossScaleComparison out;
  const auto& zsteps = report.step_records();
  bool any = false;
  for (const auto& s : zsteps) any = any || s.loss_scale.has_value();
  for (const auto& u : upstream)
    for (const auto& s : u.value("steps", json::array())) any = any || s.contains("loss_scale");
  if (!any) return out;
  json steps = json::array();
  bool equal = true;
  for (size_t j = 0; j < zsteps.size(); ++j) {
    const std::optional<reports::LossScale>& zs = zsteps[j].loss_scale;
    const json z = zs ? reports::to_json(*zs) : json(nullptr);  // as the report writes it
    bool all_skipped = zs && zs->skipped;
    json entry = {{"step", j}, {"zerobench", z}};
    bool step_equal = true;
    for (size_t k = 0; k < upstream.size(); ++k) {
      const auto& us = upstream[k].value("steps", json::array());
      const json u = j < us.size() ? us[j].value("loss_scale", json(nullptr)) : json(nullptr);
      if (k == 0) entry["upstream"] = u;
      all_skipped = all_skipped && u.is_object() && u.value("skipped", false);
      auto as_mine = [&](const char* f, const json& mine) { return u.contains(f) && u[f] == mine; };
      const bool same = zs && u.is_object() && as_mine("scale", zs->scale) && as_mine("overflow", zs->overflow) &&
                        as_mine("skipped", zs->skipped) && as_mine("next_scale", zs->next_scale);
      if (!same) {
        step_equal = equal = false;
        reasons.push_back("step " + std::to_string(j) + ": loss scale " + z.dump() + " vs upstream rank " +
                          std::to_string(k) + " " + u.dump());
      }
    }
    entry["equal"] = step_equal;
    if (all_skipped) out.skipped_by_both.insert(j);
    steps.push_back(entry);
  }
  out.doc = {{"equal", equal}, {"steps", steps}, {"skipped_steps", out.skipped_by_both.size()}};
  return out;
}

}  // namespace zb::bench
