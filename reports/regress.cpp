// regress.cpp — baseline comparison (see regress.hpp).
#include "reports/regress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "reports/metrics.hpp"
#include "reports/stats.hpp"

namespace zb::reports {

namespace {
using json = nlohmann::json;

std::string fmt(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}
std::string fmt9(double v) {  // enough digits to tell two floats apart
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}
std::string pct(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.2f%%", (ratio - 1) * 100);
  return buf;
}

std::string cell_name(const json& r) { return r.value("_cell", r.value("run_id", "?")); }

std::vector<double> tokens_per_s_samples(const json& r) {
  std::vector<double> out;
  const double tokens = r["summary"]["tokens_per_rank_per_step"];
  for (const auto& t : r["ranks"][0]["step_times_s"]) out.push_back(tokens_per_gpu_per_s(int64_t(tokens), t.get<double>()));
  return out;
}

void exact(RegressResult& res, const std::string& cell, const std::string& metric, const json& b, const json& c) {
  if (b == c) return;  // matching deterministic metrics are not listed
  res.checks.push_back({cell, metric, b.dump(), c.dump(), "changed", true, "deterministic metric must match exactly"});
}

// The numerics of a cell: per step, loss, grad norm and lr. With threads fixed, the same inputs
// and the same code give the same bits, so any difference (beyond `rtol`, 0 = none) is a change
// in what the engines compute. NaN/Inf or a missing value on either side is a difference.
// One row per metric: the first differing step, how many differ and the largest relative
// difference; a matching metric is listed once as ok, so the table shows what was gated.
// What decides whether two runs round alike: the device, the CPU kernels ATen dispatched to and
// the GEMM libraries' pins (env.cpu_math_pins), the torch build and the intra-op threads. "" when a report does not record all of them.
std::string machine_kind(const json& r) {
  if (!r.contains("env") || !r["env"].contains("cpu_capability")) return "";
  const auto& e = r["env"];
  const std::string pins = e.value("cpu_math_pins", "");
  return e.value("device", "?") + ", " + e.value("cpu_capability", "?") + (pins.empty() ? "" : " (" + pins + ")") +
         ", torch " + e.value("torch", "?") + ", " + std::to_string(e.value("threads_per_rank", 0)) + " threads";
}

void compare_numerics(RegressResult& res, const std::string& cell, const json& b, const json& c,
                      const RegressOptions& o) {
  const std::string bk = machine_kind(b), ck = machine_kind(c);
  const bool same_kind = !bk.empty() && bk == ck;
  const double rtol = same_kind ? o.numerics_rtol : o.numerics_rtol_other_machine;
  const std::string kind_note = same_kind ? "" : bk.empty() || ck.empty() ? "; a report does not record its machine kind"
                                                                          : "; other machine kind: " + bk + " vs " + ck;
  const json& bs = b.contains("steps") ? b["steps"] : json::array();
  const json& cs = c.contains("steps") ? c["steps"] : json::array();
  if (bs.size() != cs.size()) {
    res.checks.push_back({cell, "steps", std::to_string(bs.size()), std::to_string(cs.size()), "changed", true,
                          "number of recorded steps must match"});
    return;
  }
  for (const char* metric : {"loss", "grad_norm", "lr"}) {
    size_t differ = 0, first = 0;
    double max_rel = 0;
    std::string first_b, first_c;
    for (size_t i = 0; i < bs.size(); ++i) {
      const json bv = bs[i].value(metric, json()), cv = cs[i].value(metric, json());
      // A step fp16 skipped on both sides has no grad norm (null); any other null is a NaN, which
      // never equals anything.
      auto skipped = [](const json& st) {
        return st.contains("loss_scale") && st["loss_scale"].value("skipped", false);
      };
      if (metric == std::string("grad_norm") && bv.is_null() && cv.is_null() && skipped(bs[i]) && skipped(cs[i]))
        continue;
      bool same = false;
      double rel = std::numeric_limits<double>::infinity();
      if (bv.is_number() && cv.is_number()) {
        const double x = bv.get<double>(), y = cv.get<double>();
        const double d = std::fabs(x - y), scale = std::max(std::fabs(x), std::fabs(y));
        rel = d == 0 ? 0 : scale > 0 ? d / scale : std::numeric_limits<double>::infinity();
        same = std::isfinite(x) && std::isfinite(y) && (x == y || rel <= rtol);
      }
      if (same) {
        max_rel = std::max(max_rel, rel);
        continue;
      }
      if (differ++ == 0) {
        first = i;
        first_b = bv.is_number() ? fmt9(bv.get<double>()) : bv.dump();
        first_c = cv.is_number() ? fmt9(cv.get<double>()) : cv.dump();
      }
      max_rel = std::max(max_rel, rel);
    }
    const std::string tol = (rtol == 0 ? "bitwise" : "rtol " + fmt(rtol)) + kind_note;
    char note[320];
    if (differ == 0) {
      std::snprintf(note, sizeof(note), "%zu steps, max rel diff %.3g (%s)", bs.size(), max_rel, tol.c_str());
      res.checks.push_back({cell, std::string("steps.") + metric, "", "", "same", false, note});
    } else {
      std::snprintf(note, sizeof(note), "%zu of %zu steps differ, max rel diff %.3g (gated: %s)", differ, bs.size(),
                    max_rel, tol.c_str());
      res.checks.push_back({cell, "steps[" + std::to_string(first) + "]." + metric, first_b, first_c, "changed", true,
                            note});
    }
  }
}

// Memory peaks (docs/regression.md). The program-order peak does not depend on when collectives
// complete: exact, any change is a regression. The observed peak does (Gloo's worker threads
// allocate and free comm buffers when the scheduler lets them): shown for rank 0, never gated —
// unless a side has no program-order peak (a report written before it, a CUDA run), where the
// observed peak may be at most `memory_threshold` above the baseline's.
void compare_peaks(RegressResult& res, const std::string& cell, const std::string& r, const json& bm, const json& cm,
                   bool first_rank, const RegressOptions& o) {
  const double bp = bm["peak_tracked_bytes"], cp = cm["peak_tracked_bytes"];
  const json bq = bm.value("peak_program_bytes", json()), cq = cm.value("peak_program_bytes", json());
  if (bq.is_number_integer() && cq.is_number_integer()) {
    const int64_t x = bq.get<int64_t>(), y = cq.get<int64_t>();
    std::string note = "program order (comm buffers held from issue to wait): must match exactly";
    for (const auto* side : {&bm, &cm})
      if (side->contains("program_order") && (*side)["program_order"].is_object() &&
          !(*side)["program_order"].value("exact", true))
        note += std::string("; the ") + (side == &bm ? "baseline" : "current") + "'s ledger is not exact (" +
                (*side)["program_order"].dump() + ")";
    if (x != y || first_rank)
      res.checks.push_back({cell, r + "memory.peak_program_bytes", bq.dump(), cq.dump(),
                            x == y ? "same" : pct(x > 0 ? double(y) / double(x) : 1.0), x != y, note});
    if (first_rank)
      res.checks.push_back({cell, r + "memory.peak_tracked_bytes", fmt(bp), fmt(cp), pct(bp > 0 ? cp / bp : 1.0), false,
                            "observed: depends on when collectives complete; reported, not gated"});
    return;
  }
  const bool grew = cp > bp * (1 + o.memory_threshold);
  if (grew || first_rank)
    res.checks.push_back({cell, r + "memory.peak_tracked_bytes", fmt(bp), fmt(cp), pct(bp > 0 ? cp / bp : 1.0), grew,
                          "allowed +" + fmt(o.memory_threshold * 100) + "% (" +
                              std::string(bq.is_number() ? "the current report" : "the baseline") +
                              " has no peak_program_bytes: written before it, or a CUDA run)"});
}

void compare_cell(RegressResult& res, const json& b, const json& c, const RegressOptions& o) {
  const auto cell = cell_name(c);
  const std::string bs = b["status"]["state"], cs = c["status"]["state"];
  if (bs != "ok" || cs != "ok") {
    const bool worse = bs == "ok" && cs != "ok";
    res.checks.push_back({cell, "status", bs, cs, bs == cs ? "same" : "changed", worse,
                          worse ? c["status"].value("error", "") : ""});
    return;
  }
  // Throughput: flag only if the median is beyond the threshold AND the U test says slower.
  const auto bt = tokens_per_s_samples(b), ct = tokens_per_s_samples(c);
  const double bm = b["summary"]["tokens_per_gpu_per_s"]["median"], cm = c["summary"]["tokens_per_gpu_per_s"]["median"];
  const double ratio = bm > 0 ? cm / bm : 1.0;
  const double p = mann_whitney_greater_p(bt, ct);  // baseline faster than current?
  const bool slower = ratio < 1 - o.threshold && p < o.alpha;
  char note[96];
  std::snprintf(note, sizeof(note), "U-test p=%.3g%s", p, o.gate_timing ? "" : " (timing not gated)");
  res.checks.push_back({cell, "tokens_per_gpu_per_s.median", fmt(bm), fmt(cm), pct(ratio), slower && o.gate_timing, note});
  const double bst = b["summary"]["step_time_s"]["median"], cst = c["summary"]["step_time_s"]["median"];
  res.checks.push_back({cell, "step_time_s.median", fmt(bst), fmt(cst), pct(bst > 0 ? cst / bst : 1.0),
                        slower && o.gate_timing, note});
  // Deterministic metrics.
  exact(res, cell, "summary.flops_per_token", b["summary"]["flops_per_token"], c["summary"]["flops_per_token"]);
  exact(res, cell, "config.model.params", b["config"]["model"]["params"], c["config"]["model"]["params"]);
  compare_numerics(res, cell, b, c, o);
  const size_t ranks = std::min(b["ranks"].size(), c["ranks"].size());
  if (b["ranks"].size() != c["ranks"].size())
    exact(res, cell, "ranks", json(b["ranks"].size()), json(c["ranks"].size()));
  for (size_t i = 0; i < ranks; ++i) {
    const auto& br = b["ranks"][i];
    const auto& cr = c["ranks"][i];
    const std::string r = "ranks[" + std::to_string(i) + "].";
    // Every category either side has: a category new in the current reports (e.g. `buffers`)
    // is a change until the baseline is refreshed.
    const auto& bm_states = br["memory"]["model_states_bytes"];
    const auto& cm_states = cr["memory"]["model_states_bytes"];
    for (const auto& [k, v] : bm_states.items()) exact(res, cell, r + "memory.model_states_bytes." + k, v, cm_states.value(k, json()));
    for (const auto& [k, v] : cm_states.items())
      if (!bm_states.contains(k)) exact(res, cell, r + "memory.model_states_bytes." + k, json(), v);
    // Offload (docs/metrics.md): bytes each way in the last step, when either side offloads.
    const json bo = br.value("offload", json()), co = cr.value("offload", json());
    if (!bo.is_null() || !co.is_null())
      for (const char* k : {"h2d_bytes", "d2h_bytes"})
        exact(res, cell, r + "offload.last_step." + k, bo.is_null() ? json() : bo["last_step"][k],
              co.is_null() ? json() : co["last_step"][k]);
    for (const auto& [kind, v] : br["comm"].items()) {
      exact(res, cell, r + "comm." + kind + ".count", v["count"], cr["comm"][kind]["count"]);
      exact(res, cell, r + "comm." + kind + ".bytes", v["bytes"], cr["comm"][kind]["bytes"]);
    }
    compare_peaks(res, cell, r, br["memory"], cr["memory"], i == 0, o);
  }
}
}  // namespace

bool RegressResult::regression() const {
  if (!missing.empty()) return true;
  return std::any_of(checks.begin(), checks.end(), [](const Check& c) { return c.regression; });
}

json RegressResult::to_json() const {
  json j = {{"verdict", regression() ? "regression" : "pass"}, {"missing", missing}, {"extra", extra},
            {"checks", json::array()}};
  for (const auto& c : checks)
    j["checks"].push_back({{"cell", c.cell}, {"metric", c.metric}, {"baseline", c.baseline}, {"current", c.current},
                           {"change", c.change}, {"regression", c.regression}, {"note", c.note}});
  return j;
}

std::string RegressResult::to_text() const {
  std::ostringstream o;
  o << "| cell | metric | baseline | current | change | verdict | note |\n|---|---|---:|---:|---:|---|---|\n";
  for (const auto& c : checks)
    o << "| " << c.cell << " | " << c.metric << " | " << c.baseline << " | " << c.current << " | " << c.change << " | "
      << (c.regression ? "REGRESSION" : "ok") << " | " << c.note << " |\n";
  for (const auto& m : missing) o << "missing in current: " << m << "\n";
  for (const auto& e : extra) o << "new in current (not gated): " << e << "\n";
  o << (regression() ? "verdict: REGRESSION\n" : "verdict: pass\n");
  return o.str();
}

std::string config_key(const json& r) {
  json k;
  const auto& cfg = r["config"];
  if (cfg.contains("cell")) return "cell:" + cfg["cell"].get<std::string>();  // a failed matrix cell
  json model = cfg.value("model", json::object());
  model.erase("params");
  k["model"] = model;
  k["backend"] = cfg.value("backend", json::object());
  k["train"] = cfg.value("train", json::object());
  k["data"] = cfg.contains("data") ? cfg["data"].value("kind", "") : "";
  k["world_size"] = r.contains("env") ? r["env"].value("world_size", 0) : cfg.value("world_size", 0);
  return k.dump();  // nlohmann orders object keys: canonical
}

// Two configurations agree when every setting both of them record is equal: a field added in a
// newer version (present on one side only) does not make a cell incomparable.
bool configs_compatible(const json& a, const json& b) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [k, v] : a.items())
      if (b.contains(k) && !configs_compatible(v, b[k])) return false;
    return true;
  }
  return a == b;
}

RegressResult compare_reports(const std::vector<json>& baseline, const std::vector<json>& current,
                              const RegressOptions& o) {
  RegressResult res;
  // Cells are matched by name (a matrix's cell id, a file's stem), else by configuration.
  std::map<std::string, const json*> cur_by_cell, cur_by_key;
  for (const auto& c : current) {
    cur_by_cell[cell_name(c)] = &c;
    if (c["status"]["state"] == "ok") cur_by_key[config_key(c)] = &c;
  }
  std::map<std::string, bool> used;
  for (const auto& b : baseline) {
    const json* c = nullptr;
    if (auto it = cur_by_cell.find(cell_name(b)); it != cur_by_cell.end()) c = it->second;
    if (!c && b["status"]["state"] == "ok")
      if (auto it = cur_by_key.find(config_key(b)); it != cur_by_key.end()) c = it->second;
    if (!c) {
      res.missing.push_back(cell_name(b));
      continue;
    }
    used[cell_name(*c)] = true;
    const bool both_ok = c->at("status").at("state") == "ok" && b["status"]["state"] == "ok";
    if (both_ok && (!configs_compatible(b["config"], c->at("config")) ||
                    b["env"].value("world_size", 0) != c->at("env").value("world_size", 0))) {
      res.checks.push_back({cell_name(*c), "config", "", "", "changed", true,
                            "same cell, different configuration: refresh the baseline on purpose"});
      continue;
    }
    compare_cell(res, b, *c, o);
  }
  for (const auto& c : current)
    if (!used.count(cell_name(c))) res.extra.push_back(cell_name(c));
  return res;
}

bool is_google_benchmark_json(const json& j) {
  return j.is_object() && j.contains("benchmarks") && j["benchmarks"].is_array();
}

namespace {
// One benchmark's samples: metric -> values over repetitions, and what must match exactly.
struct BenchSamples {
  std::map<std::string, std::vector<double>> metrics;
  std::map<std::string, double> exact;
  bool error = false;
  std::string error_message;
};

// (metric, higher_is_worse): time per op, and the counters the micro suite writes.
const std::vector<std::pair<std::string, bool>> kBenchMetrics = {
    {"real_time", true}, {"busbw", false}, {"algbw", false}, {"tflops", false}, {"GBps", false}};

double seconds_of(const json& b, const std::string& field) {
  const std::string unit = b.value("time_unit", "ns");
  const double v = b[field].get<double>();
  return unit == "s" ? v : unit == "ms" ? v * 1e-3 : unit == "us" ? v * 1e-6 : v * 1e-9;
}

std::map<std::string, BenchSamples> benchmark_samples(const json& j) {
  std::map<std::string, BenchSamples> out;
  std::map<std::string, bool> has_iterations;
  for (const auto& b : j["benchmarks"])
    if (b.value("run_type", "iteration") == "iteration") has_iterations[b.value("run_name", b.value("name", ""))] = true;
  for (const auto& b : j["benchmarks"]) {
    const bool aggregate = b.value("run_type", "iteration") == "aggregate";
    const std::string name = b.value("run_name", b.value("name", ""));
    // Aggregates only stand in when the file has no per-repetition rows (report_aggregates_only).
    if (aggregate && (has_iterations[name] || b.value("aggregate_name", "") != "median")) continue;
    auto& s = out[name];
    if (b.value("error_occurred", false)) {
      s.error = true;
      s.error_message = b.value("error_message", "");
      continue;
    }
    for (const auto& [metric, higher_worse] : kBenchMetrics) {
      if (!b.contains(metric) || !b[metric].is_number()) continue;
      s.metrics[metric].push_back(metric == "real_time" ? seconds_of(b, metric) : b[metric].get<double>());
    }
    for (const char* k : {"bytes", "world_size", "flops"})
      if (b.contains(k) && b[k].is_number()) s.exact[k] = b[k].get<double>();
  }
  return out;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

RegressResult compare_benchmarks(const json& baseline, const json& current, const RegressOptions& o) {
  RegressResult res;
  const auto base = benchmark_samples(baseline), cur = benchmark_samples(current);
  for (const auto& [name, b] : base) {
    auto it = cur.find(name);
    if (it == cur.end()) {
      res.missing.push_back(name);
      continue;
    }
    const auto& c = it->second;
    if (c.error || b.error) {
      const bool worse = c.error && !b.error;
      res.checks.push_back({name, "status", b.error ? "error" : "ok", c.error ? "error" : "ok", worse ? "changed" : "same",
                            worse, c.error_message});
      continue;
    }
    for (const auto& [k, v] : b.exact)
      if (c.exact.count(k) && c.exact.at(k) != v)
        res.checks.push_back({name, k, fmt(v), fmt(c.exact.at(k)), "changed", true, "must match exactly"});
    for (const auto& [metric, higher_worse] : kBenchMetrics) {
      if (!b.metrics.count(metric) || !c.metrics.count(metric)) continue;
      const auto& bv = b.metrics.at(metric);
      const auto& cv = c.metrics.at(metric);
      const double bm = median_of(bv), cm = median_of(cv);
      const double ratio = bm != 0 ? cm / bm : 1.0;
      const bool moved_worse = higher_worse ? ratio > 1 + o.threshold : ratio < 1 - o.threshold;
      // "current tends to be worse": larger times, or smaller throughputs.
      const double p = higher_worse ? mann_whitney_greater_p(cv, bv) : mann_whitney_greater_p(bv, cv);
      const bool enough = bv.size() >= 3 && cv.size() >= 3;
      const bool worse = moved_worse && enough && p < o.alpha;
      char note[160];
      if (enough) {
        std::snprintf(note, sizeof(note), "U-test p=%.3g (n=%zu/%zu)%s", p, bv.size(), cv.size(),
                      o.gate_timing ? "" : " (timing not gated)");
      } else {
        std::snprintf(note, sizeof(note), "n=%zu/%zu: the U test needs >= 3 repetitions (--benchmark_repetitions)",
                      bv.size(), cv.size());
      }
      res.checks.push_back({name, metric + ".median", fmt(bm), fmt(cm), pct(ratio), worse && o.gate_timing, note});
    }
  }
  for (const auto& [name, c] : cur)
    if (!base.count(name)) res.extra.push_back(name);
  return res;
}

}  // namespace zb::reports
