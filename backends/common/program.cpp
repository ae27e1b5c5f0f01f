// program.cpp — the program IR's builders (see program.hpp).
#include "backends/common/program.hpp"

#include "runtime/errors.hpp"

#include <algorithm>
#include <stdexcept>

namespace zb::backends::common {

int Program::compute(const std::string& name, double seconds) {
  Action a;
  a.kind = Action::kCompute;
  a.name = name;
  a.duration_s = std::max(0.0, seconds);
  actions_.push_back(a);
  return int(actions_.size()) - 1;
}

int Program::issue(CollectiveKind kind, const std::string& label, int64_t bytes, double seconds, bool after_compute,
                   int depends_on) {
  Action a;
  a.kind = Action::kIssue;
  a.name = std::string(collective_name(kind)) + " " + label;
  a.duration_s = std::max(0.0, seconds);
  a.coll = kind;
  a.bytes = bytes;
  a.after_compute = after_compute;
  a.depends_on = depends_on;
  a.target = collectives_;
  actions_.push_back(a);
  return collectives_++;
}

double OffloadRates::copy_s(bool to_device, int64_t bytes) const {
  const double gbps = to_device ? h2d_gbps : d2h_gbps;
  if (gbps <= 0)
    throw UsageError(std::string("projection of offload: the calibration has no ") + (to_device ? "h2d" : "d2h") +
                     " bandwidth (a preset's PCIe figure, or `zerobench micro` with its offload/ benchmarks)");
  return double(bytes) / (gbps * 1e9);
}

double OffloadRates::host_optimizer_s(int64_t elements) const {
  if (host_adam_ns_per_param <= 0)
    throw UsageError("projection of optimizer offload: the calibration has no host optimizer rate (run `zerobench "
                     "micro` on the host and pass its JSON: offload/host_adamw); presets have none");
  return double(elements) * host_adam_ns_per_param * 1e-9;
}

int Program::copy(bool to_device, const std::string& label, int64_t bytes, double seconds, bool after_compute,
                  int depends_on) {
  Action a;
  a.kind = Action::kCopy;
  a.name = std::string(to_device ? "h2d " : "d2h ") + label;
  a.duration_s = std::max(0.0, seconds);
  a.bytes = bytes;
  a.after_compute = after_compute;
  a.to_device = to_device;
  a.depends_on = depends_on;
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
  if (a.kind != Action::kCompute && a.kind != Action::kIssue && a.kind != Action::kCopy)
    throw std::logic_error("projection: only compute, issue and copy actions have a duration");
  a.duration_s = std::max(0.0, seconds);
}

void Program::set_issue_host_s(int action, double seconds) {
  auto& a = actions_.at(size_t(action));
  if (a.kind != Action::kIssue) throw std::logic_error("projection: only an issue action has a call time");
  a.host_s = std::max(0.0, seconds);
}

}  // namespace zb::backends::common
