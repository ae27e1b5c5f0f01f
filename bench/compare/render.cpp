// render.cpp — Markdown and HTML for `zerobench compare` (see render.hpp). Every section is built
// once as a Table (header + rows of text) and written either way.
#include "bench/compare/render.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "bench/compare/verdict.hpp"
#include "reports/svg.hpp"
#include "reports/svg_interval.hpp"

namespace zb::bench::compare {

namespace {
using json = nlohmann::json;

struct Table {
  std::string title, note;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

double d(const json& j) { return j.is_number() ? j.get<double>() : NAN; }

std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "—";
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string mib(const json& bytes) { return fmt("%.2f", d(bytes) / (1024.0 * 1024.0)); }

// "median [lo–hi]" of an interval object, with printf format f.
std::string interval(const json& iv, const char* f) {
  if (!iv.is_object() || !iv["median"].is_number()) return "—";
  if (iv["n"].get<int>() < 2) return fmt(f, d(iv["median"])) + " (n=1)";
  return fmt(f, d(iv["median"])) + " [" + fmt(f, d(iv["lo"])) + "–" + fmt(f, d(iv["hi"])) + "]";
}

std::string text(const json& v) {
  if (v.is_null()) return "—";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string str(const json& j, const char* key) { return j.contains(key) ? text(j[key]) : "—"; }

std::string workload_line(const json& cmp) {
  std::string out;
  for (const auto& [k, v] : cmp["workload"].items())
    out += (out.empty() ? "" : ", ") + std::string("--") + k + " " + text(v);
  out += "; " + std::to_string(cmp["repeat"].get<int>()) + " repetitions per side, interleaved";
  for (const auto& a : cmp.value("aligned", json::array()))  // batch settings compare gave every side
    out += " (--" + a["flag"].get<std::string>() + " " + text(a["value"]) + ": " + a["reason"].get<std::string>() + ")";
  return out;
}

std::vector<Table> tables(const json& cmp) {
  std::vector<Table> out;
  const auto& sides = cmp["sides"];
  const std::string base = cmp["baseline"];
  // Table 3.
  Table t3{"Table 3 — throughput",
           "Median over the repetitions [interval from order statistics, level in the last column]; the ratio column "
           "pairs round i of each side with round i of " +
               base + " (they ran next to each other).",
           {"side", "backend", "precision", "ok runs", "tokens/GPU/s", "s/step", "MFU", "MFU (6N)",
            "tokens/GPU/s vs " + base, "interval level"},
           {}};
  for (const auto& s : sides) {
    const auto& th = s["throughput"];
    auto level_of = [](const json& iv) {
      return iv["n"].get<int>() < 2 ? std::string("—") : interval_level(d(iv["coverage"]));
    };
    std::string ratio = s["label"] == base ? "1 (baseline)" : "—", level = level_of(th["tokens_per_gpu_per_s"]);
    for (const auto& c : cmp["comparisons"])
      if (c["side"] == s["label"]) {
        ratio = interval(c["throughput_ratio"], "%.3f");
        level = level_of(th["tokens_per_gpu_per_s"]) + " / ratio " + level_of(c["throughput_ratio"]);
      }
    t3.rows.push_back({s["label"], str(s, "backend"), str(s, "precision"),
                       std::to_string(s["ok_runs"].get<int>()) + "/" + std::to_string(s["runs"].size()),
                       interval(th["tokens_per_gpu_per_s"], "%.1f"), interval(th["step_time_s"], "%.4f"),
                       interval(th["mfu"], "%.3f"), interval(th["mfu_6n"], "%.3f"), ratio, level});
  }
  out.push_back(t3);
  // Table 2.
  Table t2{"Table 2 — precision plan",
           "Each side's dtypes from its report's config.precision_plan; — where the report has none (never guessed "
           "from the backend's name).",
           {"side", "load", "flat/sharded params", "compute", "reduce", "grads", "optimizer states", "master", "notes"},
           {}};
  for (const auto& s : sides) {
    const json& p = s["precision_plan"];
    auto f = [&](const char* k) {
      if (!p.is_object()) return std::string("—");
      if (p.contains(k) && p[k].is_null() && std::string(k) == "master") return std::string("none");
      return str(p, k);
    };
    t2.rows.push_back({s["label"], f("load"), f("params"), f("compute"), f("reduce"), f("grads"), f("optimizer_states"),
                       f("master"), f("notes")});
  }
  out.push_back(t2);
  // Memory.
  Table mem{"Memory per rank (MiB)",
            "Engine-owned model states by category at the end of the last micro-batch's backward, the tracked peak, "
            "and the pre-flight estimate of that peak (reports/SCHEMA.md). From each side's first successful run "
            "(these bytes are deterministic).",
            {"side", "rank", "params", "master params", "grads", "optimizer", "buffers", "model states", "peak tracked",
             "est. peak", "peak/est", "peak RSS"},
            {}};
  for (const auto& s : sides) {
    if (!s.contains("memory")) continue;
    for (const auto& r : s["memory"]["ranks"]) {
      const auto& c = r["model_states_bytes"];
      auto cat = [&](const char* k) {
        if (!c.contains(k)) return std::string("—");
        if (c[k].is_object()) {  // device/host split (offload)
          std::string t;
          for (const auto& [loc, b] : c[k].items()) t += (t.empty() ? "" : " + ") + mib(b) + " " + loc;
          return t;
        }
        return mib(c[k]);
      };
      mem.rows.push_back({s["label"], std::to_string(r["rank"].get<int>()), cat("params"), cat("master_params"),
                          cat("grads"), cat("optimizer"), cat("buffers"), mib(r["model_states_total_bytes"]),
                          mib(r["peak_tracked_bytes"]), mib(r["estimate_peak_bytes"]),
                          fmt("%.2f", d(r["peak_tracked_bytes"]) / d(r["estimate_peak_bytes"])),
                          mib(r["peak_rss_bytes"])});
    }
  }
  out.push_back(mem);
  // Collectives.
  Table comm{"Collectives per step",
             "Count and MiB per kind in one step (the last measured) on each rank; comm time is the collectives' own "
             "duration; exposed comm and overlap are the median over repetitions of the profiled steps' values "
             "(--profile; docs/profiling.md).",
             {"side", "rank", "all_gather", "reduce_scatter", "all_reduce", "broadcast", "MiB/step", "comm s/step",
              "exposed comm s", "overlap"},
             {}};
  for (const auto& s : sides) {
    if (!s.contains("comm")) continue;
    const auto& cm = s["comm"];
    for (const auto& r : cm["ranks"]) {
      auto kind = [&](const char* k) {
        if (!r["kinds"].contains(k)) return std::string("—");
        const auto& x = r["kinds"][k];
        return fmt("%.0f", d(x["count"])) + " × " + mib(x["bytes"]) + " MiB";
      };
      comm.rows.push_back({s["label"], std::to_string(r["rank"].get<int>()), kind("all_gather"), kind("reduce_scatter"),
                           kind("all_reduce"), kind("broadcast"), mib(r["bytes_per_step"]),
                           fmt("%.4f", d(r["time_s_per_step"])),
                           cm["profiled"].get<bool>() ? interval(cm["exposed_comm_s"], "%.4f") : "not profiled",
                           cm["profiled"].get<bool>() ? interval(cm["overlap_ratio"], "%.2f") : "not profiled"});
    }
  }
  out.push_back(comm);
  // Config keys that differ.
  Table cfg{"Config keys that differ",
            "Resolved options from each side's report (config.backend, config.train); — where a side has no such key.",
            {"key"},
            {}};
  for (const auto& s : sides) cfg.header.push_back(s["label"]);
  cfg.header.push_back("effect");
  for (const auto& dif : cmp["config_differences"]) {
    std::vector<std::string> row = {dif["key"]};
    for (const auto& v : dif["values"]) row.push_back(text(v));
    row.push_back(dif["effect"]);
    cfg.rows.push_back(row);
  }
  out.push_back(cfg);
  // Provenance: what each config file set, and what it ignored.
  Table prov{"Config file provenance",
             "config.applied and config.ignored of each side's report (docs/configs.md).",
             {"side", "key", "value", "applied as / ignored because"},
             {}};
  for (const auto& s : sides) {
    if (!s.contains("provenance")) continue;
    for (const char* kind : {"applied", "ignored"})
      for (const auto& k : s["provenance"][kind])
        prov.rows.push_back({s["label"], str(k, "key"), str(k, "value"),
                             std::string(kind) + ": " + (k.contains("as") ? str(k, "as") : str(k, "reason"))});
  }
  out.push_back(prov);
  // Runs.
  Table runs{
      "Runs",
      "Every repetition in the order it ran (A1 B1 A2 B2 …); reports under runs/.",
      {"side", "round", "state", "tokens/GPU/s", "s/step", "MFU", "exposed comm s", "overlap", "report", "error"},
      {}};
  const size_t rounds = sides.empty() ? 0 : sides[0]["runs"].size();
  for (size_t i = 0; i < rounds; ++i)
    for (const auto& s : sides) {
      if (i >= s["runs"].size()) continue;
      const auto& r = s["runs"][i];
      runs.rows.push_back({s["label"], std::to_string(r["round"].get<int>()), r["state"],
                           fmt("%.1f", d(r["tokens_per_gpu_per_s"])), fmt("%.4f", d(r["step_time_s"])),
                           fmt("%.3f", d(r["mfu"])), fmt("%.4f", d(r["exposed_comm_s"])),
                           fmt("%.2f", d(r["overlap_ratio"])), r["report"], r["error"]});
    }
  out.push_back(runs);
  return out;
}

std::string md_cell(std::string s) {
  for (size_t p = 0; (p = s.find('|', p)) != std::string::npos; p += 2) s.replace(p, 1, "\\|");
  for (auto& c : s)
    if (c == '\n') c = ' ';
  return s;
}

std::string html_escape(const std::string& s) { return reports::svg::escape(s); }

std::string loss_table_md(const json& cmp) {
  std::ostringstream o;
  const auto& sides = cmp["sides"];
  o << "| step";
  for (const auto& s : sides) o << " | loss " << md_cell(s["label"]);
  for (const auto& s : sides) o << " | grad norm " << md_cell(s["label"]);
  o << " |\n|---:";
  for (size_t i = 0; i < 2 * sides.size(); ++i) o << "|---:";
  o << "|\n";
  size_t n = 0;
  for (const auto& s : sides)
    if (s.contains("curves")) n = std::max(n, s["curves"]["loss"].size());
  for (size_t i = 0; i < n; ++i) {
    o << "| " << i;
    for (const char* key : {"loss", "grad_norm"})
      for (const auto& s : sides)
        o << " | " << (s.contains("curves") && i < s["curves"][key].size() ? fmt("%.6f", d(s["curves"][key][i])) : "—");
    o << " |\n";
  }
  return o.str();
}
}  // namespace

std::string curve_svg(const json& cmp, const std::string& key) {
  std::vector<reports::svg::Series> series;
  for (const auto& s : cmp["sides"]) {
    if (!s.contains("curves")) continue;
    reports::svg::Series sr;
    sr.label = s["label"].get<std::string>() + " (round " + std::to_string(s["curves"]["round"].get<int>()) + ")";
    for (size_t i = 0; i < s["curves"][key].size(); ++i) {
      sr.x.push_back(d(s["curves"]["step"][i]));
      sr.y.push_back(d(s["curves"][key][i]));
    }
    series.push_back(sr);
  }
  return reports::svg::line_chart(key == "loss" ? "Loss per step" : "Grad norm per step", series, "step",
                                  key == "loss" ? "loss" : "global grad norm", NAN, "");
}

std::string render_markdown(const json& cmp) {
  std::ostringstream o;
  std::string labels;
  for (const auto& s : cmp["sides"]) labels += (labels.empty() ? "" : " vs ") + s["label"].get<std::string>();
  o << "# zerobench compare: " << labels << "\n\n"
    << "Workload: " << workload_line(cmp) << ".\n\n## Verdict\n\n"
    << cmp["verdict"].get<std::string>() << "\n\n";
  for (const auto& t : tables(cmp)) {
    o << "## " << t.title << "\n\n" << t.note << "\n\n";
    if (t.rows.empty()) {
      o << "(none)\n\n";
      continue;
    }
    o << "|";
    for (const auto& h : t.header) o << " " << md_cell(h) << " |";
    o << "\n|";
    for (size_t i = 0; i < t.header.size(); ++i) o << (i == 0 ? "---|" : "---|");
    o << "\n";
    for (const auto& row : t.rows) {
      o << "|";
      for (const auto& c : row) o << " " << md_cell(c) << " |";
      o << "\n";
    }
    o << "\n";
  }
  o << "## Loss and grad-norm curves\n\n![loss](loss.svg)\n![grad norm](grad_norm.svg)\n\n" << loss_table_md(cmp);
  return o.str();
}

std::string render_html(const json& cmp) {
  std::ostringstream o;
  std::string labels;
  for (const auto& s : cmp["sides"]) labels += (labels.empty() ? "" : " vs ") + s["label"].get<std::string>();
  o << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>zerobench compare: " << html_escape(labels)
    << "</title>\n<style>\nbody{font-family:sans-serif;margin:24px;max-width:1400px;color:#222}\n"
       "table{border-collapse:collapse;margin:8px 0 20px}\nth,td{border:1px solid #ccc;padding:4px 8px;"
       "font-size:13px}\nth{background:#f2f2f2}\ntd{text-align:left}\ntd.n{text-align:right}\n"
       ".verdict{background:#f6f8fa;border-left:4px solid #4e79a7;padding:10px 14px;font-size:15px}\n"
       ".note{color:#555;font-size:13px}\n.charts svg{margin:6px}\n</style></head><body>\n"
    << "<h1>zerobench compare: " << html_escape(labels)
    << "</h1>\n<p class=\"note\">Workload: " << html_escape(workload_line(cmp))
    << "</p>\n<h2>Verdict</h2>\n<p class=\"verdict\">" << html_escape(cmp["verdict"].get<std::string>()) << "</p>\n";
  // Error bars: tokens/GPU/s per side, and each side's paired ratio to the baseline.
  std::vector<reports::svg::IntervalPoint> tok, ratio;
  for (const auto& s : cmp["sides"]) {
    const auto& iv = s["throughput"]["tokens_per_gpu_per_s"];
    tok.push_back({s["label"], d(iv["median"]), d(iv["lo"]), d(iv["hi"])});
  }
  for (const auto& c : cmp["comparisons"]) {
    const auto& iv = c["throughput_ratio"];
    ratio.push_back({c["side"].get<std::string>() + " / " + c["baseline"].get<std::string>(), d(iv["median"]),
                     d(iv["lo"]), d(iv["hi"])});
  }
  o << "<div class=\"charts\">\n"
    << reports::svg::interval_chart("tokens/GPU/s: median and interval over repetitions", tok, "tokens/GPU/s", NAN, "")
    << reports::svg::interval_chart("paired tokens/GPU/s ratio to " + cmp["baseline"].get<std::string>(), ratio,
                                    "ratio", 1.0, "no difference")
    << "</div>\n";
  for (const auto& t : tables(cmp)) {
    o << "<h2>" << html_escape(t.title) << "</h2>\n<p class=\"note\">" << html_escape(t.note) << "</p>\n";
    if (t.rows.empty()) {
      o << "<p>(none)</p>\n";
      continue;
    }
    o << "<table><tr>";
    for (const auto& h : t.header) o << "<th>" << html_escape(h) << "</th>";
    o << "</tr>\n";
    for (const auto& row : t.rows) {
      o << "<tr>";
      for (const auto& c : row) {
        const bool number = !c.empty() && (std::isdigit(static_cast<unsigned char>(c[0])) || c[0] == '-');
        o << (number ? "<td class=\"n\">" : "<td>") << html_escape(c) << "</td>";
      }
      o << "</tr>\n";
    }
    o << "</table>\n";
    if (t.title == "Collectives per step")  // the curves next to the numbers, before the long key lists
      o << "<h2>Loss and grad-norm curves</h2>\n<p class=\"note\">Each side's first successful round (rounds "
           "train the same seed and data; compare.json says whether they were identical).</p>\n"
           "<div class=\"charts\">\n"
        << curve_svg(cmp, "loss") << curve_svg(cmp, "grad_norm") << "</div>\n";
  }
  o << "</body></html>\n";
  return o.str();
}

}  // namespace zb::bench::compare
