// report_builder.cpp — one report assembly for every command (see report_builder.hpp).
#include "reports/report_builder.hpp"

#include <ctime>

#include "reports/report.hpp"

namespace zb::reports {

using json = nlohmann::json;

json distribution_json(const Distribution& d) {
  return {{"median", d.median}, {"p10", d.p10},   {"p90", d.p90}, {"min", d.min},
          {"max", d.max},       {"mean", d.mean}, {"n", d.n}};
}

Distribution point_distribution(double v) { return {v, v, v, v, v, v, 0}; }

json summary_json(const ThroughputInputs& t) {
  const double tps = t.tokens_per_gpu_per_s_at;
  return {{"tokens_per_gpu_per_s", distribution_json(t.tokens_per_gpu_per_s)},
          {"step_time_s", distribution_json(t.step_time_s)},
          {"tokens_per_rank_per_step", t.tokens_per_rank_per_step},
          {"measured_steps", t.measured_steps},
          {"flops_per_token",
           {{"six_n", t.flops_six_n}, {"palm", t.flops_palm}, {"palm_recompute", t.flops_palm_recompute}}},
          {"mfu", flops_utilisation(t.flops_palm, tps, t.peak_tflops)},
          {"mfu_6n", flops_utilisation(t.flops_six_n, tps, t.peak_tflops)},
          {"hfu", flops_utilisation(t.flops_palm_recompute, tps, t.peak_tflops)},
          {"mfu_vs_measured_gemm",
           t.measured_gemm_tflops > 0 ? flops_utilisation(t.flops_palm, tps, t.measured_gemm_tflops) : 0.0},
          {"throughput_note", t.throughput_note}};
}

json build_report(const ReportParts& p) {
  json r = {{"schema", {{"name", kSchemaName}, {"version", kSchemaVersion}}},
            {"run_id", p.run_id},
            {"created", now_iso8601()},
            {"status", p.status},
            {"env", p.env},
            {"config", p.config},
            {"summary", p.summary},
            {"ranks", p.ranks},
            {"steps", p.steps},
            {"profile", p.profile}};
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
