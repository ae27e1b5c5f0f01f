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

#include "reports/columns.hpp"
#include "reports/report.hpp"
#include "reports/svg.hpp"
#include "reports/svg_interval.hpp"
#include "runtime/errors.hpp"

namespace zb::reports {

namespace {
using json = nlohmann::json;

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

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

double tps_of(const RowContext& x) { return column_value(column("tokens_per_gpu_per_s.median"), x).value_or(0.0); }

// FSDP vs DeepSpeed per precision: one row per precision plan class (what the matmuls run in and
// what the optimizer updates), one column per backend; each cell the median tokens/GPU/s and its
// interval (several runs of a backend in one class, e.g. two FSDP2 groupings: one line each).
std::string render_pivot(const std::vector<RowContext>& rows) {
  std::vector<std::string> keys, backends;
  for (const auto& x : rows) {
    if (!x.report.ok() || x.report.projected()) continue;
    const auto k = precision_plan_key(x.report), b = x.report.config.backend_name();
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    if (std::find(backends.begin(), backends.end(), b) == backends.end()) backends.push_back(b);
  }
  if (keys.empty()) return "";
  std::ostringstream o;
  o << "<h2>Per precision: backends side by side</h2>\n<p>Rows pair the modes that compute in the same dtype and "
       "whose optimizer updates weights of the same dtype (config.precision_plan): FSDP <code>mixed</code> (fp32 "
       "flat parameters) meets ZeRO-3 <code>bf16</code> (fp32 masters), as the blog's Table 2 pairs them. Cells: "
       "median tokens/GPU/s [95% interval].</p>\n<table><thead><tr><th>precision plan</th>";
  for (const auto& b : backends) o << "<th>" << svg::escape(b) << "</th>";
  o << "</tr></thead><tbody>\n";
  const Column& interval = column("tokens_per_gpu_per_s.interval");
  for (const auto& k : keys) {
    o << "<tr><td>" << svg::escape(k) << "</td>";
    for (const auto& b : backends) {
      std::string cell;
      for (const auto& x : rows) {
        if (!x.report.ok() || x.report.projected() || precision_plan_key(x.report) != k ||
            x.report.config.backend_name() != b)
          continue;
        cell += (cell.empty() ? "" : "<br>") + fmt("%.1f", tps_of(x)) + " [" + svg::escape(cell_text(interval, x)) +
                "]" + " <small>" + svg::escape(x.report.cell_name()) + "</small>";
      }
      o << "<td>" << (cell.empty() ? "-" : cell) << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</tbody></table>\n";
  return o.str();
}

std::string render_html(const std::vector<RowContext>& rows, const RunReport* base,
                        const std::vector<const Column*>& cols) {
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
  if (base) o << " Relative columns compare with cell <b>" << svg::escape(base->cell_name()) << "</b>.";
  o << " The 95% interval of tokens/GPU/s is the order-statistic interval of the median step time over a run's "
       "measured steps (exact coverage shown when fewer steps give less than 95%); steps of one run are not "
       "independent draws, so it shows the run's own spread, not run-to-run noise (`zerobench compare` "
       "repeats runs for that).";
  o << "</p>\n<table><thead><tr>";
  for (const Column* c : cols) o << "<th>" << svg::escape(c->header) << "</th>";
  o << "</tr></thead><tbody>\n";
  for (const auto& x : rows) {
    o << "<tr>";
    for (const Column* c : cols)
      o << (c->key == "status" && !x.report.ok() ? "<td class=\"bad\">" : "<td>") << svg::escape(cell_text(*c, x))
        << "</td>";
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
  const Column& peak = column("peak_mib");
  for (const auto& x : rows) {
    const RunReport& r = x.report;
    if (!r.ok()) continue;
    labels.push_back(r.cell_name());
    const double t = tps_of(x);
    const auto iv = tps_interval(r);
    tps.push_back({r.cell_name(), t, iv ? iv->lo : t, iv ? iv->hi : t});
    double states = 0;
    for (int c = 0; c < 5; ++c) {
      mem[size_t(c)].second.push_back(category_mib(r, c));
      states += category_mib(r, c);
    }
    mem[5].second.push_back(std::max(0.0, column_value(peak, x).value_or(0.0) - states));
    svg::Series l{r.cell_name(), {}, {}}, g{r.cell_name(), {}, {}};
    for (const auto& s : r.step_records()) {
      l.x.push_back(double(s.step));
      l.y.push_back(s.loss.value_or(NAN));
      if (!s.grad_norm) continue;  // a step the fp16 loss scaler skipped: no norm
      g.x.push_back(double(s.step));
      g.y.push_back(*s.grad_norm);
    }
    loss.push_back(l);
    gnorm.push_back(g);
    floor = r.summary ? r.summary->entropy_floor_nats.value_or(NAN) : NAN;
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
  std::vector<RunReport> records;
  records.reserve(reports.size());
  for (const auto& r : reports) records.push_back(run_report_from_json(r));
  std::vector<RowContext> rows;
  for (const auto& r : records) rows.push_back({r, nullptr, std::nullopt});
  const RunReport* base = nullptr;
  if (!opts.baseline.empty()) {
    for (const auto& r : records)
      if (r.cell_name() == opts.baseline) base = &r;
    if (!base) throw UsageError("--baseline cell '" + opts.baseline + "' is not among the reports");
  }
  // Projections beside measurements: a measured row whose workload a projection predicts
  // gets the predicted throughput (and the prediction error column its error).
  bool with_projection = false;
  for (auto& x : rows) {
    x.base = base;
    if (x.report.ok() && x.report.projected()) {
      with_projection = true;
      x.predicted_tps = tps_of(x);
    }
  }
  for (auto& x : rows) {
    const auto key = workload_key(x.report);
    if (x.report.projected() || !x.report.ok() || key.empty()) continue;
    for (const auto& p : rows)
      if (p.report.ok() && p.report.projected() && workload_key(p.report) == key && tps_of(x) > 0)
        x.predicted_tps = tps_of(p);
  }
  if (opts.format == "html") return render_html(rows, base, shown_columns(base != nullptr, with_projection, true));
  const auto cols = shown_columns(base != nullptr, with_projection, false);
  std::ostringstream o;
  if (opts.format == "csv") {
    for (size_t i = 0; i < cols.size(); ++i) o << (i ? "," : "") << csv_field(cols[i]->header);
    o << "\n";
    for (const auto& x : rows) {
      for (size_t i = 0; i < cols.size(); ++i) o << (i ? "," : "") << csv_field(cell_text(*cols[i], x));
      o << "\n";
    }
    return o.str();
  }
  if (opts.format != "md") throw UsageError("--format must be md, csv or html, got '" + opts.format + "'");
  o << "|";
  for (const Column* c : cols) o << " " << c->header << " |";
  o << "\n|";
  for (const Column* c : cols) o << (c->left ? "---|" : "---:|");
  o << "\n";
  for (const auto& x : rows) {
    o << "|";
    for (const Column* c : cols) o << " " << cell_text(*c, x) << " |";
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
