// program.hpp — one rank's training step as a host program: the IR the backends' projection
// programs build (backends/<x>/<x>_program.cpp) and analysis/projection/simulate replays on
// two lanes. Owns: the actions (compute, issue a collective, wait, host wait, host sync) and the
// two execution models they are read under. Must not: time anything (simulate.hpp does) or
// know any engine's schedule. Lives in backends/ so that a backend can build its own program
// without backends/ depending on analysis/.
//
// A program is what the training thread does, in order: compute (a unit's forward/backward,
// the optimizer), issue a collective, wait for one, or block the host on earlier compute. The
// comm lane runs collectives one at a time in issue order (one NCCL stream per process group;
// Gloo's work queue), each starting when issued and the lane is free. Offload's host<->device
// copies run on two more lanes, one per direction (kCopy).
//   kHostIsDevice (CPU, Gloo): the training thread computes, so an issue happens when the
//     preceding compute has finished, and a wait blocks everything after it.
//   kAsyncDevice (CUDA): the host runs ahead of the GPU. Compute runs on the compute stream in
//     order; an issue is ready at once (FSDP's unshard stream, DeepSpeed's all-gather stream)
//     or once the compute stream has reached the issue point (`after_compute`: the post-
//     backward / reduce-and-partition stream first waits for the compute stream); a wait makes
//     the compute stream wait for the collective; a host wait/sync blocks later issues.
#pragma once
#include <string>
#include <vector>

#include "backends/common/comm.hpp"

namespace zb::backends::common {

enum class ExecModel { kHostIsDevice, kAsyncDevice };

// Offload's costs (analysis/projection/calibration: measured by `zerobench micro`'s offload/*
// benchmarks, or a preset's PCIe figure): host<->device bandwidth per direction and the host
// optimizer's time per parameter element. 0 = unknown (a program that needs it refuses).
struct OffloadRates {
  double h2d_gbps = 0, d2h_gbps = 0;
  double host_adam_ns_per_param = 0;
  std::string basis;
  // Seconds to copy `bytes` one way; UsageError naming what the calibration lacks when unknown.
  double copy_s(bool to_device, int64_t bytes) const;
  // Seconds for the host optimizer over `elements`; UsageError when unknown.
  double host_optimizer_s(int64_t elements) const;
};

struct Action {
  enum Kind { kCompute, kIssue, kWait, kHostWait, kHostSync, kCopy } kind = kCompute;
  std::string name;            // "F3", "B3", "optimizer", or the collective's label ("all_gather unit3")
  double duration_s = 0;       // compute, or the issued collective's time
  int target = -1;             // wait/host_wait: collective id; host_sync: compute action index
  bool after_compute = false;  // issue: waits for the compute stream first (kAsyncDevice)
  CollectiveKind coll = CollectiveKind::kAllGather;
  int64_t bytes = 0;  // issue: nccl-tests size
  // issue: how long the call itself keeps the host before the collective is queued (Gloo's
  // reduce-scatter clones its input on the calling thread); 0 unless the replay measured it.
  double host_s = 0;
  bool to_device = true;  // copy: host -> device (else device -> host)
  int depends_on = -1;    // issue/copy: starts no earlier than this collective or copy ends (-1: none)
};

class Program {
 public:
  int compute(const std::string& name, double seconds);  // returns the action index
  // Returns the collective's id (for wait).
  // `depends_on`: a collective or copy id it is ordered after (its stream waited for it), -1 none.
  int issue(CollectiveKind kind, const std::string& label, int64_t bytes, double seconds, bool after_compute,
            int depends_on = -1);
  // Offload: a host<->device copy of `bytes` taking `seconds`, on its own copy lane (one per
  // direction, the GPU's copy engines); returns an id waited for like a collective's. On CPU
  // (kHostIsDevice) the training thread copies: the host is busy for `seconds`.
  int copy(bool to_device, const std::string& label, int64_t bytes, double seconds, bool after_compute,
           int depends_on = -1);
  void wait(int collective);           // compute waits for it (CPU: the host blocks)
  void host_wait(int collective);      // the host blocks until it is done
  void host_sync(int compute_action);  // the host blocks until that compute has run
  // Replaces a compute, issue or copy action's duration (a trace's times; a copy's measured time).
  void set_duration(int action, double seconds);
  // An issue action's call time on the host (Action::host_s).
  void set_issue_host_s(int action, double seconds);
  const std::vector<Action>& actions() const { return actions_; }
  int collectives() const { return collectives_; }

 private:
  std::vector<Action> actions_;
  int collectives_ = 0;
};

}  // namespace zb::backends::common
