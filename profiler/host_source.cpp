// host_source.cpp — see host_source.hpp.
#include "profiler/host_source.hpp"

namespace zb::profiler {

std::vector<Activity> host_activities(const std::vector<HostCollective>& collectives,
                                      const std::vector<StepWindow>& windows) {
  std::vector<Activity> out;
  std::vector<Interval> blocked;
  for (const auto& c : collectives) {
    Activity a;
    a.kind = ActivityKind::kCollective;
    a.name = c.name;
    a.start_ns = c.issue_ns;
    a.end_ns = c.complete_ns;
    a.bytes = c.bytes;
    out.push_back(std::move(a));
    blocked.push_back({c.wait_start_ns, c.wait_end_ns});
  }
  const auto holes = interval_union(std::move(blocked));
  for (const auto& w : windows) {
    for (const auto& span : subtract({w.start_ns, w.end_ns}, holes)) {
      Activity a;
      a.kind = ActivityKind::kHostCompute;
      a.name = "training thread";
      a.start_ns = span.first;
      a.end_ns = span.second;
      out.push_back(std::move(a));
    }
  }
  return out;
}

}  // namespace zb::profiler
