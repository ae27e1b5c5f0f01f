// regress.cpp — baseline comparison (see regress.hpp).
#include "reports/regress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "reports/columns.hpp"
#include "reports/metrics.hpp"
#include "reports/run_report.hpp"
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

std::string cell_name(const RunReport& r) { return r.cell_name(); }

std::vector<double> tokens_per_s_samples(const RunReport& r) {
  std::vector<double> out;
  const int64_t tokens = r.summary->tokens_per_rank_per_step;
  if (r.rank_records().empty()) return out;  // a projection measured no rank
  const auto& rank0 = r.rank_records().front();
  if (rank0.step_times_s)
    for (double t : *rank0.step_times_s) out.push_back(tokens_per_gpu_per_s(tokens, t));
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
std::string machine_kind(const RunReport& r) {
  if (!r.env || !r.env->cpu_capability) return "";
  const auto& e = *r.env;
  const std::string pins = e.cpu_math_pins.value_or("");
  return e.device + ", " + *e.cpu_capability + (pins.empty() ? "" : " (" + pins + ")") + ", torch " + e.torch + ", " +
         std::to_string(e.threads_per_rank.value_or(0)) + " threads";
}

void compare_numerics(RegressResult& res, const std::string& cell, const RunReport& b, const RunReport& c,
                      const RegressOptions& o) {
  const std::string bk = machine_kind(b), ck = machine_kind(c);
  const bool same_kind = !bk.empty() && bk == ck;
  const double rtol = same_kind ? o.numerics_rtol : o.numerics_rtol_other_machine;
  const std::string kind_note = same_kind ? "" : bk.empty() || ck.empty() ? "; a report does not record its machine kind"
                                                                          : "; other machine kind: " + bk + " vs " + ck;
  const auto& bs = b.step_records();
  const auto& cs = c.step_records();
  if (bs.size() != cs.size()) {
    res.checks.push_back({cell, "steps", std::to_string(bs.size()), std::to_string(cs.size()), "changed", true,
                          "number of recorded steps must match"});
    return;
  }
  using Metric = std::optional<double> StepRecord::*;
  const std::pair<const char*, Metric> metrics[] = {
      {"loss", &StepRecord::loss}, {"grad_norm", &StepRecord::grad_norm}, {"lr", &StepRecord::lr}};
  for (const auto& [metric, field] : metrics) {
    size_t differ = 0, first = 0;
    double max_rel = 0;
    std::string first_b, first_c;
    for (size_t i = 0; i < bs.size(); ++i) {
      const std::optional<double> bv = bs[i].*field, cv = cs[i].*field;  // nullopt: null (NaN/Inf) or missing
      // A step fp16 skipped on both sides has no grad norm (null); any other null is a NaN, which
      // never equals anything.
      if (field == &StepRecord::grad_norm && !bv && !cv && bs[i].skipped() && cs[i].skipped()) continue;
      bool same = false;
      double rel = std::numeric_limits<double>::infinity();
      if (bv && cv) {
        const double x = *bv, y = *cv;
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
        first_b = bv ? fmt9(*bv) : "null";
        first_c = cv ? fmt9(*cv) : "null";
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
void compare_peaks(RegressResult& res, const std::string& cell, const std::string& r, const RankMemory& bm,
                   const RankMemory& cm, bool first_rank, const RegressOptions& o) {
  const double bp = double(bm.peak_tracked_bytes), cp = double(cm.peak_tracked_bytes);
  if (bm.peak_program_bytes && cm.peak_program_bytes) {
    const int64_t x = *bm.peak_program_bytes, y = *cm.peak_program_bytes;
    std::string note = "program order (comm buffers held from issue to wait): must match exactly";
    for (const auto* side : {&bm, &cm})
      if (side->program_order && !side->program_order->exact.value_or(true))
        note += std::string("; the ") + (side == &bm ? "baseline" : "current") + "'s ledger is not exact (" +
                to_json(*side->program_order).dump() + ")";
    if (x != y || first_rank)
      res.checks.push_back({cell, r + "memory.peak_program_bytes", json(x).dump(), json(y).dump(),
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
                              std::string(bm.peak_program_bytes ? "the current report" : "the baseline") +
                              " has no peak_program_bytes: written before it, or a CUDA run)"});
}

json offload_bytes(const RankRecord& rk, bool h2d) {
  if (!rk.offload) return json();
  if (!rk.offload->last_step) return json();
  return h2d ? rk.offload->last_step->h2d_bytes : rk.offload->last_step->d2h_bytes;
}

void compare_cell(RegressResult& res, const RunReport& b, const RunReport& c, const RegressOptions& o) {
  const auto cell = cell_name(c);
  const std::string bs = b.status.state, cs = c.status.state;
  if (bs != "ok" || cs != "ok") {
    const bool worse = bs == "ok" && cs != "ok";
    res.checks.push_back({cell, "status", bs, cs, bs == cs ? "same" : "changed", worse, worse ? c.status.error : ""});
    return;
  }
  // Timing (the registry's gated columns: tokens/GPU/s and s/step medians): flag only if the
  // throughput median is beyond the threshold AND the U test says slower.
  const auto bt = tokens_per_s_samples(b), ct = tokens_per_s_samples(c);
  const RowContext bx{b, nullptr, std::nullopt}, cx{c, nullptr, std::nullopt};
  const Column& throughput = column("tokens_per_gpu_per_s.median");
  const double bm = *throughput.value(bx), cm = *throughput.value(cx);
  const double p = mann_whitney_greater_p(bt, ct);  // baseline faster than current?
  const bool slower = (bm > 0 ? cm / bm : 1.0) < 1 - o.threshold && p < o.alpha;
  char note[96];
  std::snprintf(note, sizeof(note), "U-test p=%.3g%s", p, o.gate_timing ? "" : " (timing not gated)");
  for (const auto& col : columns()) {
    if (col.gate != Column::Gate::Timing) continue;
    const double bv = *col.value(bx), cv = *col.value(cx);
    res.checks.push_back({cell, col.key, fmt(bv), fmt(cv), pct(bv > 0 ? cv / bv : 1.0), slower && o.gate_timing, note});
  }
  // Deterministic metrics.
  auto flops = [](const RunReport& r) { return r.summary->flops_per_token ? to_json(*r.summary->flops_per_token) : json(); };
  auto params = [](const RunReport& r) {
    return r.config.model && r.config.model->params ? to_json(*r.config.model->params) : json();
  };
  exact(res, cell, "summary.flops_per_token", flops(b), flops(c));
  exact(res, cell, "config.model.params", params(b), params(c));
  compare_numerics(res, cell, b, c, o);
  const auto& branks = b.rank_records();
  const auto& cranks = c.rank_records();
  const size_t ranks = std::min(branks.size(), cranks.size());
  if (branks.size() != cranks.size()) exact(res, cell, "ranks", json(branks.size()), json(cranks.size()));
  for (size_t i = 0; i < ranks; ++i) {
    const auto& br = branks[i];
    const auto& cr = cranks[i];
    const std::string r = "ranks[" + std::to_string(i) + "].";
    // Every category either side has: a category new in the current reports (e.g. `buffers`)
    // is a change until the baseline is refreshed.
    const json bm_states = to_json(br.memory.model_states_bytes);
    const json cm_states = to_json(cr.memory.model_states_bytes);
    for (const auto& [k, v] : bm_states.items()) exact(res, cell, r + "memory.model_states_bytes." + k, v, cm_states.value(k, json()));
    for (const auto& [k, v] : cm_states.items())
      if (!bm_states.contains(k)) exact(res, cell, r + "memory.model_states_bytes." + k, json(), v);
    // Offload (docs/metrics.md): bytes each way in the last step, when either side offloads.
    if (br.offload || cr.offload)
      for (const bool h2d : {true, false})
        exact(res, cell, r + "offload.last_step." + (h2d ? "h2d_bytes" : "d2h_bytes"), offload_bytes(br, h2d),
              offload_bytes(cr, h2d));
    for (const auto& [kind, v] : br.comm) {
      const auto it = cr.comm.find(kind);
      exact(res, cell, r + "comm." + kind + ".count", v.count, it == cr.comm.end() ? json() : json(it->second.count));
      exact(res, cell, r + "comm." + kind + ".bytes", v.bytes, it == cr.comm.end() ? json() : json(it->second.bytes));
    }
    compare_peaks(res, cell, r, br.memory, cr.memory, i == 0, o);
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

std::string config_key(const json& report) {
  const RunReport r = run_report_from_json(report);
  const RunConfig& cfg = r.config;
  if (cfg.cell) return "cell:" + *cfg.cell;  // a failed matrix cell
  json k;
  json model = json::object();
  if (cfg.model) {
    ModelConfig m = *cfg.model;
    m.params.reset();  // counts follow from the dims
    m.extra.keys.erase("params");
    model = to_json(m);
  }
  k["model"] = model;
  k["backend"] = cfg.backend ? to_json(*cfg.backend) : json::object();
  k["train"] = cfg.train ? to_json(*cfg.train) : json::object();
  k["data"] = cfg.data ? cfg.data->kind.value_or("") : "";
  k["world_size"] = r.env ? r.env->world_size : cfg.world_size.value_or(0);
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

RegressResult compare_reports(const std::vector<json>& baseline_json, const std::vector<json>& current_json,
                              const RegressOptions& o) {
  std::vector<RunReport> baseline, current;
  for (const auto& j : baseline_json) baseline.push_back(run_report_from_json(j));
  for (const auto& j : current_json) current.push_back(run_report_from_json(j));
  RegressResult res;
  // Cells are matched by name (a matrix's cell id, a file's stem), else by configuration.
  std::map<std::string, const RunReport*> cur_by_cell, cur_by_key;
  for (size_t i = 0; i < current.size(); ++i) {
    cur_by_cell[cell_name(current[i])] = &current[i];
    if (current[i].ok()) cur_by_key[config_key(current_json[i])] = &current[i];
  }
  std::map<std::string, bool> used;
  for (size_t i = 0; i < baseline.size(); ++i) {
    const RunReport& b = baseline[i];
    const RunReport* c = nullptr;
    if (auto it = cur_by_cell.find(cell_name(b)); it != cur_by_cell.end()) c = it->second;
    if (!c && b.ok())
      if (auto it = cur_by_key.find(config_key(baseline_json[i])); it != cur_by_key.end()) c = it->second;
    if (!c) {
      res.missing.push_back(cell_name(b));
      continue;
    }
    used[cell_name(*c)] = true;
    const bool both_ok = c->ok() && b.ok();
    const int64_t bw = b.env ? b.env->world_size : 0, cw = c->env ? c->env->world_size : 0;
    if (both_ok && (!configs_compatible(to_json(b.config), to_json(c->config)) || bw != cw)) {
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
