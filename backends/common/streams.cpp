// streams.cpp — see streams.hpp. The CUDA calls go through c10's device-generic stream and
// event API (c10::impl::VirtualGuardImpl, c10::Event), which dispatches to c10_cuda's
// implementation: the same calls torch.cuda.Stream / Event / record_stream make.
#include "backends/common/streams.hpp"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "backends/common/alloc_safety.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::common {

namespace {
c10::impl::VirtualGuardImpl guard_impl(at::Device d) { return c10::impl::VirtualGuardImpl(d.type()); }
}  // namespace

const char* to_string(StreamLogEntry::Kind kind) {
  switch (kind) {
    case StreamLogEntry::Kind::kOp: return "op";
    case StreamLogEntry::Kind::kWaitStream: return "wait_stream";
    case StreamLogEntry::Kind::kRecordEvent: return "record_event";
    case StreamLogEntry::Kind::kWaitEvent: return "wait_event";
    case StreamLogEntry::Kind::kHostSync: return "host_sync";
    case StreamLogEntry::Kind::kCollective: return "collective";
    case StreamLogEntry::Kind::kWaitCollective: return "wait_collective";
    case StreamLogEntry::Kind::kRecordStream: return "record_stream";
    case StreamLogEntry::Kind::kUse: return "use";
    case StreamLogEntry::Kind::kAlloc: return "alloc";
    case StreamLogEntry::Kind::kFree: return "free";
  }
  return "?";
}

StreamMode stream_mode_from_env() {
  const char* v = std::getenv("ZEROBENCH_STREAMS");
  if (v == nullptr || std::string(v).empty() || std::string(v) == "deferred") return StreamMode::kDeferred;
  if (std::string(v) == "eager") return StreamMode::kEager;
  throw UsageError("ZEROBENCH_STREAMS=" + std::string(v) + ": expected 'deferred' or 'eager'");
}

const char* to_string(StreamMode mode) { return mode == StreamMode::kEager ? "eager" : "deferred"; }

Streams::Streams(at::Device device)
    : device_(device), mode_(stream_mode_from_env()), tracker_(std::make_unique<StorageTracker>()) {
  StreamState compute;
  compute.name = "compute";
  if (on_device()) compute.stream = guard_impl(device_).getStream(device_);
  streams_.push_back(std::move(compute));
}

Streams::~Streams() {
  // Deferred host work may hold collectives in flight; run it so nothing is left half done.
  try {
    drain_all();
  } catch (...) {
  }
}

StreamId Streams::create(const std::string& name, bool high_priority) {
  StreamState s;
  s.name = name;
  if (on_device()) s.stream = guard_impl(device_).getStreamFromGlobalPool(device_, high_priority);
  streams_.push_back(std::move(s));
  return StreamId(streams_.size() - 1);
}

StreamId Streams::stream_named(const std::string& name) {
  for (size_t i = 0; i < streams_.size(); ++i)
    if (streams_[i].name == name) return StreamId(i);
  StreamState s;
  s.name = name;
  streams_.push_back(std::move(s));
  return StreamId(streams_.size() - 1);
}

c10::Stream Streams::c10_stream(StreamId s) const { return streams_[size_t(s)].stream; }

void Streams::set_current(StreamId s) {
  if (on_device()) guard_impl(device_).exchangeStream(streams_[size_t(s)].stream);
  current_ = s;
}

Streams::Guard::Guard(Streams& streams, StreamId s) : streams_(streams), previous_(streams.current_) {
  streams_.set_current(s);
}
Streams::Guard::~Guard() { streams_.set_current(previous_); }

void Streams::merge(std::vector<int64_t>& into, const std::vector<int64_t>& from) {
  if (into.size() < from.size()) into.resize(from.size(), -1);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

int64_t Streams::append(StreamLogEntry::Kind kind, StreamId s, const std::string& label, const std::string& other,
                        int64_t target) {
  StreamLogEntry e;
  e.seq = int64_t(log_.size());
  e.kind = kind;
  e.stream = streams_[size_t(s)].name;
  e.label = label;
  e.other = other;
  e.target = target;
  auto& clock = streams_[size_t(s)].clock;
  merge(clock, host_clock_);
  if (clock.size() <= size_t(s)) clock.resize(size_t(s) + 1, -1);
  clock[size_t(s)] = e.seq;
  e.clock = clock;
  log_.push_back(std::move(e));
  return log_.back().seq;
}

void Streams::wait_stream(StreamId waiter, StreamId waited) {
  drain(waited);
  flush_frees();
  if (on_device()) {
    c10::Event e(device_.type());
    e.record(streams_[size_t(waited)].stream);
    e.block(streams_[size_t(waiter)].stream);
  }
  if (!logging()) return;
  merge(streams_[size_t(waiter)].clock, streams_[size_t(waited)].clock);
  append(StreamLogEntry::Kind::kWaitStream, waiter, "", streams_[size_t(waited)].name, -1);
}

StreamEvent Streams::record(StreamId s, const std::string& label) {
  flush_frees();
  StreamEvent e;
  e.recorded_ = true;
  e.stream_ = s;
  if (on_device()) {
    auto ev = std::make_shared<c10::Event>(device_.type());
    ev->record(streams_[size_t(s)].stream);
    e.device_ = ev;
  }
  if (logging()) {
    e.entry_ = append(StreamLogEntry::Kind::kRecordEvent, s, label, "", -1);
    e.clock_ = log_[size_t(e.entry_)].clock;
  }
  return e;
}

void Streams::wait_event(StreamId waiter, const StreamEvent& e) {
  if (!e.recorded_) return;
  drain(e.stream_);
  flush_frees();
  if (on_device() && e.device_) static_cast<c10::Event*>(e.device_.get())->block(streams_[size_t(waiter)].stream);
  if (!logging() || e.entry_ < 0) return;
  merge(streams_[size_t(waiter)].clock, e.clock_);
  append(StreamLogEntry::Kind::kWaitEvent, waiter, "", "", e.entry_);
}

bool Streams::query(const StreamEvent& e) {
  if (!e.recorded_) return true;
  if (on_device() && e.device_) return static_cast<c10::Event*>(e.device_.get())->query();
  drain(e.stream_);  // CPU: the host ran everything issued before the record
  return true;
}

void Streams::synchronize(const StreamEvent& e) {
  if (!e.recorded_) return;
  drain(e.stream_);
  flush_frees();
  if (on_device() && e.device_) static_cast<c10::Event*>(e.device_.get())->synchronize();
  if (!logging() || e.entry_ < 0) return;
  merge(host_clock_, e.clock_);
  append(StreamLogEntry::Kind::kHostSync, e.stream_, "event", "", e.entry_);
}

void Streams::synchronize_stream(StreamId s) {
  drain(s);
  flush_frees();
  if (on_device()) guard_impl(device_).synchronizeStream(streams_[size_t(s)].stream);
  if (!logging()) return;
  auto& clock = streams_[size_t(s)].clock;
  const int64_t tail = clock.size() > size_t(s) ? clock[size_t(s)] : -1;
  merge(host_clock_, clock);
  append(StreamLogEntry::Kind::kHostSync, s, "stream", "", tail);
}

void Streams::record_stream(const at::Tensor& t, StreamId s, const std::string& label) {
  if (planted_early_free(label)) return;  // test-only: the record the allocator needed is not made
  if (on_device() && t.defined() && t.storage().data_ptr().get())
    guard_impl(device_).recordDataPtrOnStream(t.storage().data_ptr(), streams_[size_t(s)].stream);
  if (!logging()) return;
  flush_frees();
  const int64_t id = track(t, label);
  append(StreamLogEntry::Kind::kRecordStream, s, label, "", -1);
  log_.back().storage = id;
}

void Streams::op(const std::string& label, const std::vector<at::Tensor>& uses) {
  if (!logging()) return;
  flush_frees();
  append(StreamLogEntry::Kind::kOp, current_, label, "", -1);
  for (const auto& t : uses) log_use(t, current_, label);
}

int64_t Streams::track(const at::Tensor& t, const std::string& label) {
  const auto seen = tracker_->see(t, current_);
  if (seen.is_new) {
    append(StreamLogEntry::Kind::kAlloc, current_, label, "", -1);
    log_.back().storage = seen.id;
  }
  return seen.id;
}

int64_t Streams::log_use(const at::Tensor& t, StreamId s, const std::string& label) {
  const int64_t id = track(t, label);
  if (id < 0) return id;
  append(StreamLogEntry::Kind::kUse, s, label, "", -1);
  log_.back().storage = id;
  return id;
}

void Streams::flush_frees() {
  if (!logging()) return;
  std::vector<int64_t> refilled;
  for (const auto& f : tracker_->sweep(current_, refilled)) {
    append(StreamLogEntry::Kind::kFree, f.alloc_stream, f.how, "", -1);
    log_.back().storage = f.id;
  }
  for (auto id : refilled) {
    append(StreamLogEntry::Kind::kAlloc, current_, "refilled", "", -1);
    log_.back().storage = id;
  }
}

bool Streams::planted_early_free(const std::string& label) const {
  return !planted_early_free_.empty() && label.find(planted_early_free_) != std::string::npos;
}

bool Streams::planted_early_free(const StreamEvent& e) const {
  return e.entry_ >= 0 && size_t(e.entry_) < log_.size() && planted_early_free(log_[size_t(e.entry_)].label);
}

void HeldTensors::release(Streams& streams, const std::vector<StreamId>& waiters) {
  if (!streams.planted_early_free(event))
    for (auto w : waiters) streams.wait_event(w, event);
  tensors.clear();
  event = StreamEvent();
  streams.flush_frees();  // what the release freed, logged here
}

void Streams::drain(StreamId s) {
  auto& q = streams_[size_t(s)].deferred;
  while (!q.empty()) {
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

void Streams::drain_all() {
  for (size_t i = 0; i < streams_.size(); ++i) drain(StreamId(i));
}

int64_t Streams::log_collective(const std::string& group, const std::string& label,
                                const std::vector<at::Tensor>& tensors, bool emulated) {
  if (!logging()) return -1;
  flush_frees();
  for (const auto& t : tensors) track(t, label);  // first seen here: allocated on the issuing stream
  if (emulated) {
    // EmulatedBackend: the collective's copies run on the current stream; nothing to wait for.
    const int64_t entry = append(StreamLogEntry::Kind::kCollective, current_, label, "emulated:" + group, -1);
    for (const auto& t : tensors) log_use(t, current_, label);
    return entry;
  }
  const StreamId c = stream_named("nccl:" + group);
  // ProcessGroupNCCL: the communicator stream waits for the current stream, then runs it.
  merge(streams_[size_t(c)].clock, streams_[size_t(current_)].clock);
  merge(streams_[size_t(c)].clock, host_clock_);
  const int64_t entry = append(StreamLogEntry::Kind::kCollective, c, label, streams_[size_t(current_)].name, -1);
  for (const auto& t : tensors) {
    // Used on the communicator stream and recorded there (recordStream in collective()).
    if (log_use(t, c, label) < 0) continue;
    append(StreamLogEntry::Kind::kRecordStream, c, label, "", -1);
    log_.back().storage = log_[log_.size() - 2].storage;
  }
  return entry;
}

void Streams::log_collective_wait(int64_t entry, StreamId s, const std::string& label) {
  if (!logging() || entry < 0) return;
  flush_frees();
  const bool emulated = log_[size_t(entry)].other.rfind("emulated:", 0) == 0;
  if (emulated) {  // a completed Work's wait(): logged, ordering nothing
    append(StreamLogEntry::Kind::kWaitCollective, s, label + " (no-op: emulated)", log_[size_t(entry)].stream, entry);
    return;
  }
  merge(streams_[size_t(s)].clock, log_[size_t(entry)].clock);
  append(StreamLogEntry::Kind::kWaitCollective, s, label, log_[size_t(entry)].stream, entry);
}

void Streams::clear_log() {
  log_.clear();
  host_clock_.clear();
  for (auto& s : streams_) s.clock.clear();
  tracker_->clear();
}

bool Streams::happens_before(int64_t a, int64_t b) const {
  if (a < 0 || b < 0 || a == b) return false;
  const auto& ea = log_[size_t(a)];
  const auto& eb = log_[size_t(b)];
  // Find ea's stream id by name (entries store names for readability).
  for (size_t s = 0; s < streams_.size(); ++s)
    if (streams_[s].name == ea.stream) return s < eb.clock.size() && eb.clock[s] >= a;
  return false;
}

int64_t Streams::find(StreamLogEntry::Kind kind, const std::string& stream, const std::string& label_part,
                      bool last) const {
  int64_t found = -1;
  for (const auto& e : log_) {
    if (e.kind != kind || (!stream.empty() && e.stream != stream)) continue;
    if (e.label.find(label_part) == std::string::npos) continue;
    found = e.seq;
    if (!last) break;
  }
  return found;
}

std::string Streams::dump() const {
  std::ostringstream out;
  for (const auto& e : log_) {
    out << e.seq << " " << to_string(e.kind) << " [" << e.stream << "] " << e.label;
    if (!e.other.empty()) out << " <" << e.other << ">";
    if (e.target >= 0) out << " ->" << e.target;
    if (e.storage >= 0) out << " #s" << e.storage;
    out << "\n";
  }
  return out.str();
}

}  // namespace zb::backends::common
