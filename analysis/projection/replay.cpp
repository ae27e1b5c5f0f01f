// replay.cpp — a measured run's trace replayed through its schedule (see replay.hpp).
#include "analysis/projection/replay.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "profiler/analysis.hpp"
#include "profiler/chrome_trace.hpp"
#include "runtime/errors.hpp"

namespace zb::analysis::projection {

namespace {
using json = nlohmann::json;

int64_t ns_of_us(const json& v) { return int64_t(std::llround(v.get<double>() * 1e3)); }

bool kind_named(const std::string& name, CollectiveKind* out) {
  for (int k = 0; k < int(CollectiveKind::kCount); ++k)
    if (name == backends::common::collective_name(CollectiveKind(k))) {
      *out = CollectiveKind(k);
      return true;
    }
  return false;
}

// A trace's complete events back into the profiler's activities, per rank (pid). The lanes are
// chrome_trace.hpp's: NVTX ranges, the training thread's compute spans, collectives in flight.
std::map<int, std::vector<profiler::Activity>> activities_by_rank(const json& trace) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    throw UsageError("replay: the trace has no traceEvents array (write one with `zerobench run --trace FILE`)");
  std::map<int, std::vector<profiler::Activity>> out;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    profiler::Activity a;
    const int64_t tid = e.value("tid", int64_t(-1));
    if (tid == profiler::kTidNvtx) a.kind = profiler::ActivityKind::kRange;
    else if (tid == profiler::kTidHostCompute) a.kind = profiler::ActivityKind::kHostCompute;
    else if (tid == profiler::kTidCollectives) a.kind = profiler::ActivityKind::kCollective;
    else continue;
    a.name = e.value("name", "");
    a.start_ns = ns_of_us(e.at("ts"));
    a.end_ns = a.start_ns + ns_of_us(e.at("dur"));
    if (e.contains("args")) a.bytes = e["args"].value("bytes", int64_t(0));
    out[e.value("pid", 0)].push_back(std::move(a));
  }
  return out;
}
}  // namespace

std::vector<TracedStep> traced_steps(const json& trace, int64_t grad_accum) {
  using profiler::ActivityKind;
  using profiler::Interval;
  std::vector<TracedStep> out;
  for (auto& [rank, acts] : activities_by_rank(trace)) {
    // Each collective's issue call: the NVTX range of its name around its issue time (comm.cpp
    // opens "<kind> <label>" around the process group call). The training thread's time in it
    // is the call's, not the unit's: taken out of the compute spans before unit_times.
    std::vector<Interval> host, calls;
    for (const auto& a : acts)
      if (a.kind == ActivityKind::kHostCompute) host.push_back({a.start_ns, a.end_ns});
    host = profiler::interval_union(std::move(host));
    std::map<const profiler::Activity*, double> call_s;
    for (const auto& c : acts) {
      if (c.kind != ActivityKind::kCollective) continue;
      for (const auto& r : acts)
        if (r.kind == ActivityKind::kRange && r.name == c.name && r.start_ns <= c.start_ns && c.start_ns <= r.end_ns) {
          calls.push_back({r.start_ns, r.end_ns});
          call_s[&c] = double(profiler::intersection_ns(host, {{r.start_ns, r.end_ns}})) / 1e9;
          break;
        }
    }
    calls = profiler::interval_union(std::move(calls));
    std::vector<profiler::Activity> units_in;  // the activities with the issue calls taken out of compute
    for (const auto& a : acts) {
      if (a.kind != ActivityKind::kHostCompute) {
        units_in.push_back(a);
        continue;
      }
      for (const auto& piece : profiler::subtract({a.start_ns, a.end_ns}, calls)) {
        auto p = a;
        p.start_ns = piece.first;
        p.end_ns = piece.second;
        units_in.push_back(p);
      }
    }
    std::vector<Interval> compute;  // the training thread's compute, issue calls taken out
    for (const auto& a : units_in)
      if (a.kind == ActivityKind::kHostCompute) compute.push_back({a.start_ns, a.end_ns});
    compute = profiler::interval_union(std::move(compute));
    // The innermost block range (unit >= 1) an issue falls in.
    auto block_of = [&](int64_t t) -> const profiler::Activity* {
      const profiler::Activity* best = nullptr;
      for (const auto& r : acts) {
        if (r.kind != ActivityKind::kRange || r.start_ns > t || t > r.end_ns) continue;
        const bool fwd = r.name.rfind("forward unit", 0) == 0, bwd = r.name.rfind("backward unit", 0) == 0;
        if (!fwd && !bwd) continue;
        if (std::atoi(r.name.c_str() + (fwd ? 12 : 13)) < 1) continue;
        if (!best || r.start_ns > best->start_ns) best = &r;
      }
      return best;
    };
    // The trainer's window of step N: the training thread's compute spans are the window minus
    // the time blocked in wait() (host_source.cpp), so the window runs from the first span in
    // the step's NVTX range to the last (no step starts or ends blocked).
    for (const auto& r : acts) {
      if (r.kind != ActivityKind::kRange || r.name.rfind("step ", 0) != 0) continue;
      profiler::StepWindow w{std::atoll(r.name.c_str() + 5), INT64_MAX, INT64_MIN};
      for (const auto& a : acts)
        if (a.kind == ActivityKind::kHostCompute && a.start_ns >= r.start_ns && a.end_ns <= r.end_ns) {
          w.start_ns = std::min(w.start_ns, a.start_ns);
          w.end_ns = std::max(w.end_ns, a.end_ns);
        }
      if (w.end_ns <= w.start_ns) continue;
      TracedStep s;
      s.rank = rank;
      s.step = w.step;
      s.window_s = double(w.end_ns - w.start_ns) / 1e9;
      const auto u = profiler::unit_times(units_in, w);  // the profile's own per-unit compute
      for (double v : u.forward_s) s.costs.forward_s.push_back(v / double(grad_accum));
      for (double v : u.backward_s) s.costs.backward_s.push_back(v / double(grad_accum));
      s.costs.root_forward_pre_s = u.root_forward_pre_s / double(grad_accum);
      s.costs.root_backward_post_s = u.root_backward_post_s / double(grad_accum);
      s.costs.optimizer_s = u.optimizer_s;
      s.costs.other_s = u.other_s;
      for (const auto& a : acts) {
        if (a.kind != ActivityKind::kCollective || a.start_ns < w.start_ns || a.start_ns > w.end_ns) continue;
        TracedCollective c;
        const auto sp = a.name.find(' ');
        if (!kind_named(a.name.substr(0, sp), &c.kind))
          throw UsageError("replay: rank " + std::to_string(rank) + " traced a collective '" + a.name +
                           "' of no known kind");
        c.label = sp == std::string::npos ? "" : a.name.substr(sp + 1);
        c.bytes = a.bytes;
        c.issue_s = double(a.start_ns - w.start_ns) / 1e9;
        c.complete_s = double(a.end_ns - w.start_ns) / 1e9;
        auto it = call_s.find(&a);
        c.call_s = it == call_s.end() ? 0.0 : it->second;
        if (const auto* b = block_of(a.start_ns)) {
          c.block_range = b->name;
          c.block_compute_before_s = double(profiler::intersection_ns(compute, {{b->start_ns, a.start_ns}})) / 1e9;
        }
        s.collectives.push_back(c);
      }
      // A collective that completed while the thread was blocked (a gap in the compute spans)
      // is seen done when the thread runs again, at the gap's end: waking a thread on a busy
      // host takes time too, and which of them the thread waited for the trace does not say.
      for (auto& c : s.collectives) c.resumed_s = c.complete_s;
      for (const auto& gap : profiler::subtract({w.start_ns, w.end_ns}, host)) {
        const double lo = double(gap.first - w.start_ns) / 1e9, hi = double(gap.second - w.start_ns) / 1e9;
        for (auto& c : s.collectives)
          if (c.complete_s > lo && c.complete_s <= hi) c.resumed_s = hi;
      }
      std::stable_sort(s.collectives.begin(), s.collectives.end(),
                       [](const TracedCollective& a, const TracedCollective& b) { return a.issue_s < b.issue_s; });
      out.push_back(std::move(s));
    }
  }
  if (out.empty())
    throw UsageError("replay: the trace holds no traced CPU step (a `zerobench run --trace` file of a Gloo run: "
                     "NVTX step ranges and the training thread's compute spans)");
  return out;
}

ScheduleInput schedule_input_of_report(const reports::RunReport& r) {
  const reports::ModelConfig m = r.config.model.value_or(reports::ModelConfig{});
  ScheduleInput in;
  in.model.preset = m.preset.value_or("custom");
  in.model.layers = m.layers.value_or(0);
  in.model.hidden = m.hidden.value_or(0);
  in.model.heads = m.heads.value_or(0);
  in.model.kv_heads = m.kv_heads.value_or(0);
  in.model.ffn = m.ffn.value_or(0);
  in.model.vocab = m.vocab.value_or(0);
  in.model.rope_theta = m.rope_theta.value_or(10000.0);
  in.model.norm_eps = m.norm_eps.value_or(1e-5);
  in.model.validate();
  const reports::TrainConfig t = r.config.train.value_or(reports::TrainConfig{});
  in.train.micro_batch = t.micro_batch.value_or(1);
  in.train.seq_len = t.seq_len.value_or(1);
  in.train.grad_accum = t.grad_accum.value_or(1);
  in.train.activation_checkpointing = models::activation_checkpointing_of_report(
      t.activation_checkpointing_mode.value_or(""), t.activation_checkpointing.value_or(false));
  in.train.sync_each_batch = t.sync_each_batch.value_or(false);
  const reports::BackendConfig b = r.config.backend.value_or(reports::BackendConfig{});
  in.backend = b.name.value_or("");
  in.precision = b.precision.value_or("fp32");
  in.options = b.options && b.options->is_object() ? *b.options : json::object();
  in.world = r.env && r.env->world_size > 0 ? int(r.env->world_size) : 1;
  in.nodes = r.env && r.env->nodes > 0 ? int(r.env->nodes) : 1;
  return in;
}

ScheduleInput schedule_input_of_report(const json& r) { return schedule_input_of_report(reports::run_report_from_json(r)); }

Calibration zero_cost_calibration(int world) {
  Calibration none;
  none.source = "replay";
  none.pg_backend = "gloo";
  for (int k = 0; k < int(CollectiveKind::kCount); ++k) {
    CollectiveFit f;
    f.kind = CollectiveKind(k);
    f.world_size = world;
    none.fits.push_back(f);
  }
  return none;
}

ReplayedStep replay_step(const ScheduleInput& base, const TracedStep& s) {
  ScheduleInput in = base;
  in.costs = s.costs;
  in.exec = ExecModel::kHostIsDevice;
  return replay_program(build_program(in, zero_cost_calibration(in.world)), s);
}

namespace {
// Where inside a block its compute ran. A schedule that splits a block's compute over several
// actions (ZeRO3-mode: module by module, by FLOPs) places issues between them; the trace says
// how much of the block's compute ran before each such issue. The block's actions between two
// issues are scaled to that (the block's total and every action's order stay the schedule's).
// A block whose issues the trace does not place (or places out of order) keeps its split.
void anchor_block_splits(Program& p, const TracedStep& s) {
  const auto& acts = p.actions();
  size_t a = 0;
  while (a < acts.size()) {
    const auto& first = acts[a];
    const bool block = first.kind == Action::kCompute && first.name.size() > 1 &&
                       (first.name[0] == 'F' || first.name[0] == 'B') && std::atoi(first.name.c_str() + 1) >= 1;
    if (!block) {
      ++a;
      continue;
    }
    // The segment: this block's compute actions and what lies between them.
    const std::string name = first.name;
    const std::string range = std::string(name[0] == 'F' ? "forward unit" : "backward unit") + name.substr(1);
    size_t end = a, b = a;
    for (; b < acts.size(); ++b) {
      if (acts[b].kind == Action::kCompute && acts[b].name != name) break;
      if (acts[b].kind == Action::kCompute) end = b;
    }
    // Anchors: (program compute before the issue, traced compute before it), in order.
    std::vector<std::pair<size_t, double>> anchors;  // (action index of the issue, traced compute)
    double total = 0;
    bool usable = true;
    int coll = -1;
    for (size_t i = 0; i < a; ++i)
      if (acts[i].kind == Action::kIssue) ++coll;
    for (size_t i = a; i <= end; ++i) {
      if (acts[i].kind == Action::kCompute) total += acts[i].duration_s;
      if (acts[i].kind != Action::kIssue) continue;
      ++coll;
      const auto& c = s.collectives[size_t(coll)];
      if (c.block_range != range) {
        usable = false;
        break;
      }
      if (!anchors.empty() && c.block_compute_before_s < anchors.back().second) usable = false;
      anchors.push_back({i, c.block_compute_before_s});
    }
    if (usable && !anchors.empty() && anchors.back().second <= total) {
      anchors.push_back({end + 1, total});
      size_t from = a;
      double done_traced = 0;
      for (const auto& [upto, traced] : anchors) {
        double planned = 0;
        for (size_t i = from; i < upto; ++i)
          if (acts[i].kind == Action::kCompute) planned += acts[i].duration_s;
        const double want = traced - done_traced;
        if (planned > 0) {  // else no action here: its traced compute goes to the next ones
          for (size_t i = from; i < upto; ++i)
            if (acts[i].kind == Action::kCompute) p.set_duration(int(i), acts[i].duration_s * want / planned);
          done_traced = traced;
        }
        from = upto;
      }
    }
    a = b;
  }
}
}  // namespace

ReplayedStep replay_program(Program p, const TracedStep& s) {
  // Each collective's time on the comm lane, which runs one at a time in issue order
  // (simulate.hpp): from when it could start (issued, and the one before it done) to when it
  // completed.
  std::vector<double> lane_s;
  double lane_free = 0;
  for (const auto& c : s.collectives) {
    lane_s.push_back(std::max(0.0, c.resumed_s - std::max(c.issue_s + c.call_s, lane_free)));
    lane_free = std::max(lane_free, c.resumed_s);
  }
  size_t i = 0;
  for (size_t a = 0; a < p.actions().size(); ++a) {
    const auto& act = p.actions()[a];
    if (act.kind != Action::kIssue) continue;
    const std::string want = act.name + " (" + std::to_string(act.bytes) + " B)";
    if (i >= s.collectives.size())
      throw RunError("replay: rank " + std::to_string(s.rank) + " step " + std::to_string(s.step) + ": the schedule issues " +
                     want + " as collective #" + std::to_string(i) + " but the trace has only " +
                     std::to_string(s.collectives.size()));
    const auto& c = s.collectives[i];
    const std::string got = std::string(backends::common::collective_name(c.kind)) + " " + c.label + " (" +
                            std::to_string(c.bytes) + " B)";
    if (want != got)
      throw RunError("replay: rank " + std::to_string(s.rank) + " step " + std::to_string(s.step) + ": collective #" +
                     std::to_string(i) + " is " + want + " in the schedule but " + got + " in the trace");
    p.set_duration(int(a), lane_s[i]);
    p.set_issue_host_s(int(a), c.call_s);
    ++i;
  }
  if (i != s.collectives.size())
    throw RunError("replay: rank " + std::to_string(s.rank) + " step " + std::to_string(s.step) + ": the schedule issues " +
                   std::to_string(i) + " collectives, the trace " + std::to_string(s.collectives.size()));
  anchor_block_splits(p, s);
  const auto tl = simulate(p, ExecModel::kHostIsDevice);
  ReplayedStep out;
  out.rank = s.rank;
  out.step = s.step;
  out.measured_s = s.window_s;
  out.replayed_s = tl.step_s;
  out.compute_s = tl.compute_s;
  out.comm_s = tl.comm_s;
  out.exposed_comm_s = tl.exposed_comm_s;
  out.collectives = int(i);
  return out;
}

json replay(const reports::RunReport& report, const json& trace) {
  const auto in = schedule_input_of_report(report);
  const std::string pg = report.env && report.env->pg_backend ? *report.env->pg_backend : "";
  if (pg != "gloo")
    throw UsageError("replay: the report's run used " + (pg.empty() ? std::string("?") : pg) +
                     "; the replay reads a CPU (Gloo) trace");
  json steps = json::array();
  std::vector<double> errors;
  double worst = 0;
  for (const auto& s : traced_steps(trace, in.train.grad_accum)) {
    const auto r = replay_step(in, s);
    errors.push_back(r.error());
    worst = std::max(worst, std::abs(r.error()));
    steps.push_back({{"rank", r.rank},
                     {"step", r.step},
                     {"measured_s", r.measured_s},
                     {"replayed_s", r.replayed_s},
                     {"error", r.error()},
                     {"replayed_compute_s", r.compute_s},
                     {"replayed_comm_s", r.comm_s},
                     {"replayed_exposed_comm_s", r.exposed_comm_s},
                     {"collectives", r.collectives}});
  }
  std::sort(errors.begin(), errors.end());
  const size_t n = errors.size();
  const double median = n % 2 ? errors[n / 2] : 0.5 * (errors[n / 2 - 1] + errors[n / 2]);
  return {{"backend", in.backend},
          {"world_size", in.world},
          {"run_id", report.run_id},
          {"basis", "each traced step's own per-unit compute (profile unit_times) and collective lane times, "
                    "replayed through the projection's schedule at the run's world size"},
          {"steps", steps},
          {"median_error", median},
          {"max_abs_error", worst}};
}

json replay(const json& report, const json& trace) { return replay(reports::run_report_from_json(report), trace); }

}  // namespace zb::analysis::projection
