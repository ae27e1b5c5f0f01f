// simulate.cpp — the two-lane replay (see simulate.hpp).
#include "bench/projection/simulate.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace zb::bench::projection {

int Program::compute(const std::string& name, double seconds) {
  Action a;
  a.kind = Action::kCompute;
  a.name = name;
  a.duration_s = std::max(0.0, seconds);
  actions_.push_back(a);
  return int(actions_.size()) - 1;
}

int Program::issue(backends::common::CollectiveKind kind, const std::string& label, int64_t bytes, double seconds,
                   bool after_compute) {
  Action a;
  a.kind = Action::kIssue;
  a.name = std::string(backends::common::collective_name(kind)) + " " + label;
  a.duration_s = std::max(0.0, seconds);
  a.coll = kind;
  a.bytes = bytes;
  a.after_compute = after_compute;
  a.target = collectives_;
  actions_.push_back(a);
  return collectives_++;
}

void Program::wait(int c) {
  Action a;
  a.kind = Action::kWait;
  a.target = c;
  actions_.push_back(a);
}

void Program::host_wait(int c) {
  Action a;
  a.kind = Action::kHostWait;
  a.target = c;
  actions_.push_back(a);
}

void Program::host_sync(int compute_action) {
  Action a;
  a.kind = Action::kHostSync;
  a.target = compute_action;
  actions_.push_back(a);
}

void Program::set_duration(int action, double seconds) {
  auto& a = actions_.at(size_t(action));
  if (a.kind != Action::kCompute && a.kind != Action::kIssue)
    throw std::logic_error("projection: only compute and issue actions have a duration");
  a.duration_s = std::max(0.0, seconds);
}

void Program::set_issue_host_s(int action, double seconds) {
  auto& a = actions_.at(size_t(action));
  if (a.kind != Action::kIssue) throw std::logic_error("projection: only an issue action has a call time");
  a.host_s = std::max(0.0, seconds);
}

namespace {
using Iv = std::pair<double, double>;
std::vector<Iv> merged(std::vector<Iv> v) {
  std::sort(v.begin(), v.end());
  std::vector<Iv> out;
  for (const auto& i : v) {
    if (i.second <= i.first) continue;
    if (!out.empty() && i.first <= out.back().second)
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return out;
}
double length(const std::vector<Iv>& v) {
  double s = 0;
  for (const auto& i : v) s += i.second - i.first;
  return s;
}
double overlap(const std::vector<Iv>& a, const std::vector<Iv>& b) {
  double s = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    if (a[i].second < b[j].second) ++i; else ++j;
  }
  return s;
}
}  // namespace

Timeline simulate(const Program& p, ExecModel model) {
  const bool cpu = model == ExecModel::kHostIsDevice;
  double host = 0;     // the training thread's clock (CPU: also the compute lane)
  double stream = 0;   // the compute stream's clock (CUDA)
  double comm_free = 0;
  std::vector<double> coll_end(size_t(p.collectives()), -1.0);
  std::vector<double> compute_end(p.actions().size(), 0.0);
  Timeline t;
  std::vector<Iv> compute_iv, comm_iv;
  auto done = [&](int c) {
    if (c < 0 || c >= int(coll_end.size()) || coll_end[size_t(c)] < 0)
      throw std::logic_error("projection: wait on a collective that was not issued");
    return coll_end[size_t(c)];
  };
  for (size_t i = 0; i < p.actions().size(); ++i) {
    const auto& a = p.actions()[i];
    switch (a.kind) {
      case Action::kCompute: {
        const double start = cpu ? host : std::max(stream, host);
        const double end = start + a.duration_s;
        if (cpu) host = end; else stream = end;
        compute_end[i] = end;
        if (a.duration_s > 0) {
          t.spans.push_back({a.name, false, start, end});
          compute_iv.push_back({start, end});
        }
        break;
      }
      case Action::kIssue: {
        if (a.host_s > 0) {  // the call keeps the host busy; the collective is queued at its end
          if (cpu) {
            t.spans.push_back({"issue " + a.name, false, host, host + a.host_s});
            compute_iv.push_back({host, host + a.host_s});
          }
          host += a.host_s;
        }
        const double ready = cpu ? host : std::max(host, a.after_compute ? stream : 0.0);
        const double start = std::max(comm_free, ready);
        const double end = start + a.duration_s;
        comm_free = end;
        coll_end[size_t(a.target)] = end;
        Span s{a.name, true, start, end, a.coll, a.bytes};
        t.spans.push_back(s);
        comm_iv.push_back({start, end});
        break;
      }
      case Action::kWait:
        if (cpu) host = std::max(host, done(a.target)); else stream = std::max(stream, done(a.target));
        break;
      case Action::kHostWait:
        host = std::max(host, done(a.target));
        if (cpu) break;
        break;
      case Action::kHostSync:
        if (!cpu) host = std::max(host, compute_end.at(size_t(a.target)));
        break;
    }
  }
  t.step_s = std::max({host, stream, comm_free});
  const auto cu = merged(compute_iv), co = merged(comm_iv);
  t.compute_s = length(cu);
  t.comm_s = length(co);
  t.comm_overlapped_s = overlap(co, cu);
  t.exposed_comm_s = t.comm_s - t.comm_overlapped_s;
  return t;
}

}  // namespace zb::bench::projection
