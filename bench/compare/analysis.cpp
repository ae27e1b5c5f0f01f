// analysis.cpp — the compare document's numbers (see analysis.hpp). Report fields read, typed
// (reports/run_report.hpp; SCHEMA.md): summary.{tokens_per_gpu_per_s,step_time_s}.median, summary.{mfu,mfu_6n},
// summary.tokens_per_rank_per_step, config.{backend,train,precision_plan,applied,ignored,warnings},
// ranks[i].memory.{model_states_bytes,model_states_total_bytes,peak_tracked_bytes,peak_rss_bytes,
// estimate.peak_bytes}, ranks[i].comm.<kind>.{count,bytes,time_s} (the last step),
// profile.{exposed_comm_s,overlap_ratio}, steps[].{step,loss,grad_norm}, status.{state,error}.
#include "bench/compare/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "bench/compare/config_diff.hpp"
#include "reports/run_report.hpp"
#include "reports/stats.hpp"

namespace zb::bench::compare {

namespace {
using json = nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using reports::RunReport;
using Run = std::optional<RunReport>;  // nullopt: no report

// A typed number, NaN when absent (or null).
double num(const std::optional<double>& v) { return v ? *v : kNaN; }
double num(const std::optional<int64_t>& v) { return v ? double(*v) : kNaN; }

json num_json(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json interval_json(const std::vector<double>& sample) {
  const auto r = reports::median_interval(sample);
  return {{"median", num_json(r.median)},
          {"lo", num_json(r.lo)},
          {"hi", num_json(r.hi)},
          {"coverage", r.coverage},
          {"n", r.n},
          {"k", r.k}};
}

bool ok(const Run& report) { return report && report->ok(); }

std::vector<double> series(const RunReport& report, std::optional<double> reports::StepRecord::*field) {
  std::vector<double> out;
  for (const auto& s : report.step_records()) out.push_back(num(s.*field));
  return out;
}

// A side's per-rank memory (the compare JSON's "memory") and its maxima over ranks (NaN: none).
struct Memory {
  json doc;
  double max_states = kNaN, max_peak = kNaN, max_est = kNaN;
};

Memory memory_of(const RunReport& report) {
  json ranks = json::array();
  double max_states = kNaN, max_peak = kNaN, max_est = kNaN, max_host = kNaN;
  auto up = [](double& m, double v) {
    if (std::isfinite(v)) m = std::isfinite(m) ? std::max(m, v) : v;
  };
  for (const auto& r : report.rank_records()) {
    const auto& m = r.memory;
    // Offloaded states (model_states_bytes.host) are not in model_states_total_bytes (the device's).
    if (m.model_states_bytes.host) up(max_host, double(m.model_states_bytes.host->total()));
    double est = m.estimate ? num(m.estimate->peak_bytes) : kNaN;
    if (!std::isfinite(est)) est = num(m.estimated_peak_bytes);
    const double states = num(m.model_states_total_bytes), peak = double(m.peak_tracked_bytes);
    ranks.push_back({{"rank", r.rank},
                     {"model_states_bytes", reports::to_json(m.model_states_bytes)},
                     {"model_states_total_bytes", num_json(states)},
                     {"peak_tracked_bytes", num_json(peak)},
                     {"estimate_peak_bytes", num_json(est)},
                     {"peak_rss_bytes", num_json(double(m.peak_rss_bytes))}});
    up(max_states, states);
    up(max_peak, peak);
    up(max_est, est);
  }
  json doc = {{"ranks", ranks},
              {"max",
               {{"model_states_total_bytes", num_json(max_states)},
                {"peak_tracked_bytes", num_json(max_peak)},
                {"estimate_peak_bytes", num_json(max_est)},
                {"host_model_states_total_bytes", num_json(max_host)}}}};
  return {doc, max_states, max_peak, max_est};
}

json comm_of(const RunReport& report, const std::vector<const RunReport*>& ok_runs) {
  json ranks = json::array();
  for (const auto& r : report.rank_records()) {
    json kinds = json::object();
    double bytes = 0, count = 0, time = 0;
    for (const auto& [kind, c] : r.comm) {
      const double b = double(c.bytes), n = double(c.count), t = num(c.time_s);
      kinds[kind] = {{"count", num_json(n)}, {"bytes", num_json(b)}, {"time_s", num_json(t)}};
      if (std::isfinite(b)) bytes += b;
      if (std::isfinite(n)) count += n;
      if (std::isfinite(t)) time += t;
    }
    ranks.push_back({{"rank", r.rank},
                     {"kinds", kinds},
                     {"count_per_step", count},
                     {"bytes_per_step", bytes},
                     {"time_s_per_step", time}});
  }
  std::vector<double> exposed, overlap;
  for (const RunReport* run : ok_runs) {
    if (!run->profile) continue;
    if (const double e = num(run->profile->exposed_comm_s); std::isfinite(e)) exposed.push_back(e);
    if (const double o = num(run->profile->overlap_ratio); std::isfinite(o)) overlap.push_back(o);
  }
  return {{"ranks", ranks},
          {"profiled", !exposed.empty()},
          {"exposed_comm_s", interval_json(exposed)},
          {"overlap_ratio", interval_json(overlap)}};
}

// The model-state categories compared by name (ranks[i].memory.model_states_bytes, typed).
struct Category {
  const char* name;
  std::optional<int64_t> (*of)(const reports::ModelStates&);
};
const Category kCategories[] = {
    {"params", [](const reports::ModelStates& m) -> std::optional<int64_t> { return m.params; }},
    {"master_params", [](const reports::ModelStates& m) -> std::optional<int64_t> { return m.master_params; }},
    {"grads", [](const reports::ModelStates& m) -> std::optional<int64_t> { return m.grads; }},
    {"optimizer", [](const reports::ModelStates& m) -> std::optional<int64_t> { return m.optimizer; }},
    {"buffers", [](const reports::ModelStates& m) -> std::optional<int64_t> { return m.buffers; }}};

// A category's bytes on the rank holding the most of it (NaN when no rank reports it).
double category_max(const RunReport& report, const Category& category) {
  double m = kNaN;
  for (const auto& r : report.rank_records())
    if (const auto v = category.of(r.memory.model_states_bytes)) m = std::isfinite(m) ? std::max(m, double(*v)) : double(*v);
  return m;
}

double ratio(double a, double b) { return std::isfinite(a) && std::isfinite(b) && b != 0 ? a / b : kNaN; }
}  // namespace

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double m = kNaN;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) continue;
    const double d = std::abs(a[i] - b[i]) / std::max(std::abs(a[i]), 1e-30);
    m = std::isfinite(m) ? std::max(m, d) : d;
  }
  return m;
}

json analyse(const std::vector<SideRuns>& sides, const json& workload, int repeat) {
  json out = {
      {"schema", {{"name", "zerobench.compare"}, {"version", 1}}},
      {"workload", workload},
      {"repeat", repeat},
      {"interval", {{"method", "order statistics of the sample (distribution-free median interval)"}, {"level", 0.95}}},
      {"baseline", sides.empty() ? "" : sides.front().label},
      {"sides", json::array()},
      {"comparisons", json::array()}};
  // Every run as the typed record (nullopt: no report).
  std::vector<std::vector<Run>> typed(sides.size());
  for (size_t s = 0; s < sides.size(); ++s)
    for (const json& r : sides[s].runs)
      typed[s].push_back(r.is_object() ? Run(reports::run_report_from_json(r)) : std::nullopt);
  std::vector<const RunReport*> first_ok(sides.size(), nullptr);  // each side's first successful report (curves, memory, config)
  std::vector<Memory> memory(sides.size());                       // of first_ok
  std::vector<std::vector<double>> tok(sides.size()), step(sides.size());  // per round, NaN if not ok
  for (size_t s = 0; s < sides.size(); ++s) {
    const auto& side = sides[s];
    json runs = json::array();
    std::vector<double> t_ok, st_ok, mfu_ok, mfu6_ok;
    std::vector<const RunReport*> ok_runs;
    for (size_t i = 0; i < side.runs.size(); ++i) {
      const Run& r = typed[s][i];
      const bool good = ok(r);
      const reports::Summary* sum = r && r->summary ? &*r->summary : nullptr;
      const double t = sum ? sum->tokens_per_gpu_per_s.median : kNaN, st = sum ? sum->step_time_s.median : kNaN;
      const double mfu = sum ? sum->mfu : kNaN, mfu6 = sum ? sum->mfu_6n : kNaN;
      const reports::Profile* prof = r && r->profile ? &*r->profile : nullptr;
      tok[s].push_back(good ? t : kNaN);
      step[s].push_back(good ? st : kNaN);
      std::string state = "missing", error = "no report";
      if (r) {
        state = r->status.state;
        error = r->status.error;
      }
      runs.push_back({{"round", int(i) + 1},
                      {"report", i < side.report_files.size() ? side.report_files[i] : ""},
                      {"state", state},
                      {"error", error},
                      {"tokens_per_gpu_per_s", num_json(t)},
                      {"step_time_s", num_json(st)},
                      {"mfu", num_json(mfu)},
                      {"mfu_6n", num_json(mfu6)},
                      {"exposed_comm_s", num_json(prof ? num(prof->exposed_comm_s) : kNaN)},
                      {"overlap_ratio", num_json(prof ? num(prof->overlap_ratio) : kNaN)}});
      if (!good) continue;
      if (!first_ok[s]) first_ok[s] = &*r;
      ok_runs.push_back(&*r);
      if (std::isfinite(t)) t_ok.push_back(t);
      if (std::isfinite(st)) st_ok.push_back(st);
      if (std::isfinite(mfu)) mfu_ok.push_back(mfu);
      if (std::isfinite(mfu6)) mfu6_ok.push_back(mfu6);
    }
    const RunReport* rep = first_ok[s];
    json entry = {{"label", side.label},
                  {"spec", side.spec},
                  {"runs", runs},
                  {"ok_runs", int(ok_runs.size())},
                  {"failed_runs", int(side.runs.size() - ok_runs.size())},
                  {"throughput",
                   {{"tokens_per_gpu_per_s", interval_json(t_ok)},
                    {"step_time_s", interval_json(st_ok)},
                    {"mfu", interval_json(mfu_ok)},
                    {"mfu_6n", interval_json(mfu6_ok)}}}};
    if (rep) {
      const reports::RunConfig& config = rep->config;
      entry["backend"] = config.backend ? config.backend->name.value_or("") : "";
      entry["precision"] = config.backend ? config.backend->precision.value_or("") : "";
      // Table 2 comes only from the report's own typed plan; absent: null (rendered "—").
      entry["precision_plan"] = config.precision_plan ? reports::to_json(*config.precision_plan) : json(nullptr);
      const reports::TrainConfig train = config.train ? *config.train : reports::TrainConfig{};
      entry["train"] = {{"micro_batch", num_json(num(train.micro_batch))},
                        {"grad_accum", num_json(num(train.grad_accum))},
                        {"seq_len", num_json(num(train.seq_len))},
                        {"tokens_per_rank_per_step",
                         num_json(rep->summary ? double(rep->summary->tokens_per_rank_per_step) : kNaN)}};
      entry["provenance"] = {{"source_files", config.source_files.value_or(json::array())},
                             {"applied", config.applied.value_or(json::array())},
                             {"ignored", config.ignored.value_or(json::array())},
                             {"warnings", config.warnings ? json(*config.warnings) : json::array()}};
      memory[s] = memory_of(*rep);
      entry["memory"] = memory[s].doc;
      entry["comm"] = comm_of(*rep, ok_runs);
      const auto loss = series(*rep, &reports::StepRecord::loss), gn = series(*rep, &reports::StepRecord::grad_norm);
      json steps = json::array();
      for (const auto& st : rep->step_records()) steps.push_back(st.step);
      json l = json::array(), g = json::array();
      for (double v : loss) l.push_back(num_json(v));
      for (double v : gn) g.push_back(num_json(v));
      // Repetitions train the same seed and data: their curves should be identical; say if not.
      double across = kNaN;
      for (const RunReport* r : ok_runs)
        for (const auto key : {&reports::StepRecord::loss, &reports::StepRecord::grad_norm}) {
          const double d = max_relative_difference(series(*rep, key), series(*r, key));
          if (std::isfinite(d)) across = std::isfinite(across) ? std::max(across, d) : d;
        }
      entry["curves"] = {{"step", steps},
                         {"loss", l},
                         {"grad_norm", g},
                         {"round", 1 + int(std::find_if(typed[s].begin(), typed[s].end(), ok) - typed[s].begin())},
                         {"max_rel_diff_across_rounds", num_json(ok_runs.size() > 1 ? across : kNaN)},
                         {"identical_across_rounds", ok_runs.size() > 1 ? json(across == 0) : json(nullptr)}};
    } else {
      entry["precision_plan"] = nullptr;
    }
    out["sides"].push_back(entry);
  }
  // Paired B-vs-A ratios: round i of each side ran next to round i of the baseline.
  for (size_t s = 1; s < sides.size(); ++s) {
    std::vector<double> tr, sr;
    for (size_t i = 0; i < std::min(tok[0].size(), tok[s].size()); ++i) {
      const double t = ratio(tok[s][i], tok[0][i]), st = ratio(step[s][i], step[0][i]);
      if (std::isfinite(t)) tr.push_back(t);
      if (std::isfinite(st)) sr.push_back(st);
    }
    const RunReport* a = first_ok[0];
    const RunReport* b = first_ok[s];
    json c = {{"side", sides[s].label},
              {"baseline", sides[0].label},
              {"paired_rounds", int(tr.size())},
              {"throughput_ratio", interval_json(tr)},
              {"step_time_ratio", interval_json(sr)}};
    const auto ti = reports::median_interval(tr);
    c["throughput_change_pct"] = {{"median", num_json((ti.median - 1) * 100)},
                                  {"lo", num_json((ti.lo - 1) * 100)},
                                  {"hi", num_json((ti.hi - 1) * 100)}};
    c["beyond_noise"] = ti.n >= 2 && (ti.lo > 1 || ti.hi < 1);
    if (a && b) {
      const Memory &ma = memory[0], &mb = memory[s];
      c["model_states_ratio"] = num_json(ratio(mb.max_states, ma.max_states));
      c["peak_tracked_ratio"] = num_json(ratio(mb.max_peak, ma.max_peak));
      c["estimate_peak_ratio"] = num_json(ratio(mb.max_est, ma.max_est));
      // The category whose bytes differ most (rank holding the most of it, each side).
      std::string largest;
      double delta = 0;
      for (const Category& cat : kCategories) {
        const double d = category_max(*b, cat) - category_max(*a, cat);
        if (std::isfinite(d) && std::abs(d) > std::abs(delta)) delta = d, largest = cat.name;
      }
      c["largest_category_difference"] = {{"category", largest}, {"delta_bytes", delta}};
      // Master weights kept on the device or, offloaded, on the host: both keep them.
      const auto keeps_master = [](const RunReport& r) {
        for (const auto& rk : r.rank_records()) {
          const auto& m = rk.memory.model_states_bytes;
          if (m.master_params > 0 || (m.host && m.host->master_params.value_or(0) > 0)) return true;
        }
        return false;
      };
      c["keeps_master"] = {{"side", keeps_master(*b)}, {"baseline", keeps_master(*a)}};
    }
    if (a && b) {  // the curves of each side's first successful run
      const auto la = series(*a, &reports::StepRecord::loss), lb = series(*b, &reports::StepRecord::loss);
      const auto ga = series(*a, &reports::StepRecord::grad_norm), gb = series(*b, &reports::StepRecord::grad_norm);
      c["loss_max_rel_diff"] = num_json(max_relative_difference(la, lb));
      c["grad_norm_max_rel_diff"] = num_json(max_relative_difference(ga, gb));
      c["steps_compared"] = int(std::min(la.size(), lb.size()));
    }
    out["comparisons"].push_back(c);
  }
  std::vector<const reports::RunConfig*> configs;
  for (size_t s = 0; s < sides.size(); ++s) configs.push_back(first_ok[s] ? &first_ok[s]->config : nullptr);
  out["config_differences"] = config_differences(configs);
  json workload_keys = json::array();
  for (const auto& d : out["config_differences"])
    if (d["workload"].get<bool>()) workload_keys.push_back(d["key"]);
  out["workload_differences"] = workload_keys;
  return out;
}

}  // namespace zb::bench::compare
