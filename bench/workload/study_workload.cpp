// study_workload.cpp — `zerobench study workload` (study_workload.hpp).
#include "bench/workload/study_workload.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "bench/build_info.hpp"
#include "bench/matrix/matrix.hpp"
#include "models/activation_checkpointing.hpp"
#include "reports/columns.hpp"
#include "reports/report.hpp"
#include "reports/stats.hpp"
#include "reports/svg.hpp"
#include "runtime/errors.hpp"

namespace zb::bench::workload {

namespace {
using json = nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fixed(double v, const char* f) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A committed file named relative to the repository: as given when it exists from here, else in
// the source tree this binary was built from; as given otherwise (the run names it missing).
std::string locate(const std::string& path) {
  if (path.empty() || path[0] == '/' || exists(path)) return path;
  const std::string in_source = std::string(source_dir()) + "/" + path;
  return exists(in_source) ? in_source : path;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The chosen values of a list option, in the order given; one line naming a bad or repeated one.
std::vector<std::string> chosen(const std::string& flag, const std::vector<std::string>& values,
                                const std::vector<std::string>& known, const std::string& what) {
  if (values.empty()) throw UsageError(flag + " needs at least one " + what);
  std::set<std::string> seen;
  for (const auto& v : values) {
    if (std::find(known.begin(), known.end(), v) == known.end())
      throw UsageError(flag + ": unknown " + what + " '" + v + "' (" + join(known) + ")");
    if (!seen.insert(v).second) throw UsageError(flag + ": " + what + " '" + v + "' is listed twice");
  }
  return values;
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
  return out;
}

json num(double v) { return std::isfinite(v) ? json(v) : json(); }

// "+12.3%" of b relative to a.
std::string change(double now, double before) { return fixed(100.0 * (now / before - 1.0), "%+.1f%%"); }

// Whether two cells' real-token throughputs differ beyond their 95% intervals (unknown: true).
bool resolved(const CellNumbers& a, const CellNumbers& b) {
  if (!std::isfinite(a.real_tps_lo) || !std::isfinite(b.real_tps_lo)) return true;
  return a.real_tps_lo > b.real_tps_hi || b.real_tps_lo > a.real_tps_hi;
}
std::string unresolved_note(const CellNumbers& a, const CellNumbers& b) {
  return resolved(a, b) ? "" : " [within the two cells' 95% intervals: not resolved]";
}

struct Key {
  std::string side, batching, ac;
  bool operator<(const Key& o) const { return std::tie(side, batching, ac) < std::tie(o.side, o.batching, o.ac); }
};
}  // namespace

std::vector<WorkloadCell> workload_cells(const WorkloadStudyOptions& o) {
  const std::vector<WorkloadSide> all = {{"fsdp", "FSDP-mode", o.fsdp_config}, {"zero3", "ZeRO3-mode", o.zero3_config}};
  std::vector<std::string> labels;
  for (const auto& s : all) labels.push_back(s.label);
  const auto sides = o.backends.empty() ? labels : chosen("--backends", o.backends, labels, "backend");
  const auto batchings = chosen("--batchings", o.batchings, {"pad", "pad-longest", "pack", "pack-naive"}, "batching");
  if (o.ac_modes.empty()) throw UsageError("--ac-modes needs at least one activation-checkpointing mode");
  std::set<std::string> seen;
  for (const auto& m : o.ac_modes) {
    const std::string problem = models::activation_checkpointing_problem(m);
    if (!problem.empty() || m == "true" || m == "false" || m.empty())
      throw UsageError("--ac-modes: " + (problem.empty() ? "'" + m + "' is not a mode: expected none, full, selective-layer:N (N >= 0) or selective-op" : problem));
    if (!seen.insert(m).second) throw UsageError("--ac-modes: activation-checkpointing mode '" + m + "' is listed twice");
  }
  std::vector<WorkloadCell> cells;
  for (const auto& s : all) {
    if (std::find(sides.begin(), sides.end(), s.label) == sides.end()) continue;
    WorkloadSide side = s;
    side.config = locate(s.config);
    if (!exists(side.config))
      throw UsageError("--" + s.label + "-config: no file '" + s.config + "'");
    for (const auto& b : batchings)
      for (const auto& m : o.ac_modes) cells.push_back({s.label + "_" + b + "_ac-" + sanitize(m), side, b, m});
  }
  return cells;
}

MatrixSpec workload_matrix(const WorkloadStudyOptions& o, const std::vector<WorkloadCell>& cells) {
  MatrixSpec spec;
  spec.name = "workload-study";
  spec.timeout_s = o.timeout_s;
  std::string data = o.data;
  if (data.rfind("lengths:", 0) == 0) data = "lengths:" + locate(data.substr(8));
  for (const auto& c : cells) {
    MatrixCell m;
    m.id = c.id;
    m.options = {{"config", c.side.config}, {"model", o.model}};
    if (o.layers > 0) m.options.emplace_back("layers", std::to_string(o.layers));
    const std::vector<std::pair<std::string, std::string>> rest = {
        {"nproc", std::to_string(o.nproc)},      {"micro-batch", std::to_string(o.micro_batch)},
        {"seq-len", std::to_string(o.seq_len)},  {"steps", std::to_string(o.steps)},
        {"warmup", std::to_string(o.warmup)},    {"data", data},
        {"batching", c.batching},                {"activation-checkpointing", c.ac},
        {"seed", std::to_string(o.seed)},        {"device", o.device}};
    m.options.insert(m.options.end(), rest.begin(), rest.end());
    spec.cells.push_back(m);
  }
  return spec;
}

CellNumbers cell_numbers(const reports::RunReport& r) {
  CellNumbers n;
  n.ok = r.ok();
  n.state = r.status.state;
  n.error = r.status.error;
  const reports::RowContext ctx{r, nullptr, std::nullopt};
  auto col = [&](const char* key) {
    const auto v = reports::column_value(reports::column(key), ctx);
    return v ? *v : kNaN;
  };
  n.real_tps = col("tokens_per_gpu_per_s.median");
  n.mfu = col("mfu");
  n.peak_mib = col("peak_mib");
  n.tracked_peak_mib = col("observed_peak_mib");
  n.estimate_mib = col("estimated_peak_mib");
  n.peak_over_estimate = col("peak_over_estimate");
  n.final_loss = col("final_loss");
  const bool batched = n.ok && r.summary && r.summary->batching;
  const auto* b = batched ? &*r.summary->batching : nullptr;
  n.padding_fraction = b ? b->padding_fraction : kNaN;
  n.documents_per_step = b ? b->documents_per_rank_per_step : kNaN;
  n.attention_span = b ? b->attention_span : kNaN;
  n.real_tokens_per_step = b ? b->real_tokens_per_rank_per_step : kNaN;
  // Absent without checkpointing: nothing was recomputed.
  std::vector<double> times;
  for (const auto& st : r.step_records())
    if (st.measured.value_or(false) && st.time_s) times.push_back(*st.time_s);
  const double step_median = n.ok && r.summary ? r.summary->step_time_s.median : kNaN;
  const auto iv = times.empty() ? reports::MedianInterval{} : reports::median_interval(times);
  n.real_tps_lo = iv.n > 0 && iv.hi > 0 ? n.real_tps * step_median / iv.hi : kNaN;
  n.real_tps_hi = iv.n > 0 && iv.lo > 0 ? n.real_tps * step_median / iv.lo : kNaN;
  n.recompute_gflops_per_step = n.ok && r.summary ? double(r.summary->recompute_flops_per_step.value_or(0)) / 1e9 : kNaN;
  return n;
}

WorkloadFindings workload_findings(const std::vector<WorkloadCell>& cells, const std::vector<reports::RunReport>& reports) {
  if (cells.size() != reports.size()) throw std::invalid_argument("workload_findings: one report per cell");
  WorkloadFindings f;
  std::map<Key, CellNumbers> at;
  std::vector<std::string> sides, batchings, acs;
  std::map<std::string, std::string> title;
  auto add = [](std::vector<std::string>& v, const std::string& x) {
    if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
  };
  for (size_t i = 0; i < cells.size(); ++i) {
    const auto& c = cells[i];
    const auto n = cell_numbers(reports[i]);
    at[{c.side.label, c.batching, c.ac}] = n;
    add(sides, c.side.label);
    add(batchings, c.batching);
    add(acs, c.ac);
    title[c.side.label] = c.side.title;
    f.cells.push_back({{"id", c.id},
                       {"backend", c.side.label},
                       {"config", c.side.config},
                       {"batching", c.batching},
                       {"activation_checkpointing", c.ac},
                       {"status", n.state},
                       {"error", n.error},
                       {"real_tokens_per_gpu_per_s_median", num(n.real_tps)},
                       {"real_tokens_per_gpu_per_s_interval", {num(n.real_tps_lo), num(n.real_tps_hi)}},
                       {"mfu", num(n.mfu)},
                       {"padding_fraction", num(n.padding_fraction)},
                       {"documents_per_rank_per_step", num(n.documents_per_step)},
                       {"real_tokens_per_rank_per_step", num(n.real_tokens_per_step)},
                       {"attention_span", num(n.attention_span)},
                       {"peak_mib", num(n.peak_mib)},
                       {"tracked_peak_mib", num(n.tracked_peak_mib)},
                       {"estimated_peak_mib", num(n.estimate_mib)},
                       {"peak_over_estimate", num(n.peak_over_estimate)},
                       {"recompute_gflops_per_step", num(n.recompute_gflops_per_step)},
                       {"final_loss", num(n.final_loss)}});
    if (!n.ok) f.failed.push_back(c.id + " (" + n.state + (n.error.empty() ? "" : ": " + n.error) + ")");
  }
  auto get = [&](const std::string& s, const std::string& b, const std::string& a) -> const CellNumbers* {
    const auto it = at.find({s, b, a});
    return it != at.end() && it->second.ok ? &it->second : nullptr;
  };
  auto has = [](const std::vector<std::string>& v, const char* x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  const std::string ref_ac = has(acs, "none") ? "none" : acs.front();
  const std::string ref_b = has(batchings, "pack") ? "pack" : batchings.front();

  // Batching at the reference AC mode.
  for (const auto& s : sides) {
    const auto* pad = get(s, "pad", ref_ac);
    const auto* pack = get(s, "pack", ref_ac);
    const auto* naive = get(s, "pack-naive", ref_ac);
    const std::string where = title[s] + ", AC " + ref_ac + ": ";
    if (pad && pack)
      f.findings.push_back(where + "pack trains " + fixed(pack->real_tps / pad->real_tps, "%.2f") +
                           "× pad's real tokens/GPU/s (" + fixed(pack->real_tps, "%.1f") + " vs " +
                           fixed(pad->real_tps, "%.1f") + ") at padding fraction " + fixed(pack->padding_fraction, "%.3f") +
                           " vs " + fixed(pad->padding_fraction, "%.3f") + ", " + fixed(pack->documents_per_step, "%.1f") +
                           " vs " + fixed(pad->documents_per_step, "%.1f") + " documents/rank/step; MFU " +
                           fixed(pack->mfu, "%.4f") + " vs " + fixed(pad->mfu, "%.4f") + "." + unresolved_note(*pack, *pad));
    if (naive && (pad || pack)) {
      std::string text = where + "pack-naive trains ";
      if (pad) text += fixed(naive->real_tps / pad->real_tps, "%.2f") + "× pad's";
      if (pad && pack) text += " and ";
      if (pack) text += fixed(naive->real_tps / pack->real_tps, "%.2f") + "× pack's";
      text += " real tokens/GPU/s (" + fixed(naive->real_tps, "%.1f") + ") at padding fraction " +
              fixed(naive->padding_fraction, "%.3f") + ", but under one causal mask across documents: attention span " +
              fixed(naive->attention_span, "%.1f") + " tokens";
      if (pack) text += " vs pack's " + fixed(pack->attention_span, "%.1f");
      text += " (MFU counts the span: " + fixed(naive->mfu, "%.4f") + ").";
      if (pack) text += unresolved_note(*naive, *pack);
      f.findings.push_back(text);
    }
  }
  // Activation checkpointing at the reference batching, against no AC.
  if (has(acs, "none"))
    for (const auto& s : sides)
      for (const auto& a : acs) {
        if (a == "none") continue;
        const auto* none = get(s, ref_b, "none");
        const auto* ac = get(s, ref_b, a);
        if (!none || !ac) continue;
        f.findings.push_back(title[s] + ", " + ref_b + ": AC " + a + " changes real tokens/GPU/s by " +
                             change(ac->real_tps, none->real_tps) + " (" + fixed(ac->real_tps, "%.1f") + " vs " +
                             fixed(none->real_tps, "%.1f") + ") and the peak by " +
                             fixed(ac->peak_mib - none->peak_mib, "%+.2f") + " MiB (" + fixed(ac->peak_mib, "%.2f") +
                             " vs " + fixed(none->peak_mib, "%.2f") + " MiB), recomputing " +
                             fixed(ac->recompute_gflops_per_step, "%.3f") + " GFLOP/step." +
                             unresolved_note(*ac, *none));
      }
  // FSDP-mode vs ZeRO3-mode over the cells both finished.
  if (sides.size() == 2) {
    std::vector<double> tps, peak;
    int with_intervals = 0, beyond = 0;
    for (const auto& b : batchings)
      for (const auto& a : acs) {
        const auto* x = get(sides[0], b, a);
        const auto* y = get(sides[1], b, a);
        if (!x || !y) continue;
        tps.push_back(x->real_tps / y->real_tps);
        peak.push_back(x->peak_mib / y->peak_mib);
        if (std::isfinite(x->real_tps_lo) && std::isfinite(y->real_tps_lo)) {
          ++with_intervals;
          beyond += resolved(*x, *y) ? 1 : 0;
        }
      }
    auto geo = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += std::log(x);
      return std::exp(s / double(v.size()));
    };
    if (!tps.empty())
      f.findings.push_back(title[sides[0]] + " / " + title[sides[1]] + ": real tokens/GPU/s " + fixed(geo(tps), "%.2f") +
                           "× (geometric mean over " + std::to_string(tps.size()) + " matched cells, range " +
                           fixed(*std::min_element(tps.begin(), tps.end()), "%.2f") + "–" +
                           fixed(*std::max_element(tps.begin(), tps.end()), "%.2f") + "), peak memory " +
                           fixed(geo(peak), "%.2f") + "× (range " +
                           fixed(*std::min_element(peak.begin(), peak.end()), "%.2f") + "–" +
                           fixed(*std::max_element(peak.begin(), peak.end()), "%.2f") + ")" +
                           (with_intervals > 0 ? "; the throughputs differ beyond their 95% intervals in " +
                                                     std::to_string(beyond) + " of " + std::to_string(with_intervals) +
                                                     " pairs"
                                               : std::string()) +
                           ".");
  }

  // Consistency checks: deterministic counts only (no timing).
  for (const auto& s : sides)
    for (const auto& a : acs) {
      const std::string where = s + ", AC " + a + ": ";
      const auto* pad = get(s, "pad", a);
      const auto* pack = get(s, "pack", a);
      const auto* naive = get(s, "pack-naive", a);
      if (pad && pack && pack->padding_fraction > pad->padding_fraction + 1e-12)
        f.checks.push_back(where + "pack's padding fraction " + fixed(pack->padding_fraction, "%.4f") +
                           " exceeds pad's " + fixed(pad->padding_fraction, "%.4f") +
                           " (packing whole documents into rows cannot pad more than one document a row)");
      if (pad && pack && pack->documents_per_step + 1e-12 < pad->documents_per_step)
        f.checks.push_back(where + "pack holds " + fixed(pack->documents_per_step, "%.2f") +
                           " documents/rank/step, fewer than pad's " + fixed(pad->documents_per_step, "%.2f"));
      if (naive && naive->padding_fraction != 0)
        f.checks.push_back(where + "pack-naive's padding fraction is " + fixed(naive->padding_fraction, "%.4f") +
                           ", not 0 (it concatenates documents)");
    }
  for (const auto& s : sides)
    for (const auto& b : batchings)
      for (const auto& a : acs) {
        const auto* c = get(s, b, a);
        if (!c) continue;
        const std::string where = s + ", " + b + ", AC " + a + ": ";
        const auto* full = get(s, b, "full");
        if (a == "none" && c->recompute_gflops_per_step != 0)
          f.checks.push_back(where + fixed(c->recompute_gflops_per_step * 1e9, "%.0f") + " FLOP/step recomputed without AC");
        else if (a == "full" && !(c->recompute_gflops_per_step > 0))
          f.checks.push_back(where + "nothing recomputed under full AC");
        else if (a != "none" && a != "full" && full && c->recompute_gflops_per_step > full->recompute_gflops_per_step)
          f.checks.push_back(where + fixed(c->recompute_gflops_per_step, "%.3f") +
                             " GFLOP/step recomputed, more than full AC's " +
                             fixed(full->recompute_gflops_per_step, "%.3f"));
      }
  return f;
}

std::string workload_table_markdown(const std::vector<WorkloadCell>& cells,
                                    const std::vector<reports::RunReport>& reports) {
  std::ostringstream md;
  md << "| backend | batching | AC | real tokens/GPU/s (median) | 95% interval | MFU | padding fraction | documents/rank/step | "
        "attention span | peak MiB | tracked peak MiB | est. peak MiB | peak/est | recomputed GFLOP/step | "
        "final loss (nats/real token) | status |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (size_t i = 0; i < cells.size() && i < reports.size(); ++i) {
    const auto& c = cells[i];
    const auto n = cell_numbers(reports[i]);
    md << "| " << c.side.title << " (" << c.side.label << ") | " << c.batching << " | " << c.ac << " | "
       << fixed(n.real_tps, "%.1f") << " | "
       << (std::isfinite(n.real_tps_lo) && std::isfinite(n.real_tps_hi)
               ? fixed(n.real_tps_lo, "%.1f") + " – " + fixed(n.real_tps_hi, "%.1f")
               : std::string("-"))
       << " | " << fixed(n.mfu, "%.4f") << " | " << fixed(n.padding_fraction, "%.3f")
       << " | " << fixed(n.documents_per_step, "%.1f") << " | " << fixed(n.attention_span, "%.1f") << " | "
       << fixed(n.peak_mib, "%.2f") << " | " << fixed(n.tracked_peak_mib, "%.2f") << " | "
       << fixed(n.estimate_mib, "%.2f") << " | " << fixed(n.peak_over_estimate, "%.3f") << " | "
       << fixed(n.recompute_gflops_per_step, "%.3f") << " | " << fixed(n.final_loss, "%.4f") << " | "
       << (n.ok ? std::string("ok") : n.state + (n.error.empty() ? "" : ": " + n.error)) << " |\n";
  }
  return md.str();
}

std::string workload_findings_markdown(const WorkloadFindings& f) {
  std::ostringstream md;
  md << "Findings (computed from the table by `zerobench study workload`):\n\n";
  for (const auto& s : f.findings) md << "- " << s << "\n";
  if (f.findings.empty()) md << "- none: no pair of cells to compare finished\n";
  if (!f.failed.empty()) {
    md << "\nCells that did not finish:\n\n";
    for (const auto& s : f.failed) md << "- " << s << "\n";
  }
  if (!f.checks.empty()) {
    md << "\nConsistency checks that FAILED:\n\n";
    for (const auto& s : f.checks) md << "- " << s << "\n";
  }
  return md.str();
}

int workload_study_command(const WorkloadStudyOptions& o) {
  const auto cells = workload_cells(o);
  const auto spec = workload_matrix(o, cells);
  for (const auto& c : spec.cells) validate_cell(c);  // exit 2 before anything runs
  MatrixOptions mo;
  mo.out_dir = o.out_dir;
  mo.force = o.force;
  const int rc = run_matrix(spec, mo);
  if (rc == 130) return rc;

  std::vector<reports::RunReport> runs;
  for (const auto& c : cells) {
    try {
      runs.push_back(reports::run_report_from_json(reports::read_report(o.out_dir + "/" + c.id + ".json")));
    } catch (const UsageError& e) {
      reports::RunReport missing;
      missing.status.state = "failed";
      missing.status.error = e.what();
      runs.push_back(missing);
    }
  }
  const auto f = workload_findings(cells, runs);
  const std::string table = workload_table_markdown(cells, runs);
  const std::string findings = workload_findings_markdown(f);

  json options = {{"backends", json::array()}, {"batchings", o.batchings}, {"ac_modes", o.ac_modes},
                  {"steps", o.steps}, {"warmup", o.warmup}, {"nproc", o.nproc}, {"model", o.model},
                  {"micro_batch", o.micro_batch}, {"seq_len", o.seq_len}, {"seed", o.seed}, {"data", o.data},
                  {"device", o.device}};
  if (o.layers > 0) options["layers"] = o.layers;
  for (const auto& c : cells)
    if (options["backends"].empty() || options["backends"].back() != c.side.label) options["backends"].push_back(c.side.label);
  const json summary = {{"schema", {{"name", "zerobench.workload-study"}, {"version", 1}}},
                        {"options", options},
                        {"cells", f.cells},
                        {"findings", f.findings},
                        {"checks_failed", f.checks},
                        {"failed_cells", f.failed}};
  reports::write_json_atomic(o.out_dir + "/summary.json", summary);
  reports::write_text_atomic(o.out_dir + "/summary.md", table + "\n" + findings);

  // Figures: real-token throughput grouped by batching; peak memory grouped by AC mode.
  std::vector<size_t> by_batching(cells.size()), by_ac(cells.size());
  for (size_t i = 0; i < cells.size(); ++i) by_batching[i] = by_ac[i] = i;
  auto position = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) - v.begin();
  };
  std::stable_sort(by_batching.begin(), by_batching.end(), [&](size_t a, size_t b) {
    return position(o.batchings, cells[a].batching) < position(o.batchings, cells[b].batching);
  });
  std::stable_sort(by_ac.begin(), by_ac.end(),
                   [&](size_t a, size_t b) { return position(o.ac_modes, cells[a].ac) < position(o.ac_modes, cells[b].ac); });
  auto figure = [&](const std::vector<size_t>& order, const std::string& title, const std::string& y,
                    double CellNumbers::*field, bool ac_first) {
    std::vector<std::string> labels;
    std::vector<double> values;
    for (size_t i : order) {
      const auto& c = cells[i];
      const auto n = cell_numbers(runs[i]);
      labels.push_back(ac_first ? c.ac + " " + c.side.label + " " + c.batching : c.batching + " " + c.side.label + " " + c.ac);
      values.push_back(std::isfinite(n.*field) ? n.*field : 0.0);  // a failed cell: an empty bar
    }
    return reports::svg::bar_chart(title, labels, values, y);
  };
  reports::write_text_atomic(o.out_dir + "/real_tokens_by_batching.svg",
                             figure(by_batching, "Real tokens/GPU/s by batching (failed cells: 0)",
                                    "real tokens/GPU/s", &CellNumbers::real_tps, false));
  reports::write_text_atomic(o.out_dir + "/peak_memory_by_ac.svg",
                             figure(by_ac, "Peak memory per rank by activation checkpointing (failed cells: 0)",
                                    "peak MiB", &CellNumbers::peak_mib, true));
  std::cout << table << "\n" << findings << "study: " << o.out_dir << "/summary.json, summary.md, *.svg\n";
  if (!f.checks.empty()) {
    for (const auto& s : f.checks) std::cerr << "zerobench study workload: check failed: " << s << "\n";
    return kExitFailed;
  }
  return rc;
}

}  // namespace zb::bench::workload
