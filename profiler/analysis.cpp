// analysis.cpp — the profile metrics (see analysis.hpp); the interval arithmetic is intervals.hpp.
#include "profiler/analysis.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace zb::profiler {

namespace {
bool clip(const Activity& a, const StepWindow& w, Interval* out) {
  const int64_t lo = std::max(a.start_ns, w.start_ns), hi = std::min(a.end_ns, w.end_ns);
  if (hi <= lo) return false;
  *out = {lo, hi};
  return true;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

StepProfile analyze_step(const std::vector<Activity>& activities, const StepWindow& w) {
  StepProfile p;
  p.step = w.step;
  p.window_ns = std::max<int64_t>(0, w.end_ns - w.start_ns);
  std::vector<Interval> all, compute, comm;
  for (const auto& a : activities) {
    const auto cls = classify(a);
    if (cls == KernelClass::kNotKernel) continue;
    Interval i;
    if (!clip(a, w, &i)) continue;
    all.push_back(i);
    if (is_compute(cls)) compute.push_back(i);
    if (cls == KernelClass::kCommunication) comm.push_back(i);
    auto& c = p.by_class[cls];
    c.count += 1;
    c.total_ns += i.second - i.first;
  }
  const auto all_u = interval_union(std::move(all)), compute_u = interval_union(std::move(compute)),
             comm_u = interval_union(std::move(comm));
  p.busy_ns = covered_ns(all_u);
  p.compute_ns = covered_ns(compute_u);
  p.non_compute_ns = p.busy_ns - p.compute_ns;
  p.idle_ns = p.window_ns - p.busy_ns;
  p.comm_ns = covered_ns(comm_u);
  p.comm_overlapped_ns = intersection_ns(comm_u, compute_u);
  p.exposed_comm_ns = p.comm_ns - p.comm_overlapped_ns;
  return p;
}

std::vector<KernelSummary> top_kernels(const std::vector<Activity>& activities, const std::vector<StepWindow>& windows,
                                       size_t k) {
  std::map<std::string, KernelSummary> by_name;
  for (const auto& a : activities) {
    const auto cls = classify(a);
    if (cls == KernelClass::kNotKernel || cls == KernelClass::kHostCompute) continue;
    for (const auto& w : windows) {
      Interval i;
      if (!clip(a, w, &i)) continue;
      auto& s = by_name[a.name];
      s.name = a.name;
      s.cls = cls;
      s.count += 1;
      s.total_ns += i.second - i.first;
      break;
    }
  }
  std::vector<KernelSummary> out;
  for (auto& [name, s] : by_name) out.push_back(std::move(s));
  std::sort(out.begin(), out.end(), [](const KernelSummary& a, const KernelSummary& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  if (out.size() > k) out.resize(k);
  return out;
}

reports::ProfileStep step_record(const StepProfile& p) {
  auto s = [](int64_t ns) { return double(ns) / 1e9; };
  reports::ProfileStep r;
  r.step = p.step;
  r.window_s = s(p.window_ns);
  r.compute_s = s(p.compute_ns);
  r.non_compute_s = s(p.non_compute_ns);
  r.idle_s = s(p.idle_ns);
  r.comm_s = s(p.comm_ns);
  r.comm_overlapped_s = s(p.comm_overlapped_ns);
  r.exposed_comm_s = s(p.exposed_comm_ns);
  r.overlap_ratio = p.overlap_ratio();
  for (const auto& [cls, t] : p.by_class) r.by_class[kernel_class_name(cls)] = {t.count, s(t.total_ns), {}};
  return r;
}

UnitTimes unit_times(const std::vector<Activity>& activities, const StepWindow& w) {
  // What counts as compute: host compute spans, else compute kernels by their launch time.
  std::vector<Interval> host_compute;
  std::map<int64_t, int64_t> launch_of;  // correlation -> runtime call start
  for (const auto& a : activities) {
    if (a.kind == ActivityKind::kHostCompute) {
      Interval i;
      if (clip(a, w, &i)) host_compute.push_back(i);
    } else if (a.kind == ActivityKind::kRuntime && a.correlation != 0) {
      launch_of[a.correlation] = a.start_ns;
    }
  }
  const auto host_u = interval_union(std::move(host_compute));
  const bool host = !host_u.empty();
  std::vector<std::pair<int64_t, Interval>> kernels;  // (launch time, interval)
  if (!host)
    for (const auto& a : activities) {
      if (!is_compute(classify(a)) || a.kind == ActivityKind::kHostCompute) continue;
      auto it = launch_of.find(a.correlation);
      if (it != launch_of.end()) kernels.push_back({it->second, {a.start_ns, a.end_ns}});
    }
  auto compute_in = [&](const Interval& r) -> double {
    if (host) return double(intersection_ns(host_u, {r})) / 1e9;
    std::vector<Interval> mine;
    for (const auto& [launch, k] : kernels)
      if (launch >= r.first && launch <= r.second) mine.push_back(k);
    return double(covered_ns(interval_union(std::move(mine)))) / 1e9;
  };
  UnitTimes t;
  t.window_s = double(w.end_ns - w.start_ns) / 1e9;
  std::map<int, double> fwd, bwd;
  std::vector<Interval> passes[2], blocks[2];  // forward/backward ranges and their blocks' ranges
  for (const auto& a : activities) {
    if (a.kind != ActivityKind::kRange || a.start_ns < w.start_ns || a.start_ns > w.end_ns) continue;
    const Interval r{a.start_ns, std::min(a.end_ns, w.end_ns)};
    if (a.name == "forward") {
      t.forward_total_s += compute_in(r);
      passes[0].push_back(r);
    } else if (a.name == "backward") {
      t.backward_total_s += compute_in(r);
      passes[1].push_back(r);
    } else if (a.name == "optimizer_step") {
      t.optimizer_s += compute_in(r);
    } else {
      for (int pass = 0; pass < 2; ++pass) {
        const std::string prefix = pass == 0 ? "forward unit" : "backward unit";
        if (a.name.rfind(prefix, 0) != 0) continue;
        const int u = std::atoi(a.name.c_str() + prefix.size());
        if (u < 1) continue;  // the root's ranges nest the blocks': taken as the rest
        (pass == 0 ? fwd : bwd)[u] += compute_in(r);
        blocks[pass].push_back(r);
      }
    }
  }
  // Where the root's compute runs: before the first block range of each forward, after the
  // last block range of each backward.
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& p : passes[pass]) {
      int64_t first = p.second, last = p.first;
      for (const auto& b : blocks[pass])
        if (b.first >= p.first && b.first <= p.second) {
          first = std::min(first, b.first);
          last = std::max(last, b.second);
        }
      if (first > last) continue;  // no block ranges (ddp): nothing to split
      if (pass == 0) t.root_forward_pre_s += compute_in({p.first, first});
      else t.root_backward_post_s += compute_in({last, p.second});
    }
  int units = 1;
  for (const auto* m : {&fwd, &bwd})
    if (!m->empty()) units = std::max(units, m->rbegin()->first + 1);
  t.forward_s.assign(size_t(units), 0.0);
  t.backward_s.assign(size_t(units), 0.0);
  double fwd_blocks = 0, bwd_blocks = 0;
  for (const auto& [u, v] : fwd) {
    t.forward_s[size_t(u)] = v;
    fwd_blocks += v;
  }
  for (const auto& [u, v] : bwd) {
    t.backward_s[size_t(u)] = v;
    bwd_blocks += v;
  }
  t.forward_s[0] = std::max(0.0, t.forward_total_s - fwd_blocks);
  t.backward_s[0] = std::max(0.0, t.backward_total_s - bwd_blocks);
  t.other_s = std::max(0.0, compute_in({w.start_ns, w.end_ns}) - t.forward_total_s - t.backward_total_s - t.optimizer_s);
  return t;
}

reports::ProfileUnits units_record(const UnitTimes& t) {
  reports::ProfileUnits u;
  u.forward_s = t.forward_s;
  u.backward_s = t.backward_s;
  u.forward_total_s = t.forward_total_s;
  u.backward_total_s = t.backward_total_s;
  u.optimizer_s = t.optimizer_s;
  u.window_s = t.window_s;
  u.other_s = t.other_s;
  u.root_forward_pre_s = t.root_forward_pre_s;
  u.root_backward_post_s = t.root_backward_post_s;
  return u;
}

reports::RankProfile rank_profile(const std::vector<Activity>& activities, const std::vector<StepWindow>& windows,
                                  size_t top_k) {
  reports::RankProfile out;
  std::vector<UnitTimes> per_step;
  for (const auto& w : windows) per_step.push_back(unit_times(activities, w));
  for (const auto& w : windows) out.steps.push_back(step_record(analyze_step(activities, w)));
  // The median over steps of each time (and the overlap ratio); the shares of the median window.
  using S = reports::ProfileStep;
  using B = reports::ProfileBreakdown;
  const std::pair<double S::*, double B::*> columns[] = {
      {&S::window_s, &B::window_s},       {&S::compute_s, &B::compute_s},
      {&S::non_compute_s, &B::non_compute_s}, {&S::idle_s, &B::idle_s},
      {&S::comm_s, &B::comm_s},           {&S::comm_overlapped_s, &B::comm_overlapped_s},
      {&S::exposed_comm_s, &B::exposed_comm_s}, {&S::overlap_ratio, &B::overlap_ratio}};
  auto& med = out.median;
  for (const auto& [step_field, median_field] : columns) {
    std::vector<double> v;
    for (const auto& st : out.steps) v.push_back(st.*step_field);
    med.*median_field = median(v);
  }
  const double window = med.window_s;
  med.compute_pct = window > 0 ? 100.0 * med.compute_s / window : 0.0;
  med.non_compute_pct = window > 0 ? 100.0 * med.non_compute_s / window : 0.0;
  med.idle_pct = window > 0 ? 100.0 * med.idle_s / window : 0.0;
  int64_t kernel_total = 0;
  const auto top = top_kernels(activities, windows, std::numeric_limits<size_t>::max());
  for (const auto& t : top) kernel_total += t.total_ns;
  for (size_t i = 0; i < std::min(top_k, top.size()); ++i) {
    const auto& t = top[i];
    reports::ProfileKernel k;
    k.name = t.name;
    k.kernel_class = kernel_class_name(t.cls);
    k.count = t.count;
    k.time_s = double(t.total_ns) / 1e9;
    k.pct_of_kernel_time = kernel_total > 0 ? 100.0 * double(t.total_ns) / double(kernel_total) : 0.0;
    out.top_kernels.push_back(std::move(k));
  }
  // Units: the median over steps of each field (and of each unit's entry).
  UnitTimes units;
  if (!per_step.empty()) {
    size_t n = 0;
    for (const auto& u : per_step) n = std::max(n, u.forward_s.size());
    auto med_of = [&](auto get) {
      std::vector<double> v;
      for (const auto& u : per_step) v.push_back(get(u));
      return median(v);
    };
    for (size_t i = 0; i < n; ++i) {
      units.forward_s.push_back(med_of([i](const UnitTimes& u) { return i < u.forward_s.size() ? u.forward_s[i] : 0.0; }));
      units.backward_s.push_back(med_of([i](const UnitTimes& u) { return i < u.backward_s.size() ? u.backward_s[i] : 0.0; }));
    }
    units.forward_total_s = med_of([](const UnitTimes& u) { return u.forward_total_s; });
    units.backward_total_s = med_of([](const UnitTimes& u) { return u.backward_total_s; });
    units.optimizer_s = med_of([](const UnitTimes& u) { return u.optimizer_s; });
    units.window_s = med_of([](const UnitTimes& u) { return u.window_s; });
    units.other_s = med_of([](const UnitTimes& u) { return u.other_s; });
    units.root_forward_pre_s = med_of([](const UnitTimes& u) { return u.root_forward_pre_s; });
    units.root_backward_post_s = med_of([](const UnitTimes& u) { return u.root_backward_post_s; });
  }
  out.units = units_record(units);
  return out;
}

}  // namespace zb::profiler
