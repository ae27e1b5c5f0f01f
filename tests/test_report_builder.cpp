// The one report builder (reports/report_builder.hpp) that `run` and `project` both assemble
// their reports with: the schema header and creation time added, every part where the schema
// wants it, the summary's shared throughput keys from their formulas, extra sections merged.
#include <gtest/gtest.h>

#include "reports/report.hpp"
#include "reports/report_builder.hpp"
#include "tests/build_paths.hpp"

using namespace zb;
using nlohmann::json;

namespace {
reports::ThroughputInputs throughput() {
  reports::ThroughputInputs t;
  t.step_time_s = reports::point_distribution(2.0);
  t.tokens_per_gpu_per_s = reports::point_distribution(512.0);
  t.tokens_per_rank_per_step = 1024;
  t.flops_six_n = 6e6;
  t.flops_palm = 7e6;
  t.flops_palm_recompute = 9e6;
  t.tokens_per_gpu_per_s_at = 512.0;
  t.peak_tflops = 1.0;
  t.throughput_note = "note";
  return t;
}
}  // namespace

// A committed run report taken apart and rebuilt is the same report (but its creation time),
// valid; an extra section lands at the top level.
TEST(ReportBuilder, ACommittedReportRebuiltFromItsPartsIsTheSameValidReport) {
  const auto original = reports::read_report(std::string(zb::bench::source_dir()) +
                                             "/reports/results/cpu/compare-blog/runs/a_accelerate_fsdp_blog_r5.json");
  const auto record = reports::run_report_from_json(original);
  reports::ReportParts parts;
  parts.run_id = record.run_id;
  parts.status = record.status;
  parts.env = *record.env;
  parts.config = record.config;
  parts.summary = *record.summary;
  parts.ranks = record.rank_records();
  parts.steps = record.step_records();
  parts.profile = record.profile;
  auto rebuilt = reports::build_report(parts);
  EXPECT_EQ(rebuilt["created"].get<std::string>().size(), 20u);  // 2026-01-31T12:00:00Z
  const auto problems = reports::validate_report(rebuilt);
  EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems.front());
  rebuilt["created"] = original["created"];
  EXPECT_EQ(rebuilt, original);
  // The summary's shared keys computed again from the report's own inputs are its values.
  const auto& sm = original["summary"];
  reports::ThroughputInputs t;
  auto dist = [](const json& d) {
    return reports::Distribution{d["median"], d["p10"], d["p90"], d["min"], d["max"], d["mean"], d["n"]};
  };
  t.tokens_per_gpu_per_s = dist(sm["tokens_per_gpu_per_s"]);
  t.step_time_s = dist(sm["step_time_s"]);
  t.tokens_per_rank_per_step = sm["tokens_per_rank_per_step"];
  t.measured_steps = sm["measured_steps"];
  t.flops_six_n = sm["flops_per_token"]["six_n"];
  t.flops_palm = sm["flops_per_token"]["palm"];
  t.flops_palm_recompute = sm["flops_per_token"]["palm_recompute"];
  t.tokens_per_gpu_per_s_at = reports::tokens_per_gpu_per_s(t.tokens_per_rank_per_step, t.step_time_s.median);
  t.peak_tflops = original["env"]["peak_tflops"];
  t.measured_gemm_tflops = original["env"]["measured_gemm_tflops"];
  t.throughput_note = sm["throughput_note"];
  auto again = reports::to_json(reports::summary_record(t));
  again["final_loss"] = sm["final_loss"];
  again["entropy_floor_nats"] = sm["entropy_floor_nats"];
  EXPECT_EQ(again, sm);
  parts.sections["projection"] = {{"step_time_s", 2.0}};
  EXPECT_EQ(reports::build_report(parts)["projection"]["step_time_s"], 2.0);
  // Without its summary the same parts are not a valid report (the validation can fail).
  auto report = reports::build_report(parts);
  report["summary"] = json::object();
  EXPECT_FALSE(reports::validate_report(report).empty());
}

TEST(ReportBuilder, SummaryUtilisationsFollowTheMetricsFormulas) {
  auto t = throughput();
  const auto s = reports::to_json(reports::summary_record(t));
  EXPECT_DOUBLE_EQ(s["mfu"].get<double>(), reports::flops_utilisation(7e6, 512.0, 1.0));
  EXPECT_DOUBLE_EQ(s["mfu_6n"].get<double>(), reports::flops_utilisation(6e6, 512.0, 1.0));
  EXPECT_DOUBLE_EQ(s["hfu"].get<double>(), reports::flops_utilisation(9e6, 512.0, 1.0));
  EXPECT_EQ(s["mfu_vs_measured_gemm"].get<double>(), 0.0);  // no measured GEMM
  EXPECT_EQ(s["step_time_s"]["n"], 0);                      // a point: nothing measured
  EXPECT_EQ(s["tokens_per_rank_per_step"], 1024);
  t.measured_gemm_tflops = 0.5;
  EXPECT_DOUBLE_EQ(reports::summary_record(t).mfu_vs_measured_gemm.value(),
                   reports::flops_utilisation(7e6, 512.0, 0.5));
}
