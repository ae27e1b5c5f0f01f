// simulate.cpp — the two-lane replay (see simulate.hpp).
#include "analysis/projection/simulate.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "profiler/intervals.hpp"

namespace zb::analysis::projection {

namespace {
using Iv = std::pair<double, double>;
}  // namespace

Timeline simulate(const Program& p, ExecModel model) {
  const bool cpu = model == ExecModel::kHostIsDevice;
  double host = 0;     // the training thread's clock (CPU: also the compute lane)
  double stream = 0;   // the compute stream's clock (CUDA)
  double comm_free = 0;
  double copy_free[2] = {0, 0};  // d2h, h2d copy engines
  std::vector<double> coll_end(size_t(p.collectives()), -1.0);
  std::vector<double> compute_end(p.actions().size(), 0.0);
  Timeline t;
  std::vector<Iv> compute_iv, comm_iv, copy_iv;
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
        double ready = cpu ? host : std::max(host, a.after_compute ? stream : 0.0);
        if (a.depends_on >= 0) ready = std::max(ready, done(a.depends_on));
        const double start = std::max(comm_free, ready);
        const double end = start + a.duration_s;
        comm_free = end;
        coll_end[size_t(a.target)] = end;
        Span s{a.name, true, start, end, a.coll, a.bytes};
        t.spans.push_back(s);
        comm_iv.push_back({start, end});
        break;
      }
      case Action::kCopy: {
        // CPU: the training thread copies (host busy, compute lane). CUDA: a copy engine, ready
        // at issue or once the compute stream reaches the issue point (after_compute).
        double ready = cpu ? host : std::max(host, a.after_compute ? stream : 0.0);
        if (a.depends_on >= 0) ready = std::max(ready, done(a.depends_on));
        double& lane = copy_free[a.to_device ? 1 : 0];
        const double start = cpu ? std::max(host, ready) : std::max(lane, ready);
        const double end = start + a.duration_s;
        if (cpu) host = end; else lane = end;
        coll_end[size_t(a.target)] = end;
        Span sp{a.name, false, start, end};
        sp.bytes = a.bytes;
        sp.copy = true;
        t.spans.push_back(sp);
        copy_iv.push_back({start, end});
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
  t.step_s = std::max({host, stream, comm_free, copy_free[0], copy_free[1]});
  const auto cu = profiler::union_of(std::move(compute_iv)), co = profiler::union_of(std::move(comm_iv));
  const auto cp = profiler::union_of(std::move(copy_iv));
  t.copy_s = profiler::covered_length(cp);
  t.exposed_copy_s = cpu ? t.copy_s : t.copy_s - profiler::intersection_length(cp, cu);
  t.compute_s = profiler::covered_length(cu);
  t.comm_s = profiler::covered_length(co);
  t.comm_overlapped_s = profiler::intersection_length(co, cu);
  t.exposed_comm_s = t.comm_s - t.comm_overlapped_s;
  return t;
}

}  // namespace zb::analysis::projection
