// comm.hpp — the collectives every engine calls, each counted (calls, bytes) and timed per kind.
// Owns: the byte convention (nccl-tests' "size": all-gather = output bytes, reduce-scatter =
// input bytes, all-reduce/broadcast = tensor bytes, all-to-all = send-buffer bytes), busbw factors, and the lifetime of tensors
// a collective in flight reads or writes (PendingCollective). Must not: choose what to
// communicate (engines do).
//
// Timing. `time_s` is the collective's own duration: on NCCL the device time between its start
// and end events (ProcessGroupNCCL collective timing, read by collect_device_times() after the
// step's device sync); on Gloo from issue to completion on Gloo's worker thread. `wait_s` is
// the time the calling thread spent blocked in wait(): the host-exposed part (on CUDA ~0, the
// wait is a stream dependency). Emulated collectives (--emulate-world-size) are not timed:
// they are local copies (on CUDA, kernels queued on the issuing stream, so a host clock from
// issue to wait would read launch latency); they are counted in `not_measured` and the report
// gives no time and no busbw for them. NCCL timing handles not yet read are bounded
// (kMaxTimingHandles): past the bound the completed ones are read at once, so a Comm whose
// collect_device_times() is never called (the side channel) does not grow without limit.
//
// Streams. Every collective is issued on the current stream of `streams()` (the engine makes a
// side stream current with Streams::Guard, as FSDP1 issues its all-gathers under
// `torch.cuda.stream(_unshard_stream)`); ProcessGroupNCCL makes its communicator stream wait for
// that stream, and wait() makes the then-current stream wait for the collective. The dependency
// log (streams().set_logging) records both.
//
// Memory. Every collective tells runtime/memory's program-order ledger when it is issued and
// waited: what the process group allocates for it (Gloo's input clone, its worker's flat
// all-gather output) are its comm buffers, held from issue to wait in the deterministic peak
// (runtime::program_peak_bytes). On Gloo the wait also takes back the work from Gloo's worker
// before releasing it, so tensors only the work still held are freed at the wait.
#pragma once
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/common/streams.hpp"
#include "runtime/world.hpp"

namespace zb::backends::common {

// kAllToAll is last so that the first four keep their indices (and report order).
enum class CollectiveKind { kAllGather = 0, kReduceScatter, kAllReduce, kBroadcast, kAllToAll, kCount };
const char* collective_name(CollectiveKind kind);
// nccl-tests bus-bandwidth factor: all-gather/reduce-scatter/all-to-all (W-1)/W, all-reduce
// 2(W-1)/W, broadcast 1.
double busbw_factor(CollectiveKind kind, int world_size);
// Whether a report lists `kind` even with no call: the first four always (reports written before
// all-to-all existed list exactly those), all_to_all only when a run issued one (ZeRO++ qgZ), so a
// report of a run without all-to-all is unchanged.
inline bool reported_when_unused(CollectiveKind kind) { return kind != CollectiveKind::kAllToAll; }

struct CollectiveStats {
  int64_t count = 0;
  int64_t bytes = 0;
  double time_s = 0;
  double wait_s = 0;
  int64_t untimed = 0;       // NCCL collectives whose device time could not be read (not in time_s)
  int64_t not_measured = 0;  // emulated collectives: no time is measured (not in time_s)
};

class Comm;

// Test-only (tests/test_gate_stability.cpp): ZEROBENCH_TEST_COMM_TIMING forces when collectives
// complete, leaving the program's order alone — `wait-at-issue`: every collective is waited for
// inside its issue call (complete before the caller goes on); `delay-issue:RANK:MS`: RANK sleeps
// MS ms before issuing each collective (its peers' collectives stay in flight that long). A bad
// value is a UsageError naming it.
struct CommTestTiming {
  bool wait_at_issue = false;
  int delay_rank = -1;
  int delay_ms = 0;
  static CommTestTiming from_env();
};

// One collective in flight. Holds references to its input and output until wait() returns —
// the held-reference approach of FSDP2: the caching allocator cannot hand their blocks to
// another allocation while the collective may still touch them, and after wait() every later
// use is ordered after the collective (on CUDA the current stream waits on NCCL's stream; on
// Gloo the calling thread blocked until completion). No record_stream is used. Destroying an
// unwaited handle waits (and swallows errors: destructors must not throw).
class PendingCollective {
 public:
  PendingCollective() = default;
  PendingCollective(PendingCollective&& other) noexcept { *this = std::move(other); }
  PendingCollective& operator=(PendingCollective&& other) noexcept;
  PendingCollective(const PendingCollective&) = delete;
  PendingCollective& operator=(const PendingCollective&) = delete;
  ~PendingCollective();

  bool pending() const { return comm_ != nullptr; }
  // The current stream waits for the collective (NCCL: a stream dependency; Gloo: the host
  // blocks until it completed). Idempotent.
  void wait();
  // Logs "stream `s` waits for this collective" without waiting (Streams::enqueue).
  void log_stream_wait(StreamId s) const;

 private:
  friend class Comm;
  Comm* comm_ = nullptr;
  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> held_;
  CollectiveKind kind_ = CollectiveKind::kAllGather;
  int64_t bytes_ = 0;
  std::string label_;
  int64_t log_entry_ = -1;  // its dependency-log entry
  double issued_s_ = 0;
  std::shared_ptr<std::atomic<double>> completed_s_;  // set by Gloo's future callback
  int64_t buffers_ = -1;  // its comm buffers in the program-order ledger (runtime/memory.hpp)
};

class Comm {
 public:
  explicit Comm(runtime::World world);
  ~Comm();  // runs work still queued on its streams (it may wait for this Comm's collectives)
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  int rank() const { return world_.rank; }
  int size() const { return world_.size; }
  const runtime::World& world() const { return world_; }
  // The streams collectives are issued on (the engine creates its side streams here).
  Streams& streams() { return streams_; }

  // out [size * n] <- concat over ranks of in [n]; same dtype, contiguous.
  // `label` names what is communicated (e.g. "unit3") in the trace. `group` runs the
  // collective on a subgroup (HYBRID_SHARD's shard/replicate groups) counted with the rest.
  void all_gather(at::Tensor& out, at::Tensor& in, const std::string& label = "",
                  const runtime::World* group = nullptr);
  // out [n] <- sum over ranks of in[rank*n : (rank+1)*n]; in [size * n].
  void reduce_scatter_sum(at::Tensor& out, at::Tensor& in, const std::string& label = "",
                          const runtime::World* group = nullptr);
  void all_reduce_sum(at::Tensor& t, const std::string& label = "", const runtime::World* group = nullptr);
  void broadcast(at::Tensor& t, int root, const std::string& label = "", const runtime::World* group = nullptr);
  // out [size * n] <- chunk j from rank j: out[j*n : (j+1)*n] = rank j's in[rank*n : (rank+1)*n];
  // in [size * n], equal splits (torch.distributed.all_to_all_single without split sizes, as
  // DeepSpeed's all_to_all_quant_reduce calls it). c10d's alltoall_base. Counted bytes: the
  // send buffer (nccl-tests alltoall's size), busbw factor (W-1)/W.
  void all_to_all_single(at::Tensor& out, at::Tensor& in, const std::string& label = "",
                         const runtime::World* group = nullptr);

  // Asynchronous forms: the collective runs while the caller goes on (on Gloo's worker threads
  // or NCCL's stream); `out` must not be read, nor `in` written, before the handle's wait().
  PendingCollective all_gather_async(at::Tensor& out, at::Tensor& in, const std::string& label = "",
                                     const runtime::World* group = nullptr);
  PendingCollective reduce_scatter_sum_async(at::Tensor& out, at::Tensor& in, const std::string& label = "",
                                             const runtime::World* group = nullptr);
  // With a chosen reduction (FSDP2 reduces with ReduceOp::AVG where _get_gradient_divide_factors
  // says so; Gloo and NCCL both implement AVG). Counted like their SUM forms.
  PendingCollective reduce_scatter_async(at::Tensor& out, at::Tensor& in, c10d::ReduceOp op,
                                         const std::string& label = "", const runtime::World* group = nullptr);
  PendingCollective all_reduce_async(at::Tensor& t, c10d::ReduceOp op, const std::string& label = "",
                                     const runtime::World* group = nullptr);
  PendingCollective all_to_all_single_async(at::Tensor& out, at::Tensor& in, const std::string& label = "",
                                            const runtime::World* group = nullptr);

  // NCCL: adds the device durations of collectives waited since the last call to time_s. Call
  // after a device synchronize (the trainer does, at the end of each step). No-op on Gloo.
  // A collective whose duration cannot be read is counted in `untimed` and its error kept
  // (timing_error()); it is never silently taken as 0 s.
  void collect_device_times();
  const std::string& timing_error() const { return timing_error_; }
  // NCCL timing handles not read yet (at most kMaxTimingHandles).
  size_t pending_timing_handles() const { return untimed_.size(); }
  static constexpr size_t kMaxTimingHandles = 256;

  // Every collective's [issue, completion] interval and the caller's [wait start, wait end]
  // in steady-clock ns, while recording is on (the profiler's host source on Gloo).
  struct Interval {
    CollectiveKind kind;
    std::string label;
    int64_t start_ns, end_ns, wait_start_ns, wait_end_ns, bytes;
  };
  void set_interval_recording(bool on) { record_intervals_ = on; }
  std::vector<Interval> take_intervals() { return std::exchange(intervals_, {}); }

  // Order of collectives as "all_gather:unit3" entries, while tracing is on (tests, debugging).
  void set_tracing(bool on) { tracing_ = on; }
  const std::vector<std::string>& trace() const { return trace_; }
  void clear_trace() { trace_.clear(); }

  const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& stats() const { return stats_; }
  // Zeroes the counters and drops collectives not yet timed (init-time broadcasts must not be
  // counted in step 0's comm time).
  void reset_stats() {
    stats_ = {};
    untimed_.clear();
  }

 private:
  friend class PendingCollective;
  // Takes the work: the handle must be its only reference here (Gloo: see finish()).
  PendingCollective issue(CollectiveKind kind, const runtime::World& group, c10::intrusive_ptr<c10d::Work> work,
                          int64_t bytes, const std::string& label, double issued_s, std::vector<at::Tensor> held,
                          int64_t buffers);
  // The process group's call, with the comm-buffer tag `buffers` on (and the test timing).
  c10::intrusive_ptr<c10d::Work> call_process_group(int64_t buffers,
                                                    const std::function<c10::intrusive_ptr<c10d::Work>()>& call);
  void finish(PendingCollective& p, double wait_start_s, double wait_end_s);
  void wait_from_issue(PendingCollective&& p);
  void bound_timing_handles();                      // reads the completed handles once past kMaxTimingHandles
  std::string group_name(const runtime::World& g);  // "world", "group1", ... for the log
  runtime::World world_;
  Streams streams_;
  std::vector<std::pair<const void*, std::string>> group_names_;
  std::string timing_error_;
  bool device_timing_ = false;  // NCCL collective timing is on
  std::vector<std::pair<CollectiveKind, c10::intrusive_ptr<c10d::Work>>> untimed_;
  bool record_intervals_ = false;
  std::vector<Interval> intervals_;
  bool tracing_ = false;
  std::vector<std::string> trace_;
  std::array<CollectiveStats, size_t(CollectiveKind::kCount)> stats_{};
  CommTestTiming test_timing_;
  bool release_spin_ = true;  // Gloo: finish() waits for Gloo's worker to let go of the work (comm.cpp)
};

// Difference of two snapshots (e.g. one step's traffic).
std::array<CollectiveStats, size_t(CollectiveKind::kCount)> stats_delta(
    const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& after,
    const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& before);

}  // namespace zb::backends::common
