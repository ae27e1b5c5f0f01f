// report_builder.cpp — one report assembly for every command (see report_builder.hpp).
#include "reports/report_builder.hpp"

#include <ctime>

#include "reports/report.hpp"

namespace zb::reports {

using json = nlohmann::json;

DistributionRecord distribution_record(const Distribution& d) {
  DistributionRecord r;
  r.median = d.median;
  r.p10 = d.p10;
  r.p90 = d.p90;
  r.min = d.min;
  r.max = d.max;
  r.mean = d.mean;
  r.n = d.n;
  return r;
}

Distribution point_distribution(double v) { return {v, v, v, v, v, v, 0}; }

Summary summary_record(const ThroughputInputs& t) {
  const double tps = t.tokens_per_gpu_per_s_at;
  Summary s;
  s.tokens_per_gpu_per_s = distribution_record(t.tokens_per_gpu_per_s);
  s.step_time_s = distribution_record(t.step_time_s);
  s.tokens_per_rank_per_step = t.tokens_per_rank_per_step;
  s.measured_steps = t.measured_steps;
  s.flops_per_token = FlopsPerToken{t.flops_six_n, t.flops_palm, t.flops_palm_recompute, {}};
  s.mfu = flops_utilisation(t.flops_palm, tps, t.peak_tflops);
  s.mfu_6n = flops_utilisation(t.flops_six_n, tps, t.peak_tflops);
  s.hfu = flops_utilisation(t.flops_palm_recompute, tps, t.peak_tflops);
  s.mfu_vs_measured_gemm = t.measured_gemm_tflops > 0 ? flops_utilisation(t.flops_palm, tps, t.measured_gemm_tflops) : 0.0;
  s.throughput_note = t.throughput_note;
  return s;
}

json build_report(const ReportParts& p) {
  json ranks = json::array(), steps = json::array();
  for (const auto& r : p.ranks) ranks.push_back(to_json(r));
  for (const auto& s : p.steps) steps.push_back(to_json(s));
  json r = {{"schema", {{"name", kSchemaName}, {"version", kSchemaVersion}}},
            {"run_id", p.run_id},
            {"created", now_iso8601()},
            {"status", to_json(p.status)},
            {"env", to_json(p.env)},
            {"config", to_json(p.config)},
            {"summary", to_json(p.summary)},
            {"ranks", ranks},
            {"steps", steps},
            {"profile", p.profile ? to_json(*p.profile) : json(nullptr)}};
  for (const auto& [k, v] : p.sections.items()) r[k] = v;
  return r;
}

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace zb::reports
