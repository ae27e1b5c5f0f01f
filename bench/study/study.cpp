// study.cpp — the precision study (see study.hpp).
#include "bench/study/study.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "backends/backend_info.hpp"
#include "bench/matrix/matrix.hpp"
#include "reports/report.hpp"
#include "reports/run_report.hpp"
#include "reports/svg.hpp"
#include "runtime/errors.hpp"

namespace zb::bench {

namespace {
using json = nlohmann::json;

struct Mode {
  std::string name, backend, precision;
  bool scaled_lr = false;
};

std::string lr_text(double lr) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0e", lr);
  return buf;
}

std::string fixed(double v, const char* f = "%.4f") {
  char buf[32];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Mean of the last 10% of steps (at least 5): the loss a run has settled at.
double final_loss(const std::vector<double>& loss) {
  const size_t n = std::max<size_t>(5, loss.size() / 10);
  double s = 0;
  size_t k = 0;
  for (size_t i = loss.size() > n ? loss.size() - n : 0; i < loss.size(); ++i, ++k) s += loss[i];
  return k ? s / double(k) : NAN;
}

// First step whose 5-step moving average is at or below target, -1 if never.
int64_t steps_to(const std::vector<double>& loss, double target) {
  double window = 0;
  for (size_t i = 0; i < loss.size(); ++i) {
    window += loss[i];
    if (i >= 5) window -= loss[i - 5];
    const double avg = window / double(std::min<size_t>(i + 1, 5));
    if (avg <= target) return int64_t(i);
  }
  return -1;
}
}  // namespace

int precision_study_command(const PrecisionStudyOptions& o) {
  if (o.lrs.empty()) throw UsageError("--lrs needs at least one learning rate");
  for (double lr : o.lrs)
    if (!(lr > 0)) throw UsageError("--lrs: learning rate " + fixed(lr, "%g") + " must be positive");
  // The modes each backend declares (BackendInfo::analysis.precision_study_modes), the fp32 reference first,
  // then in registry order; the lr x W variants last, and only when asked for.
  std::vector<Mode> modes, scaled;
  for (const auto& b : backends::registered_backends())
    for (const auto& m : b.analysis.precision_study_modes) {
      const Mode mode{m.label, b.name, m.precision, m.lr_x_world};
      if (m.reference)
        modes.insert(modes.begin(), mode);
      else
        (m.lr_x_world ? scaled : modes).push_back(mode);
    }
  if (o.scale_lr_by_world_size) modes.insert(modes.end(), scaled.begin(), scaled.end());
  if (!o.modes.empty()) {  // a subset; the fp32 reference always runs
    std::vector<Mode> chosen = {modes.front()};
    for (const auto& name : o.modes) {
      if (name == "fp32") continue;
      auto it = std::find_if(modes.begin(), modes.end(), [&](const Mode& m) { return m.name == name; });
      if (it == modes.end()) {
        std::string known;
        for (const auto& m : modes) known += (known.empty() ? "" : ", ") + m.name;
        throw UsageError("--modes: unknown mode '" + name + "' (" + known + ")");
      }
      chosen.push_back(*it);
    }
    modes = chosen;
  }

  MatrixSpec spec;
  spec.name = "precision-study";
  spec.timeout_s = o.timeout_s;
  for (double lr : o.lrs)
    for (const auto& m : modes) {
      MatrixCell c;
      c.id = "lr" + lr_text(lr) + "_" + m.name;
      const double cell_lr = m.scaled_lr ? lr * o.nproc : lr;
      c.options = {{"backend", m.backend},       {"precision", m.precision},
                   {"lr", fixed(cell_lr, "%.10g")}, {"lr-schedule", "constant"},
                   {"model", o.model},           {"nproc", std::to_string(o.nproc)},
                   {"micro-batch", std::to_string(o.micro_batch)}, {"seq-len", std::to_string(o.seq_len)},
                   {"steps", std::to_string(o.steps)}, {"warmup", "1"},
                   {"data", "markov"},           {"seed", std::to_string(o.seed)},
                   {"measure-lost-updates", "true"}};
      spec.cells.push_back(c);
    }
  MatrixOptions mo;
  mo.out_dir = o.out_dir;
  mo.force = o.force;
  const int rc = run_matrix(spec, mo);
  if (rc == 130) return rc;

  // Summary per (lr, mode).
  json summary = {{"schema", {{"name", "zerobench.precision-study"}, {"version", 1}}},
                  {"model", o.model},
                  {"world_size", o.nproc},
                  {"steps", o.steps},
                  {"runs", json::array()}};
  std::ostringstream md;
  md << "| lr | mode | final loss | entropy floor | gap to floor | progress vs fp32 | steps to target | loss target | "
        "mean lost-update fraction | status |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>zerobench precision study</title>"
          "<style>body{font-family:sans-serif;margin:24px}figure{display:inline-block;margin:8px}"
          "table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:4px 8px}</style>"
          "</head><body><h1>Precision study: FSDP/FSDP2 low vs FSDP/FSDP2 mixed vs ZeRO3 bf16</h1>\n";
  for (double lr : o.lrs) {
    std::map<std::string, reports::RunReport> runs;
    for (const auto& m : modes) {
      const std::string id = "lr" + lr_text(lr) + "_" + m.name;
      runs[m.name] = reports::run_report_from_json(reports::read_report(o.out_dir + "/" + id + ".json"));
    }
    auto losses = [](const reports::RunReport& r) {
      std::vector<double> v;
      for (const auto& s : r.step_records()) v.push_back(s.loss.value_or(NAN));
      return v;
    };
    // Loss target: halfway from the initial loss to where the fp32 reference settles.
    double target = NAN, ref_start = NAN, ref_final = NAN;
    if (runs["fp32"].ok()) {
      const auto ref = losses(runs["fp32"]);
      ref_start = ref.front();
      ref_final = final_loss(ref);
      target = 0.5 * (ref_start + ref_final);
    }
    std::vector<reports::svg::Series> loss_series, lost_series;
    double floor = NAN;
    for (const auto& m : modes) {
      const auto& r = runs[m.name];
      json entry = {{"lr", lr}, {"mode", m.name}, {"status", r.status.state}};
      if (!r.ok()) {
        summary["runs"].push_back(entry);
        md << "| " << lr_text(lr) << " | " << m.name << " | - | - | - | - | - | - | - | " << r.status.state << " |\n";
        continue;
      }
      const auto l = losses(r);
      floor = r.summary->entropy_floor_nats.value_or(NAN);
      double lost_sum = 0;
      reports::svg::Series ls{m.name, {}, {}}, fs{m.name, {}, {}};
      for (const auto& s : r.step_records()) {
        ls.x.push_back(double(s.step));
        ls.y.push_back(s.loss.value_or(NAN));
        const double f = s.lost_update_fraction.value_or(0.0);
        fs.x.push_back(double(s.step));
        fs.y.push_back(f);
        lost_sum += f;
      }
      loss_series.push_back(ls);
      lost_series.push_back(fs);
      const double fl = final_loss(l);
      const int64_t reach = std::isfinite(target) ? steps_to(l, target) : -1;
      const double lost_mean = lost_sum / double(std::max<size_t>(1, l.size()));
      entry["final_loss"] = fl;
      entry["entropy_floor_nats"] = floor;
      entry["gap_to_floor"] = fl - floor;
      // Share of the fp32 reference's loss reduction this run achieved (1 = as far as fp32).
      const double progress = (ref_start - fl) / (ref_start - ref_final);
      entry["progress_vs_fp32"] = progress;
      entry["loss_target"] = target;
      entry["steps_to_target"] = reach;
      entry["mean_lost_update_fraction"] = lost_mean;
      entry["lr_used"] = r.config.train && r.config.train->lr ? json(*r.config.train->lr) : json();
      // fp16 modes: optimizer steps the loss scaler skipped (an overflow), which make no progress.
      const int64_t skipped = r.summary->skipped_steps.value_or(0);
      if (r.summary->skipped_steps) entry["skipped_steps"] = skipped;
      summary["runs"].push_back(entry);
      md << "| " << lr_text(lr) << " | " << m.name << " | " << fixed(fl) << " | " << fixed(floor) << " | "
         << fixed(fl - floor) << " | " << fixed(progress, "%.2f") << " | " << (reach >= 0 ? std::to_string(reach) : "not reached") << " | "
         << fixed(target) << " | " << fixed(lost_mean, "%.3f") << " | "
         << (skipped > 0 ? "ok, " + std::to_string(skipped) + " steps skipped (fp16 overflow)" : std::string("ok"))
         << " |\n";
    }
    const auto loss_svg = reports::svg::line_chart("Loss at lr " + lr_text(lr), loss_series, "step", "loss (nats)",
                                                   floor, "entropy floor");
    const auto lost_svg = reports::svg::line_chart("Updates lost to rounding at lr " + lr_text(lr), lost_series, "step",
                                                   "fraction of weights", NAN, "");
    reports::write_text_atomic(o.out_dir + "/loss_lr" + lr_text(lr) + ".svg", loss_svg);
    reports::write_text_atomic(o.out_dir + "/lost_updates_lr" + lr_text(lr) + ".svg", lost_svg);
    html << "<h2>lr " << lr_text(lr) << "</h2><figure>" << loss_svg
         << "<figcaption>fp32, fsdp_mixed, fsdp2_mixed and zero3_bf16 nearly coincide (fp32 master weights; "
            "fsdp2_mixed reports its loss in bf16, accelerate's output_dtype).</figcaption></figure>"
         << "<figure>" << lost_svg << "</figure>\n";
  }
  html << "<h2>Summary</h2><pre>" << reports::svg::escape(md.str()) << "</pre>"
       << "<p>Lost-update fraction: weights whose AdamW update |&Delta;w| was below half an ulp of w in the dtype "
          "the optimizer stores them in. FSDP/FSDP2 low store bf16 weights; FSDP/FSDP2 mixed and ZeRO3 keep "
          "fp32 masters.</p></body></html>\n";
  reports::write_json_atomic(o.out_dir + "/summary.json", summary);
  reports::write_text_atomic(o.out_dir + "/summary.md", md.str());
  reports::write_text_atomic(o.out_dir + "/precision.html", html.str());
  std::cout << md.str() << "study: " << o.out_dir << "/summary.json, precision.html\n";
  return rc;
}

}  // namespace zb::bench
