// table.cpp — report tables and the HTML page (see table.hpp).
#include "reports/table.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "reports/report.hpp"
#include "reports/stats.hpp"
#include "reports/svg.hpp"
#include "reports/svg_interval.hpp"
#include "runtime/errors.hpp"

namespace zb::reports {

namespace {
using json = nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;
const char* kCategories[] = {"params", "master_params", "grads", "optimizer", "buffers"};
constexpr int kNumCategories = 5;

bool is_dir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string stem(const std::string& path) {
  auto slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json") name.resize(name.size() - 5);
  return name;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// One row's numbers, taken from a report (max over ranks where per-rank).
struct Row {
  std::string cell, backend, precision, state, error;
  int world = 0;
  int64_t skipped_steps = 0;  // summary.skipped_steps: optimizer steps the fp16 loss scaler skipped
  int warnings = 0;  // config.warnings: the run is the framework's, maybe not what the file's author expected
  double tps = 0, step_s = 0, mfu = 0, mfu_6n = 0, peak_mib = 0, comm_mib = 0, final_loss = NAN, overlap = NAN;
  // tokens/GPU/s's 95% interval: the order-statistic interval of the median step time over the
  // measured steps (reports/stats.hpp median_interval), mapped through tokens / step time.
  double tps_lo = NAN, tps_hi = NAN, tps_coverage = NAN;
  int tps_n = 0;
  std::string plan_key;  // the precision plan's "compute / optimizer updates" pair, for the pivot
  // peak_mib: the program-order peak (memory.peak_program_bytes, deterministic), or the observed
  // one for a report without it (older, CUDA); observed_mib: memory.peak_tracked_bytes, as the
  // allocator saw it (depends on when collectives complete). Max over ranks.
  double observed_mib = 0;
  double est_mib = NAN;  // the pre-flight estimate of the peak (max over ranks)
  double peak_over_est = NAN;  // the rank with the largest peak (peak_mib's): that peak / its own estimate
  double cat_mib[kNumCategories] = {0, 0, 0, 0, 0};  // on the device
  double host_mib = 0;        // model states offloaded to host memory (max over ranks)
  double offload_mib = NAN;   // host<->device bytes in the last step, both ways (NaN: no offload)
  double states_mib() const {
    double sum = 0;
    for (double m : cat_mib) sum += m;
    return sum;
  }
  bool projected = false;                  // a `zerobench project` output
  std::string workload;                    // what a projection and a measurement must share
  double predicted_tps = NAN, prediction_error = NAN;  // filled when a projection matches
};

// Model dims, backend, precision, batch shape, W and nodes: a projection predicts a measured
// run when these agree.
std::string workload_key(const json& r) {
  if (!r.contains("env") || !r.contains("config") || !r["config"].contains("model")) return "";
  const auto& c = r["config"];
  json k;
  for (const char* d : {"layers", "hidden", "heads", "kv_heads", "ffn", "vocab"}) k[d] = c["model"].value(d, 0);
  k["backend"] = c["backend"].value("name", "");
  k["precision"] = c["backend"].value("precision", "");
  for (const char* t : {"micro_batch", "seq_len", "grad_accum"}) k[t] = c.value("train", json::object()).value(t, 0);
  k["world_size"] = r["env"].value("world_size", 0);
  k["nodes"] = r["env"].value("nodes", 1);
  return k.dump();
}

Row row_of(const json& r) {
  Row row;
  row.cell = r.value("_cell", r.value("run_id", "?"));
  const auto& cfg = r["config"];
  if (cfg.contains("backend")) {
    row.backend = cfg["backend"].value("name", "?");
    row.precision = cfg["backend"].value("precision", "?");
  } else if (cfg.contains("options")) {
    row.backend = cfg["options"].value("backend", "?");
    row.precision = cfg["options"].value("precision", "?");
  }
  row.state = r["status"]["state"];
  if (r.contains("summary") && r["summary"].is_object()) row.skipped_steps = r["summary"].value("skipped_steps", int64_t(0));
  row.error = r["status"]["error"];
  if (cfg.contains("warnings") && cfg["warnings"].is_array()) row.warnings = int(cfg["warnings"].size());
  if (row.state != "ok") return row;
  row.world = r["env"]["world_size"];
  const auto& s = r["summary"];
  row.tps = s["tokens_per_gpu_per_s"]["median"];
  row.step_s = s["step_time_s"]["median"];
  row.mfu = s["mfu"];
  row.mfu_6n = s["mfu_6n"];
  row.final_loss = s.value("final_loss", NAN);
  std::vector<double> step_times;
  for (const auto& st : r.value("steps", json::array()))
    if (st.value("measured", false) && st.contains("time_s") && st["time_s"].is_number())
      step_times.push_back(st["time_s"].get<double>());
  const double tokens = s.value("tokens_per_rank_per_step", 0.0);
  if (!step_times.empty() && tokens > 0) {
    const auto iv = median_interval(step_times);
    row.tps_lo = tokens / iv.hi;
    row.tps_hi = tokens / iv.lo;
    row.tps_coverage = iv.coverage;
    row.tps_n = iv.n;
  }
  // The blog's pairing: modes that compute in the same dtype and update weights of the same dtype
  // (FSDP mixed's fp32 flat parameters, ZeRO-3 bf16's fp32 masters) compare like for like.
  if (cfg.contains("precision_plan") && cfg["precision_plan"].is_object()) {
    const auto& pl = cfg["precision_plan"];
    const auto updates = pl["master"].is_string() ? pl["master"] : pl["params"];
    row.plan_key = "compute " + pl.value("compute", "?") + ", optimizer updates " + updates.get<std::string>() +
                   " weights";
  } else {
    row.plan_key = "precision " + row.precision + " (report without config.precision_plan)";
  }
  for (const auto& rk : r["ranks"]) {
    for (int c = 0; c < kNumCategories; ++c)  // `buffers` is absent from older reports
      row.cat_mib[c] = std::max(row.cat_mib[c], rk["memory"]["model_states_bytes"].value(kCategories[c], 0.0) / kMiB);
    const auto& states = rk["memory"]["model_states_bytes"];
    if (states.contains("host"))
      row.host_mib = std::max(row.host_mib, (states["host"].value("params", 0.0) + states["host"].value("master_params", 0.0) +
                                             states["host"].value("grads", 0.0) + states["host"].value("optimizer", 0.0) +
                                             states["host"].value("buffers", 0.0)) / kMiB);
    if (rk.contains("offload") && rk["offload"].is_object()) {
      const auto& l = rk["offload"]["last_step"];
      const double mib = (l.value("h2d_bytes", 0.0) + l.value("d2h_bytes", 0.0)) / kMiB;
      row.offload_mib = std::max(std::isfinite(row.offload_mib) ? row.offload_mib : 0.0, mib);
    }
    const auto& mem = rk["memory"];
    const double observed = mem["peak_tracked_bytes"].get<double>() / kMiB;
    const double peak = mem.contains("peak_program_bytes") && mem["peak_program_bytes"].is_number()
                            ? mem["peak_program_bytes"].get<double>() / kMiB
                            : observed;
    row.observed_mib = std::max(row.observed_mib, observed);
    const bool has_est =
        rk["memory"].contains("estimated_peak_bytes") && rk["memory"]["estimated_peak_bytes"].get<double>() > 0;
    const double est = has_est ? rk["memory"]["estimated_peak_bytes"].get<double>() / kMiB : NAN;
    if (has_est) row.est_mib = std::max(std::isfinite(row.est_mib) ? row.est_mib : 0.0, est);
    if (peak >= row.peak_mib) row.peak_over_est = has_est ? peak / est : NAN;
    row.peak_mib = std::max(row.peak_mib, peak);
    double comm = 0;
    for (const auto& [k, v] : rk["comm"].items()) comm += v["bytes"].get<double>();
    row.comm_mib = std::max(row.comm_mib, comm / kMiB);
  }
  if (r.contains("profile") && r["profile"].is_object() && r["profile"].contains("overlap_ratio"))
    row.overlap = r["profile"]["overlap_ratio"];
  row.projected = r.contains("projection");
  if (row.projected) {
    row.overlap = r["projection"].value("overlap_ratio", NAN);
    row.predicted_tps = row.tps;
  }
  row.workload = workload_key(r);
  return row;
}

std::vector<std::string> header(bool with_baseline, bool with_projection) {
  std::vector<std::string> h = {"cell",          "backend",        "precision",       "W",
                                "tokens/GPU/s",  "s/step",         "MFU",             "mfu_6n",
                                "params MiB",    "master MiB",     "grads MiB",       "optimizer MiB",
                                "buffers MiB",   "host MiB",      "peak MiB",        "observed peak MiB",
                                "est. peak MiB", "peak/est",      "comm MiB/step",   "offload MiB/step",
                                "overlap",
                                "final loss",
                                "status"};
  if (with_baseline) {
    h.insert(h.end() - 1, "tokens/GPU/s vs base");
    h.insert(h.end() - 1, "peak MiB vs base");
  }
  if (with_projection) {
    h.insert(h.end() - 1, "predicted tokens/GPU/s");
    h.insert(h.end() - 1, "prediction error");
  }
  return h;
}

std::string relative(double v, double base) {
  if (!(base > 0) || !std::isfinite(v)) return "-";
  return fmt("%+.1f%%", (v / base - 1) * 100);
}

std::vector<std::string> cells_of(const Row& r, const Row* base, bool with_projection) {
  auto dash_if_failed = [&](const std::string& s) { return r.state == "ok" ? s : std::string("-"); };
  std::vector<std::string> c = {r.cell,
                                r.backend,
                                r.precision,
                                dash_if_failed(std::to_string(r.world)),
                                dash_if_failed(fmt("%.1f", r.tps)),
                                dash_if_failed(fmt("%.4f", r.step_s)),
                                dash_if_failed(fmt("%.3f", r.mfu)),
                                dash_if_failed(fmt("%.3f", r.mfu_6n))};
  for (double m : r.cat_mib) c.push_back(dash_if_failed(fmt("%.2f", m)));
  c.push_back(dash_if_failed(fmt("%.2f", r.host_mib)));
  c.push_back(dash_if_failed(fmt("%.2f", r.peak_mib)));
  c.push_back(dash_if_failed(fmt("%.2f", r.observed_mib)));
  c.push_back(r.state == "ok" && std::isfinite(r.est_mib) ? fmt("%.2f", r.est_mib) : "-");
  c.push_back(r.state == "ok" && std::isfinite(r.peak_over_est) ? fmt("%.2f", r.peak_over_est) : "-");
  c.push_back(dash_if_failed(fmt("%.2f", r.comm_mib)));
  c.push_back(r.state == "ok" && std::isfinite(r.offload_mib) ? fmt("%.2f", r.offload_mib) : "-");
  c.push_back(std::isfinite(r.overlap) ? fmt("%.2f", r.overlap) : "-");
  c.push_back(std::isfinite(r.final_loss) ? fmt("%.4f", r.final_loss) : "-");
  if (base) {
    c.push_back(r.state == "ok" ? relative(r.tps, base->tps) : "-");
    c.push_back(r.state == "ok" ? relative(r.peak_mib, base->peak_mib) : "-");
  }
  if (with_projection) {
    c.push_back(std::isfinite(r.predicted_tps) ? fmt("%.1f", r.predicted_tps) : "-");
    c.push_back(std::isfinite(r.prediction_error) ? fmt("%+.1f%%", 100 * r.prediction_error) : "-");
  }
  std::string status = r.state != "ok" ? r.state + ": " + r.error : r.projected ? "projected" : "ok";
  // Flag a run that read a config file with warnings (config.warnings in its report).
  if (r.warnings > 0) status += " (" + std::to_string(r.warnings) + " config warning" + (r.warnings > 1 ? "s" : "") + ")";
  if (r.skipped_steps > 0)  // fp16: the loss scaler skipped these optimizer steps (an overflow)
    status += " (" + std::to_string(r.skipped_steps) + " step" + (r.skipped_steps > 1 ? "s" : "") + " skipped: overflow)";
  c.push_back(status);
  return c;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

std::string interval_text(const Row& r) {
  if (r.state != "ok" || !std::isfinite(r.tps_lo)) return "-";
  std::string t = fmt("%.1f", r.tps_lo) + " – " + fmt("%.1f", r.tps_hi);
  if (r.tps_coverage < 0.95) t += fmt(" (%.0f%%", 100 * r.tps_coverage) + ", n=" + std::to_string(r.tps_n) + ")";
  return t;
}

// FSDP vs DeepSpeed per precision: one row per precision plan class (what the matmuls run in and
// what the optimizer updates), one column per backend; each cell the median tokens/GPU/s and its
// interval (several runs of a backend in one class, e.g. two FSDP2 groupings: one line each).
std::string render_pivot(const std::vector<Row>& rows) {
  std::vector<std::string> keys, backends;
  for (const auto& r : rows) {
    if (r.state != "ok" || r.projected) continue;
    if (std::find(keys.begin(), keys.end(), r.plan_key) == keys.end()) keys.push_back(r.plan_key);
    if (std::find(backends.begin(), backends.end(), r.backend) == backends.end()) backends.push_back(r.backend);
  }
  if (keys.empty()) return "";
  std::ostringstream o;
  o << "<h2>Per precision: backends side by side</h2>\n<p>Rows pair the modes that compute in the same dtype and "
       "whose optimizer updates weights of the same dtype (config.precision_plan): FSDP <code>mixed</code> (fp32 "
       "flat parameters) meets ZeRO-3 <code>bf16</code> (fp32 masters), as the blog's Table 2 pairs them. Cells: "
       "median tokens/GPU/s [95% interval].</p>\n<table><thead><tr><th>precision plan</th>";
  for (const auto& b : backends) o << "<th>" << svg::escape(b) << "</th>";
  o << "</tr></thead><tbody>\n";
  for (const auto& k : keys) {
    o << "<tr><td>" << svg::escape(k) << "</td>";
    for (const auto& b : backends) {
      std::string cell;
      for (const auto& r : rows) {
        if (r.state != "ok" || r.projected || r.plan_key != k || r.backend != b) continue;
        cell += (cell.empty() ? "" : "<br>") + fmt("%.1f", r.tps) + " [" + svg::escape(interval_text(r)) + "]" +
                " <small>" + svg::escape(r.cell) + "</small>";
      }
      o << "<td>" << (cell.empty() ? "-" : cell) << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</tbody></table>\n";
  return o.str();
}

std::string render_html(const std::vector<json>& reports, const std::vector<Row>& rows, const Row* base,
                        const std::vector<std::string>& head, bool with_projection) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>zerobench report</title>\n"
    << "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}"
       "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f3f3f3}"
       "td:nth-child(-n+3),th:nth-child(-n+3){text-align:left}td.bad{color:#b00020;text-align:left}"
       "figure{display:inline-block;margin:12px}figcaption{font-size:12px;color:#555;max-width:760px}</style>"
       "</head><body>\n"
    << "<h1>zerobench results</h1>\n<p>" << rows.size()
    << " runs. Throughput and MFU are medians over measured steps; memory is the maximum over ranks; comm is one "
       "step's bytes per rank. Peak is the program-order peak (communication buffers held from issue to wait: the "
       "same on every run), which peak/est compares with the estimate; the observed peak is what the allocator saw, "
       "which depends on when collectives completed.";
  if (base) o << " Relative columns compare with cell <b>" << svg::escape(base->cell) << "</b>.";
  o << " The 95% interval of tokens/GPU/s is the order-statistic interval of the median step time over a run's "
       "measured steps (exact coverage shown when fewer steps give less than 95%); steps of one run are not "
       "independent draws, so it shows the run's own spread, not run-to-run noise (`zerobench compare` "
       "repeats runs for that).";
  o << "</p>\n<table><thead><tr>";
  // The interval column follows tokens/GPU/s (HTML only: the Markdown/CSV columns are a contract).
  const size_t tps_col = size_t(std::find(head.begin(), head.end(), "tokens/GPU/s") - head.begin());
  for (size_t i = 0; i < head.size(); ++i) {
    o << "<th>" << svg::escape(head[i]) << "</th>";
    if (i == tps_col) o << "<th>95% interval</th>";
  }
  o << "</tr></thead><tbody>\n";
  for (const auto& r : rows) {
    o << "<tr>";
    const auto c = cells_of(r, base, with_projection);
    for (size_t i = 0; i < c.size(); ++i) {
      o << (i + 1 == c.size() && r.state != "ok" ? "<td class=\"bad\">" : "<td>") << svg::escape(c[i]) << "</td>";
      if (i == tps_col) o << "<td>" << svg::escape(interval_text(r)) << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</tbody></table>\n";
  o << render_pivot(rows);
  std::vector<std::string> labels;
  std::vector<svg::IntervalPoint> tps;
  std::vector<std::pair<std::string, std::vector<double>>> mem = {
      {"params", {}},  {"master params", {}}, {"grads", {}}, {"optimizer", {}}, {"buffers", {}},
      {"other (peak - states)", {}}};
  std::vector<svg::Series> loss, gnorm;
  double floor = NAN;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (r.state != "ok") continue;
    labels.push_back(r.cell);
    tps.push_back({r.cell, r.tps, std::isfinite(r.tps_lo) ? r.tps_lo : r.tps, std::isfinite(r.tps_hi) ? r.tps_hi : r.tps});
    for (int c = 0; c < kNumCategories; ++c) mem[size_t(c)].second.push_back(r.cat_mib[c]);
    mem[kNumCategories].second.push_back(std::max(0.0, r.peak_mib - r.states_mib()));
    svg::Series l{r.cell, {}, {}}, g{r.cell, {}, {}};
    for (const auto& s : reports[i]["steps"]) {
      l.x.push_back(s["step"]);
      l.y.push_back(s["loss"]);
      if (s["grad_norm"].is_null()) continue;  // a step the fp16 loss scaler skipped: no norm
      g.x.push_back(s["step"]);
      g.y.push_back(s["grad_norm"]);
    }
    loss.push_back(l);
    gnorm.push_back(g);
    floor = reports[i]["summary"].value("entropy_floor_nats", NAN);
  }
  auto figure = [&](const std::string& svg_text, const std::string& caption) {
    o << "<figure>" << svg_text << "<figcaption>" << svg::escape(caption) << "</figcaption></figure>\n";
  };
  figure(svg::interval_chart("Throughput", tps, "tokens/GPU/s", NAN, ""),
         "Median tokens per GPU per second with its 95% interval over the run's measured steps (higher is better).");
  figure(svg::stacked_bar_chart("Per-rank memory by category", labels, mem, "MiB"),
         "Engine-owned model states by category (max over ranks; buffers = persistent communication "
         "buffers such as ZeRO-3's IPG bucket); 'other' is the program-order peak above them (activations, "
         "gathered parameters, transient and communication buffers).");
  figure(svg::line_chart("Loss", loss, "step", "loss (nats)", floor, "entropy floor"),
         "Training loss per step; the dashed line is the data's best achievable loss.");
  figure(svg::line_chart("Gradient norm", gnorm, "step", "global grad norm", NAN, ""),
         "Global gradient norm before clipping.");
  o << "</body></html>\n";
  return o.str();
}
}  // namespace

std::vector<json> load_reports(const std::vector<std::string>& paths) {
  std::vector<json> out;
  for (const auto& p : paths) {
    std::vector<std::string> files;
    if (is_dir(p)) {
      std::ifstream index(p + "/index.json");
      if (index) {
        json idx;
        try {
          index >> idx;
          for (const auto& c : idx.at("cells")) files.push_back(p + "/" + c.at("report").get<std::string>());
        } catch (const std::exception& e) {
          throw UsageError("index " + p + "/index.json is unreadable: " + e.what());
        }
      } else {
        DIR* d = opendir(p.c_str());
        while (dirent* e = d ? readdir(d) : nullptr) {
          const std::string name = e->d_name;
          if (name.size() > 5 && name.substr(name.size() - 5) == ".json" && name != "index.json")
            files.push_back(p + "/" + name);
        }
        if (d) closedir(d);
        std::sort(files.begin(), files.end());
      }
      if (files.empty()) throw UsageError("no reports in directory " + p);
    } else {
      files.push_back(p);
    }
    for (const auto& f : files) {
      auto r = read_report(f);
      r["_cell"] = stem(f);
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::string render_table(const std::vector<json>& reports, const TableOptions& opts) {
  std::vector<Row> rows;
  for (const auto& r : reports) rows.push_back(row_of(r));
  const Row* base = nullptr;
  if (!opts.baseline.empty()) {
    for (const auto& r : rows)
      if (r.cell == opts.baseline) base = &r;
    if (!base) throw UsageError("--baseline cell '" + opts.baseline + "' is not among the reports");
  }
  // Projections beside measurements: a measured row whose workload a projection predicts
  // gets the predicted throughput and the error (predicted - measured) / measured.
  bool with_projection = false;
  for (const auto& r : rows) with_projection = with_projection || r.projected;
  for (auto& r : rows) {
    if (r.projected || r.state != "ok" || r.workload.empty()) continue;
    for (const auto& p : rows)
      if (p.projected && p.workload == r.workload && r.tps > 0) {
        r.predicted_tps = p.tps;
        r.prediction_error = (p.tps - r.tps) / r.tps;
      }
  }
  const auto head = header(base != nullptr, with_projection);
  if (opts.format == "html") return render_html(reports, rows, base, head, with_projection);
  std::ostringstream o;
  if (opts.format == "csv") {
    for (size_t i = 0; i < head.size(); ++i) o << (i ? "," : "") << csv_field(head[i]);
    o << "\n";
    for (const auto& r : rows) {
      const auto c = cells_of(r, base, with_projection);
      for (size_t i = 0; i < c.size(); ++i) o << (i ? "," : "") << csv_field(c[i]);
      o << "\n";
    }
    return o.str();
  }
  if (opts.format != "md") throw UsageError("--format must be md, csv or html, got '" + opts.format + "'");
  o << "|";
  for (const auto& h : head) o << " " << h << " |";
  o << "\n|";
  for (size_t i = 0; i < head.size(); ++i) o << (i < 3 || i + 1 == head.size() ? "---|" : "---:|");
  o << "\n";
  for (const auto& r : rows) {
    o << "|";
    for (const auto& c : cells_of(r, base, with_projection)) o << " " << c << " |";
    o << "\n";
  }
  return o.str();
}

// ---- crossval documents ----

namespace {

std::string sci(double v) { return fmt("%.2e", v); }

std::string comm_cell(const json& c) {
  const auto z = c["count"].get<int64_t>(), u = c["upstream_count"].get<int64_t>();
  const auto zb = c["bytes"].get<int64_t>(), ub = c["upstream_bytes"].get<int64_t>();
  std::string s = std::to_string(z) + " / " + std::to_string(u);
  if (zb != ub) s += " (" + std::to_string(zb) + " / " + std::to_string(ub) + " B)";
  if (!c.value("equal", true)) s += c.value("explained", false) ? " *" : " !";
  return s;
}

struct Table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  std::string md() const {
    std::ostringstream o;
    o << "|";
    for (const auto& h : head) o << " " << h << " |";
    o << "\n|";
    for (size_t i = 0; i < head.size(); ++i) o << (i == 0 ? "---|" : "---:|");
    o << "\n";
    for (const auto& r : rows) {
      o << "|";
      for (const auto& c : r) o << " " << c << " |";
      o << "\n";
    }
    return o.str();
  }
  std::string html() const {
    std::ostringstream o;
    o << "<table><thead><tr>";
    for (const auto& h : head) o << "<th>" << svg::escape(h) << "</th>";
    o << "</tr></thead><tbody>\n";
    for (const auto& r : rows) {
      o << "<tr>";
      for (const auto& c : r) o << "<td>" << svg::escape(c) << "</td>";
      o << "</tr>\n";
    }
    o << "</tbody></table>\n";
    return o.str();
  }
};

Table crossval_summary(const json& doc) {
  Table t{{"mode", "verdict", "max loss rel diff", "max grad-norm rel diff", "tolerance", "model states", "collectives",
           "zerobench tok/GPU/s", "upstream tok/GPU/s", "throughput ratio", "peak RSS ratio"},
          {}};
  for (const auto& m : doc["modes"]) {
    const bool agree = m["verdict"]["agree"].get<bool>();
    if (!m.contains("steps")) {
      t.rows.push_back({m["precision"].get<std::string>(), "FAILED", "-", "-", "-", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    auto state_word = [&](const char* equal, const char* explained) {
      if (m[equal].get<bool>()) return std::string("equal");
      return std::string(m[explained].get<bool>() ? "differences explained" : "UNEXPLAINED difference");
    };
    const auto& p = m["perf"];
    t.rows.push_back({m["precision"].get<std::string>(), agree ? "agree" : "DISAGREE", sci(m["max_loss_rel_diff"]),
                      sci(m["max_grad_norm_rel_diff"]), sci(m["tolerance"]["loss_rel"]),
                      state_word("model_states_equal", "model_states_differences_explained"),
                      state_word("comm_equal", "comm_differences_explained"), fmt("%.0f", p["tokens_per_gpu_per_s"]),
                      fmt("%.0f", p["upstream_tokens_per_gpu_per_s"]), fmt("%.2f", p["throughput_ratio"]),
                      fmt("%.2f", p["peak_rss_ratio"])});
  }
  return t;
}

Table crossval_steps(const json& mode) {
  Table t{{"step", "loss", "upstream loss", "rel diff", "grad norm", "upstream grad norm", "rel diff",
           "all_gather", "reduce_scatter", "all_reduce", "broadcast"},
          {}};
  for (const auto& s : mode["steps"]) {
    std::vector<std::string> r = {std::to_string(s["step"].get<int64_t>()), fmt("%.7f", s["loss"]),
                                  fmt("%.7f", s["upstream_loss"]), sci(s["loss_rel_diff"]),
                                  fmt("%.7f", s["grad_norm"]), fmt("%.7f", s["upstream_grad_norm"]),
                                  sci(s["grad_norm_rel_diff"])};
    for (const char* k : {"all_gather", "reduce_scatter", "all_reduce", "broadcast"})
      r.push_back(s["comm"].contains(k) ? comm_cell(s["comm"][k]) : "-");
    t.rows.push_back(r);
  }
  return t;
}

// Every difference with its explanation, one line each.
std::vector<std::string> crossval_differences(const json& mode) {
  std::vector<std::string> out;
  for (const auto& e : mode.value("model_states", json::array())) {
    if (e["equal"].get<bool>()) continue;
    std::string line = "rank " + std::to_string(e["rank"].get<int64_t>()) + " " + e["category"].get<std::string>() +
                       ": zerobench " + (e["zerobench"].is_null() ? "-" : e["zerobench"].dump()) + " B, upstream " +
                       (e["upstream"].is_null() ? "-" : e["upstream"].dump()) + " B";
    line += e["explanation"].is_null() ? " — UNEXPLAINED"
                                       : " — " + e["explanation"]["reason"].get<std::string>() + " [" +
                                             e["explanation"]["upstream"].get<std::string>() + "]";
    out.push_back(line);
  }
  for (const auto& d : mode.value("comm_differences", json::array())) {
    std::string line = "step " + std::to_string(d["step"].get<int64_t>()) + " " + d["kind"].get<std::string>() + ": " +
                       d["count"].dump() + " calls / " + d["bytes"].dump() + " B vs upstream " + d["upstream_count"].dump() +
                       " / " + d["upstream_bytes"].dump() + " B";
    line += d["explanation"].is_null() ? " — UNEXPLAINED"
                                       : " — " + d["explanation"]["reason"].get<std::string>() + " [" +
                                             d["explanation"]["upstream"].get<std::string>() + "]";
    out.push_back(line);
  }
  return out;
}

}  // namespace

std::string render_crossval(const json& doc, const std::string& format) {
  if (format != "md" && format != "html") throw UsageError("crossval tables: format must be md or html, got '" + format + "'");
  const bool html = format == "html";
  const bool agree = doc["verdict"]["agree"].get<bool>();
  const auto& m = doc["model"];
  const std::string title = "crossval: zerobench " + doc["backend"].get<std::string>() + " vs " +
                            doc["upstream"]["name"].get<std::string>() + " " +
                            doc["upstream"]["version"].get<std::string>() + " — W=" +
                            std::to_string(doc["world_size"].get<int>()) + ", " + m["preset"].get<std::string>() + " (" +
                            std::to_string(m["layers"].get<int64_t>()) + "x" + std::to_string(m["hidden"].get<int64_t>()) +
                            ") — " + (agree ? "AGREE" : "DISAGREE");
  const std::string legend =
      "Collectives: zerobench / upstream calls per step on rank 0 (bytes when they differ); * = a difference "
      "explained below, ! = unexplained. Throughput and RSS ratios are zerobench / upstream, reported, never "
      "asserted.";
  std::ostringstream o;
  if (html) {
    o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << svg::escape(title)
      << "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
         "font-size:13px;margin-bottom:16px}th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}"
         "th{background:#f3f3f3}td:first-child{text-align:left}li{font-size:13px}</style></head><body>\n<h1>"
      << svg::escape(title) << "</h1>\n<p>" << svg::escape(legend) << "</p>\n"
      << crossval_summary(doc).html();
  } else {
    o << "## " << title << "\n\n" << crossval_summary(doc).md() << "\n" << legend << "\n";
  }
  for (const auto& mode : doc["modes"]) {
    const std::string name = mode["precision"].get<std::string>();
    if (html) o << "<h2>" << svg::escape(name) << "</h2>\n";
    else o << "\n### " << name << "\n\n";
    // What the real framework cannot run here as given, run both sides' way instead (crossval's
    // reference_setup); each line says why the comparison still holds.
    const auto subs = mode.value("substitutions", json::array());
    if (!subs.empty()) {
      o << (html ? "<p>Substitutions:</p><ul>\n" : "Substitutions:\n");
      for (const auto& x : subs)
        o << (html ? "<li>" + svg::escape(x.get<std::string>()) + "</li>\n" : "- " + x.get<std::string>() + "\n");
      o << (html ? "</ul>\n" : "\n");
    }
    if (!mode.contains("steps")) {
      for (const auto& r : mode["verdict"]["reasons"])
        o << (html ? "<p>" + svg::escape(r.get<std::string>()) + "</p>\n" : r.get<std::string>() + "\n");
      continue;
    }
    o << (html ? crossval_steps(mode).html() : crossval_steps(mode).md());
    const auto diffs = crossval_differences(mode);
    if (!diffs.empty()) {
      o << (html ? "<p>Differences:</p><ul>\n" : "\nDifferences:\n");
      for (const auto& d : diffs) o << (html ? "<li>" + svg::escape(d) + "</li>\n" : "- " + d + "\n");
      if (html) o << "</ul>\n";
    }
    if (!mode["verdict"]["agree"].get<bool>()) {
      o << (html ? "<p><b>Disagreement:</b></p><ul>\n" : "\nDisagreement:\n");
      for (const auto& r : mode["verdict"]["reasons"])
        o << (html ? "<li>" + svg::escape(r.get<std::string>()) + "</li>\n" : "- " + r.get<std::string>() + "\n");
      if (html) o << "</ul>\n";
    }
    if (html) {
      std::vector<svg::Series> loss = {{"zerobench", {}, {}}, {doc["upstream"]["name"].get<std::string>(), {}, {}}};
      for (const auto& s : mode["steps"]) {
        loss[0].x.push_back(s["step"]);
        loss[0].y.push_back(s["loss"]);
        loss[1].x.push_back(s["step"]);
        loss[1].y.push_back(s["upstream_loss"]);
      }
      o << "<figure>" << svg::line_chart("Loss (" + name + ")", loss, "step", "loss (nats)", NAN, "")
        << "<figcaption>Loss per step, both sides.</figcaption></figure>\n";
    }
  }
  if (html) o << "</body></html>\n";
  return o.str();
}

}  // namespace zb::reports
