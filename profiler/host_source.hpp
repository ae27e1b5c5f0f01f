// host_source.hpp — the profile's activity on a CPU (Gloo) run, where there are no kernels to
// trace: each collective from issue to completion on Gloo's worker threads is communication,
// and the training thread, whenever it is not blocked waiting on a collective, is compute.
// Exposed communication is then exactly the time the training thread sat in wait().
#pragma once
#include <string>
#include <vector>

#include "profiler/activity.hpp"
#include "profiler/analysis.hpp"

namespace zb::profiler {

struct HostCollective {
  std::string name;  // "all_gather unit3"
  int64_t issue_ns = 0, complete_ns = 0;
  int64_t wait_start_ns = 0, wait_end_ns = 0;
  int64_t bytes = 0;
};

std::vector<Activity> host_activities(const std::vector<HostCollective>& collectives,
                                      const std::vector<StepWindow>& windows);

}  // namespace zb::profiler
