// streams.hpp — the execution streams and events an engine schedules its work on, as its
// upstream does (FSDP1: unshard / pre-unshard / post-backward / all-reduce streams; FSDP2:
// all-gather copy-in / all-gather / reduce-scatter / all-reduce; DeepSpeed ZeRO-3: all-gather and
// reduce-and-partition streams).
// Owns: naming streams, making one current for a scope, stream→stream and event waits, host
// syncs, the caching allocator's record_stream, and the dependency log. Must not: decide what
// runs where (engines do) or issue collectives (Comm does, on the current stream).
//
// On CUDA every call is the real c10 one (c10::Stream / c10::Event / c10::StreamGuard through
// the device's guard implementation: the calls torch.cuda.Stream, Stream.wait_stream,
// Event.record/synchronize and Tensor.record_stream make). On CPU there are no streams: the
// same calls are recorded into a dependency log — which work was issued on which stream, which
// stream or event each stream waited for, where the host blocked — so an engine's CUDA
// schedule can be checked on a CPU machine (happens_before). Collectives are logged by Comm:
// ProcessGroupNCCL runs each on its own communicator stream after waiting for the stream that
// was current at issue, and Work::wait() makes the then-current stream wait for it; the log
// models exactly that (one "nccl:<group>" stream per process group).
//
// Stream-ordered work on the host (CPU): `enqueue` runs a piece of work "on a stream". On CUDA
// it runs at once with that stream current (its kernels queue behind the stream's earlier work,
// its collective waits are stream waits). On CPU, for a side stream, it is deferred until more
// work is enqueued there or the stream is waited for or synchronised — the host blocks in a
// collective wait only about when a CUDA stream would have reached it — and it is logged at
// enqueue time, in issue order. Work run directly under a Guard is not deferred on CPU.
// StreamMode::kEager (ZEROBENCH_STREAMS=eager) runs enqueued work at once on CPU too: the host
// then takes the CUDA path through every engine (flags such as FSDP-mode's gather_in_flight flip
// at enqueue, as on the device), so the CUDA control flow is exercised on a CPU machine.
//
// Tensors in the log (alloc_safety.hpp): uses (op(label, tensors), the tensors of a collective),
// record_stream calls and frees — a storage resized to 0 or its last reference dropped, seen at
// the next logged call — each name a storage generation, so the CUDA caching allocator's rule
// (no block reused before its uses on other streams are ordered or recorded) can be checked.
// Emulation (--emulate-world-size) is logged as what it is: a collective is work on the issuing
// stream (EmulatedBackend copies there) and its wait is a no-op, unlike ProcessGroupNCCL's.
#pragma once
#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zb::backends::common {

using StreamId = int;

// One dependency-log entry. `clock[s]` is the seq of the last entry of stream s this entry is
// ordered after (-1: none); the entry's own stream holds its own seq.
struct StreamLogEntry {
  enum class Kind {
    kOp,              // work issued on `stream` (label says what)
    kWaitStream,      // `stream` waits for everything issued on `other` so far
    kRecordEvent,     // an event recorded on `stream`
    kWaitEvent,       // `stream` waits for the event recorded at entry `target`
    kHostSync,        // the host blocks until entry `target` (an event or a stream's tail) completed
    kCollective,      // a collective on the group's communicator stream `stream`, issued from `other`
    kWaitCollective,  // `stream` waits for the collective at entry `target`
    kRecordStream,    // the caching allocator is told `label` (storage `storage`) is in use by `stream`
    kUse,             // storage `storage` is read or written by work on `stream` (label: the work)
    kAlloc,           // storage `storage` first seen (or refilled) with `stream` current: its allocation stream
    kFree,            // storage `storage` freed (label says how); logged on its allocation stream
  };
  int64_t seq = 0;
  Kind kind = Kind::kOp;
  std::string stream;
  std::string label;
  std::string other;
  int64_t target = -1;
  int64_t storage = -1;        // kRecordStream/kUse/kAlloc/kFree: the storage generation (alloc_safety.hpp)
  std::vector<int64_t> clock;  // indexed by stream id
};
const char* to_string(StreamLogEntry::Kind kind);

class Streams;
class StorageTracker;  // alloc_safety.hpp

// How enqueued work runs on CPU (on CUDA it always runs at once): deferred (the default) or
// eager, as on CUDA. ZEROBENCH_STREAMS=deferred|eager picks it; any other value is a UsageError.
enum class StreamMode { kDeferred, kEager };
StreamMode stream_mode_from_env();
const char* to_string(StreamMode mode);

// An event recorded on a stream (FSDP1's _free_event_queue, DeepSpeed's param_reduce_events).
class StreamEvent {
 public:
  StreamEvent() = default;
  bool recorded() const { return recorded_; }

 private:
  friend class Streams;
  bool recorded_ = false;
  StreamId stream_ = 0;             // where it was recorded
  int64_t entry_ = -1;              // its log entry (-1 when not logged)
  std::vector<int64_t> clock_;      // what it covers, for the log
  std::shared_ptr<void> device_;    // the c10::Event on CUDA
};

// FSDP2's held references instead of record_stream (_fsdp_param_group.py AllGatherState /
// ReduceScatterState, _fsdp_collectives.py): tensors produced or read on one stream are kept
// alive, with the event recorded after their last use, until the streams that would reuse their
// memory wait for that event; then they are dropped. Usage:
//   held = HeldTensors{{all_gather_output}, streams.record(compute)};   // after the copy-out
//   ... next all-gather: held.release(streams, {copy_in, all_gather});   // wait, then free
struct HeldTensors {
  std::vector<at::Tensor> tensors;
  StreamEvent event;
  bool held() const { return !tensors.empty(); }
  // Each of `waiters` waits for the event (stream.wait_event), then the tensors are dropped.
  // (A planted early free — Streams::plant_early_free — skips the waits.)
  void release(Streams& streams, const std::vector<StreamId>& waiters);
};

class Streams {
 public:
  // `device`'s current stream becomes the compute stream (FSDP1's _default_stream).
  explicit Streams(at::Device device);
  ~Streams();
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;

  bool on_device() const { return device_.is_cuda(); }
  StreamMode mode() const { return mode_; }
  void set_mode(StreamMode mode) { mode_ = mode; }
  // Whether enqueued work runs at once (CUDA, or eager mode on CPU).
  bool runs_at_enqueue() const { return on_device() || mode_ == StreamMode::kEager; }
  StreamId compute() const { return 0; }
  // A side stream from the device's stream pool (what torch.cuda.Stream(priority=...) returns).
  StreamId create(const std::string& name, bool high_priority = false);
  StreamId current() const { return current_; }
  const std::string& name(StreamId s) const { return streams_[size_t(s)].name; }
  // The c10 stream (CUDA) — for callers that must hand a stream to c10 (e.g. recordStream).
  c10::Stream c10_stream(StreamId s) const;

  // `with torch.cuda.stream(s):` — makes `s` current for the scope.
  class Guard {
   public:
    Guard(Streams& streams, StreamId s);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Streams& streams_;
    StreamId previous_;
  };

  void wait_stream(StreamId waiter, StreamId waited);   // waiter.wait_stream(waited)
  StreamEvent record(StreamId s, const std::string& label = "");  // Event().record(s)
  void wait_event(StreamId waiter, const StreamEvent& e);          // waiter.wait_event(e)
  bool query(const StreamEvent& e);                      // complete? (CPU: always)
  void synchronize(const StreamEvent& e);                // e.synchronize(): the host blocks
  void synchronize_stream(StreamId s);                   // s.synchronize(): the host blocks
  // tensor.record_stream(s): t's block is not reused before the work now queued on s is done.
  void record_stream(const at::Tensor& t, StreamId s, const std::string& label = "");
  // Logs work issued on the current stream (no-op on the device unless logging), and that it
  // uses `uses` (their storages) there.
  void op(const std::string& label, const std::vector<at::Tensor>& uses = {});

  // Runs `work` on stream `s` after `s` waits for `waits` (the collectives it consumes):
  // at once on CUDA with `s` current; on CPU deferred (see the file comment). `label` is logged
  // as an op on `s`. At most `max_deferred` pieces stay deferred per stream on CPU (older ones
  // run first); 1 keeps the previous one in flight while the next is issued.
  template <typename Pending>
  void enqueue(StreamId s, std::vector<Pending> waits, const std::string& label, std::function<void()> work,
               size_t max_deferred = 1);
  // Runs what is deferred on `s` (CPU deferred mode; otherwise nothing is deferred).
  void drain(StreamId s);
  void drain_all();

  // ---- the dependency log ----
  void set_logging(bool on) { logging_ = on; }
  bool logging() const { return logging_ && paused_ == 0; }
  const std::vector<StreamLogEntry>& log() const { return log_; }
  void clear_log();
  // True when entry `a` is ordered before entry `b` on the device (same stream and earlier, or
  // through waits, events, collectives and host syncs).
  bool happens_before(int64_t a, int64_t b) const;
  // The seq of the first/last entry matching (kind, stream or "" for any, label substring).
  int64_t find(StreamLogEntry::Kind kind, const std::string& stream, const std::string& label_part,
               bool last = false) const;
  std::string dump() const;  // one line per entry (debugging, test failures)
  // Logs the frees that happened since the last logged call (call before checking the log).
  void flush_frees();
  // Test-only fault injection: the record_stream calls and HeldTensors releases (by the label of
  // their event) whose label contains `label_part` are skipped — a tensor freed before the stream
  // that used it is ordered or recorded. "" plants nothing. The allocator-safety check must fail.
  void plant_early_free(const std::string& label_part) { planted_early_free_ = label_part; }
  bool planted_early_free(const std::string& label) const;
  bool planted_early_free(const StreamEvent& e) const;

  // ---- for Comm ----
  // A collective issued now from the current stream onto `group`'s communicator stream, reading
  // and writing `tensors`; returns its entry (-1 when not logging). ProcessGroupNCCL records
  // every input and output on its stream (ProcessGroupNCCL.cpp collective(): recordStream of the
  // inputs; each collective's fn, [Sync Streams]: of the outputs; TORCH_NCCL_AVOID_RECORD_STREAMS
  // unset), so the log records them there. `emulated`: the collective is work on the current
  // stream itself (EmulatedBackend), recorded nowhere else.
  int64_t log_collective(const std::string& group, const std::string& label,
                         const std::vector<at::Tensor>& tensors = {}, bool emulated = false);
  // Stream `s` waits for the collective at `entry` (no-op for -1 or while not logging). For an
  // emulated collective the wait is logged but orders nothing (c10d's completed Work::wait()).
  void log_collective_wait(int64_t entry, StreamId s, const std::string& label);

 private:
  struct StreamState {
    std::string name;
    c10::Stream stream{c10::Stream::DEFAULT, c10::Device(c10::kCPU)};
    std::vector<int64_t> clock;  // what the stream's next entry is ordered after
    std::deque<std::function<void()>> deferred;  // CPU: enqueued work not run yet
  };
  StreamId stream_named(const std::string& name);  // creates a log-only stream (communicators)
  int64_t append(StreamLogEntry::Kind kind, StreamId s, const std::string& label, const std::string& other,
                 int64_t target);
  static void merge(std::vector<int64_t>& into, const std::vector<int64_t>& from);
  void set_current(StreamId s);
  int64_t log_use(const at::Tensor& t, StreamId s, const std::string& label);  // kAlloc if new, then kUse
  int64_t track(const at::Tensor& t, const std::string& label);                // its generation (kAlloc on first sight)

  at::Device device_;
  StreamMode mode_ = StreamMode::kDeferred;
  std::unique_ptr<StorageTracker> tracker_;
  std::string planted_early_free_;
  std::vector<StreamState> streams_;
  StreamId current_ = 0;
  bool logging_ = false;
  int paused_ = 0;            // > 0 while enqueued work runs (its log was written at enqueue)
  std::vector<int64_t> host_clock_;  // what every new entry is ordered after (host syncs)
  std::vector<StreamLogEntry> log_;
};

// ---- template implementation ----
template <typename Pending>
void Streams::enqueue(StreamId s, std::vector<Pending> waits, const std::string& label, std::function<void()> work,
                      size_t max_deferred) {
  // The log, in issue order: `s` waits for each collective, then the work runs on `s`.
  flush_frees();
  for (auto& w : waits) w.log_stream_wait(s);
  if (logging()) append(StreamLogEntry::Kind::kOp, s, label, "", -1);
  auto shared = std::make_shared<std::vector<Pending>>(std::move(waits));
  auto run = [shared, work = std::move(work)] {
    for (auto& w : *shared) w.wait();
    work();
  };
  // On CUDA (and in eager mode) it runs now, queued on `s`; on CPU work for the compute stream
  // runs now too (the host is the compute stream).
  if (runs_at_enqueue() || s == compute()) {
    Guard g(*this, s);
    ++paused_;
    try {
      run();
    } catch (...) {
      --paused_;
      throw;
    }
    --paused_;
    return;
  }
  auto& q = streams_[size_t(s)].deferred;
  q.push_back(std::move(run));
  while (q.size() > max_deferred) {
    auto next = std::move(q.front());
    q.pop_front();
    ++paused_;
    Guard g(*this, s);
    try {
      next();
    } catch (...) {
      --paused_;
      throw;
    }
    --paused_;
  }
}

}  // namespace zb::backends::common
