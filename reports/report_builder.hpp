// report_builder.hpp — the one place a report's JSON is assembled: `run` (bench/run/run_command.cpp)
// and `project` (analysis/projection/projection.cpp) fill the same parts and get the same
// top-level keys, schema header, creation time and summary keys (SCHEMA.md). Owns: the
// top-level assembly, the summary's shared throughput keys (tokens/GPU/s and step-time
// distributions, FLOPs per token, MFU, MFU 6N, HFU, MFU against the measured GEMM) and the
// distribution's JSON form. Must not: measure, project or validate (report.hpp validates; the
// callers validate before writing), or know a backend.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "reports/metrics.hpp"
#include "reports/run_report.hpp"

namespace zb::reports {

// {median, p10, p90, min, max, mean, n}.
DistributionRecord distribution_record(const Distribution& d);
// A single value as a distribution with n = 0 (a projected number: nothing was measured).
Distribution point_distribution(double v);

// What the summary's shared keys are computed from.
struct ThroughputInputs {
  Distribution tokens_per_gpu_per_s, step_time_s;
  int64_t tokens_per_rank_per_step = 0;
  int64_t measured_steps = 0;
  double flops_six_n = 0, flops_palm = 0, flops_palm_recompute = 0;  // per token (models::FlopsPerToken)
  double tokens_per_gpu_per_s_at = 0;  // the rate the utilisations are computed at (the median step's)
  double peak_tflops = 0;
  double measured_gemm_tflops = 0;  // 0: mfu_vs_measured_gemm is 0
  std::string throughput_note;
};
// The summary keys every report has; a caller adds its own (final_loss, entropy_floor_nats).
Summary summary_record(const ThroughputInputs& t);

// summary.batching from a token file's rows (models::RowStats, or anything with its fields): the
// one mapping `run` and `project` both write.
template <class Rows>
BatchingSummary batching_summary(const std::string& mode, const Rows& rows) {
  BatchingSummary b;
  b.mode = mode;
  b.real_tokens_per_rank_per_step = rows.real_tokens;
  b.documents_per_rank_per_step = rows.documents;
  b.label_tokens_per_rank_per_step = rows.label_tokens;
  b.padding_fraction = rows.padding_fraction;
  b.attention_span = rows.attention_span;
  return b;
}

// A report's parts, typed (reports/run_report.hpp); build_report adds the schema header and the
// creation time.
struct ReportParts {
  std::string run_id;
  Status status;
  Env env;
  RunConfig config;
  Summary summary;
  std::vector<RankRecord> ranks;
  std::vector<StepRecord> steps;
  std::optional<Profile> profile;  // none: `profile` is null
  nlohmann::json sections = nlohmann::json::object();  // further top-level sections (projection)
};
nlohmann::json build_report(const ReportParts& parts);

// Now, UTC, as reports write it ("2026-01-31T12:00:00Z").
std::string now_iso8601();

}  // namespace zb::reports
