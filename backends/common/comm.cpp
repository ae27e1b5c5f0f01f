// comm.cpp — counted c10d collectives (see comm.hpp). Reductions are SUM unless an engine asks
// for another op (FSDP2's AVG); engines scale before/after as their framework does.
#include "backends/common/comm.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "runtime/errors.hpp"
#include "runtime/memory.hpp"
#include "runtime/nvtx.hpp"

namespace zb::backends::common {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What collect_device_times() needs of an NCCL work: its start/end events. WorkNCCL's copy
// constructor copies those but not the output tensors, which must not live until the step ends.
c10::intrusive_ptr<c10d::Work> timing_handle(const c10::intrusive_ptr<c10d::Work>& work) {
#ifdef USE_C10D_NCCL
  if (auto* w = dynamic_cast<c10d::ProcessGroupNCCL::WorkNCCL*>(work.get()))
    return c10::make_intrusive<c10d::ProcessGroupNCCL::WorkNCCL>(*w);
#endif
  return work;
}

// Gloo's worker thread drops its reference to a work just after completing it. Waiting for that
// here makes this thread the one that destroys the work, so a tensor only the work still
// references (an input the caller dropped after issuing) is freed at the wait, in program order,
// not on Gloo's thread when the scheduler lets it run (runtime/memory.hpp, the program-order peak).
// Bounded: a holder that keeps the work longer (none in torch 2.11's Gloo) costs one second once,
// then `spin` is cleared and later works are released at once (the ledger then counts any tensor
// freed on Gloo's thread as a late free).
void release_here(c10::intrusive_ptr<c10d::Work>& work, bool& spin) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (spin && work.use_count() > 1) {
    if (std::chrono::steady_clock::now() > deadline) spin = false;
    std::this_thread::yield();
  }
  work.reset();
}
}  // namespace

CommTestTiming CommTestTiming::from_env() {
  CommTestTiming t;
  const char* v = std::getenv("ZEROBENCH_TEST_COMM_TIMING");
  if (!v || !*v) return t;
  const std::string s = v;
  const std::string bad = "ZEROBENCH_TEST_COMM_TIMING '" + s + "': expected wait-at-issue or delay-issue:RANK:MS";
  if (s == "wait-at-issue") {
    t.wait_at_issue = true;
    return t;
  }
  if (s.rfind("delay-issue:", 0) != 0) throw UsageError(bad);
  const auto rest = s.substr(12);
  const auto colon = rest.find(':');
  try {
    size_t used_rank = 0, used_ms = 0;
    if (colon == std::string::npos) throw UsageError(bad);
    t.delay_rank = std::stoi(rest.substr(0, colon), &used_rank);
    t.delay_ms = std::stoi(rest.substr(colon + 1), &used_ms);
    if (used_rank != colon || used_ms != rest.size() - colon - 1 || t.delay_rank < 0 || t.delay_ms <= 0)
      throw UsageError(bad);
  } catch (const std::logic_error&) {
    throw UsageError(bad);
  }
  return t;
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllToAll: return "all_to_all";
    default: return "unknown";
  }
}

double busbw_factor(CollectiveKind kind, int w) {
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll: return double(w - 1) / double(w);
    case CollectiveKind::kAllReduce: return 2.0 * double(w - 1) / double(w);
    default: return 1.0;
  }
}

Comm::Comm(runtime::World world)
    : world_(std::move(world)), streams_(world_.device), test_timing_(CommTestTiming::from_env()) {
  device_timing_ = world_.pg_backend == "nccl";
}

c10::intrusive_ptr<c10d::Work> Comm::call_process_group(int64_t buffers,
                                                        const std::function<c10::intrusive_ptr<c10d::Work>()>& call) {
  if (test_timing_.delay_ms > 0 && test_timing_.delay_rank == world_.rank)
    std::this_thread::sleep_for(std::chrono::milliseconds(test_timing_.delay_ms));
  c10::intrusive_ptr<c10d::Work> work;
  {
    runtime::CommBufferScope scope(buffers);  // what the call and Gloo's worker allocate for it
    try {
      work = call();
    } catch (...) {
      runtime::comm_buffers_close(buffers);
      throw;
    }
  }
  if (work && test_timing_.wait_at_issue) work->wait();
  return work;
}

Comm::~Comm() {
  try {
    streams_.drain_all();
  } catch (...) {
  }
}

std::string Comm::group_name(const runtime::World& g) {
  if (g.pg.get() == world_.pg.get()) return "world";
  for (const auto& [pg, name] : group_names_)
    if (pg == g.pg.get()) return name;
  group_names_.emplace_back(g.pg.get(), "group" + std::to_string(group_names_.size() + 1));
  return group_names_.back().second;
}

PendingCollective& PendingCollective::operator=(PendingCollective&& other) noexcept {
  if (this != &other) {
    if (pending()) {
      try {
        wait();
      } catch (...) {
      }
    }
    comm_ = std::exchange(other.comm_, nullptr);
    work_ = std::move(other.work_);
    held_ = std::move(other.held_);
    kind_ = other.kind_;
    bytes_ = other.bytes_;
    label_ = std::move(other.label_);
    log_entry_ = std::exchange(other.log_entry_, -1);
    issued_s_ = other.issued_s_;
    completed_s_ = std::move(other.completed_s_);
    buffers_ = std::exchange(other.buffers_, -1);
  }
  return *this;
}

PendingCollective::~PendingCollective() {
  if (!pending()) return;
  try {
    wait();
  } catch (...) {
  }
}

void PendingCollective::wait() {
  if (!pending()) return;
  comm_->streams_.log_collective_wait(log_entry_, comm_->streams_.current(), label_);
  const double t0 = now_s();
  if (work_) work_->wait();
  comm_->finish(*this, t0, now_s());
}

void PendingCollective::log_stream_wait(StreamId s) const {
  if (comm_) comm_->streams_.log_collective_wait(log_entry_, s, label_);
}

PendingCollective Comm::issue(CollectiveKind kind, const runtime::World& group, c10::intrusive_ptr<c10d::Work> work,
                              int64_t bytes, const std::string& label, double issued_s, std::vector<at::Tensor> held,
                              int64_t buffers) {
  if (tracing_) trace_.push_back(std::string(collective_name(kind)) + ":" + label);
  PendingCollective p;
  p.log_entry_ = streams_.log_collective(group_name(group), std::string(collective_name(kind)) + ":" + label, held,
                                         group.emulated);
  p.comm_ = this;
  p.work_ = std::move(work);
  p.held_ = std::move(held);
  p.kind_ = kind;
  p.bytes_ = bytes;
  p.label_ = label;
  p.issued_s_ = issued_s;
  p.buffers_ = buffers;
  if (p.work_ && world_.pg_backend == "gloo") {
    // Gloo completes a collective on its worker thread: stamp the moment it does.
    auto stamp = std::make_shared<std::atomic<double>>(0.0);
    try {
      p.work_->getFuture()->addCallback([stamp](c10::ivalue::Future&) { stamp->store(now_s()); });
      p.completed_s_ = stamp;
    } catch (const std::exception&) {
      // No future on this work: completion is taken at wait().
    }
  }
  return p;
}

void Comm::finish(PendingCollective& p, double wait_start_s, double wait_end_s) {
  auto& s = stats_[size_t(p.kind_)];
  s.count += 1;
  s.bytes += p.bytes_;
  s.wait_s += wait_end_s - wait_start_s;
  // Complete no later than wait() returned (Gloo may stamp its future just after waking us).
  const double stamped = p.completed_s_ ? p.completed_s_->load() : 0.0;
  const double completed = stamped > 0 ? std::min(stamped, wait_end_s) : wait_end_s;
  if (world_.emulated) {
    s.not_measured += 1;  // a local copy, on CUDA queued on the issuing stream: no comm time to report
  } else if (device_timing_ && p.work_) {
    untimed_.emplace_back(p.kind_, timing_handle(p.work_));  // device duration read after the step's sync
    if (untimed_.size() > kMaxTimingHandles) bound_timing_handles();
  } else {
    s.time_s += completed - p.issued_s_;
  }
  if (record_intervals_)
    intervals_.push_back({p.kind_, p.label_, int64_t(p.issued_s_ * 1e9), int64_t(completed * 1e9),
                          int64_t(wait_start_s * 1e9), int64_t(wait_end_s * 1e9), p.bytes_});
  p.comm_ = nullptr;
  if (p.work_ && world_.pg_backend == "gloo")
    release_here(p.work_, release_spin_);
  else
    p.work_.reset();
  p.held_.clear();
  p.completed_s_.reset();
  runtime::comm_buffers_close(std::exchange(p.buffers_, -1));  // its comm buffers end at the wait
  streams_.flush_frees();  // the collective's references are gone: log what that freed
}

void Comm::bound_timing_handles() {
  // Read the completed ones now (their events have fired); keep the rest for collect_device_times().
  std::vector<std::pair<CollectiveKind, c10::intrusive_ptr<c10d::Work>>> kept, done;
  for (auto& h : untimed_) (h.second->isCompleted() ? done : kept).push_back(std::move(h));
  untimed_ = std::move(done);
  collect_device_times();
  // Still past the bound (nothing completed): the oldest are dropped and counted as untimed.
  while (kept.size() > kMaxTimingHandles) {
    stats_[size_t(kept.front().first)].untimed += 1;
    if (timing_error_.empty())
      timing_error_ = std::string(collective_name(kept.front().first)) + ": more than " +
                      std::to_string(kMaxTimingHandles) + " collectives in flight without device time";
    kept.erase(kept.begin());
  }
  untimed_ = std::move(kept);
}

void Comm::collect_device_times() {
  for (auto& [kind, work] : untimed_) {
    try {
      stats_[size_t(kind)].time_s += double(work->getDuration()) / 1e3;
    } catch (const std::exception& e) {
      // Timing not enabled on this group, or its events not recorded: counted and kept, so
      // the report says how many collectives have no device time and why.
      stats_[size_t(kind)].untimed += 1;
      if (timing_error_.empty())
        timing_error_ = std::string(collective_name(kind)) + ": " + e.what();
    }
  }
  untimed_.clear();
}

PendingCollective Comm::all_gather_async(at::Tensor& out, at::Tensor& in, const std::string& label,
                                         const runtime::World* group) {
  const auto& g = group ? *group : world_;
  TORCH_CHECK(out.numel() == in.numel() * g.size, "all_gather: output numel ", out.numel(), " != ", g.size, " x ",
              in.numel());
  runtime::nvtx::Range range(std::string("all_gather ") + label);
  const double t0 = now_s();
  const int64_t buffers = runtime::comm_buffers_open();
  auto work = call_process_group(buffers, [&]() -> c10::intrusive_ptr<c10d::Work> {
    if (g.size > 1) return g.pg->_allgather_base(out, in);
    out.copy_(in);
    return {};
  });
  return issue(CollectiveKind::kAllGather, g, std::move(work), int64_t(out.nbytes()), label, t0, {out, in}, buffers);
}

PendingCollective Comm::reduce_scatter_sum_async(at::Tensor& out, at::Tensor& in, const std::string& label,
                                                 const runtime::World* group) {
  return reduce_scatter_async(out, in, c10d::ReduceOp::SUM, label, group);
}

PendingCollective Comm::reduce_scatter_async(at::Tensor& out, at::Tensor& in, c10d::ReduceOp op,
                                             const std::string& label, const runtime::World* group) {
  const auto& g = group ? *group : world_;
  TORCH_CHECK(in.numel() == out.numel() * g.size, "reduce_scatter: input numel ", in.numel(), " != ", g.size, " x ",
              out.numel());
  runtime::nvtx::Range range(std::string("reduce_scatter ") + label);
  const double t0 = now_s();
  const int64_t buffers = runtime::comm_buffers_open();
  auto work = call_process_group(buffers, [&]() -> c10::intrusive_ptr<c10d::Work> {
    if (g.size == 1) {
      out.copy_(in);
      return {};
    }
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = op;
    return g.pg->_reduce_scatter_base(out, in, opts);
  });
  return issue(CollectiveKind::kReduceScatter, g, std::move(work), int64_t(in.nbytes()), label, t0, {out, in},
               buffers);
}

// A blocking call: the caller is blocked from the issue on, not only inside wait().
void Comm::wait_from_issue(PendingCollective&& p) {
  streams_.log_collective_wait(p.log_entry_, streams_.current(), p.label_);
  if (p.work_) p.work_->wait();
  finish(p, p.issued_s_, now_s());
}

void Comm::all_gather(at::Tensor& out, at::Tensor& in, const std::string& label, const runtime::World* group) {
  wait_from_issue(all_gather_async(out, in, label, group));
}

void Comm::reduce_scatter_sum(at::Tensor& out, at::Tensor& in, const std::string& label,
                              const runtime::World* group) {
  wait_from_issue(reduce_scatter_sum_async(out, in, label, group));
}

void Comm::all_reduce_sum(at::Tensor& t, const std::string& label, const runtime::World* group) {
  wait_from_issue(all_reduce_async(t, c10d::ReduceOp::SUM, label, group));
}

PendingCollective Comm::all_reduce_async(at::Tensor& t, c10d::ReduceOp op, const std::string& label,
                                         const runtime::World* group) {
  const auto& g = group ? *group : world_;
  runtime::nvtx::Range range(std::string("all_reduce ") + label);
  const double t0 = now_s();
  const int64_t buffers = runtime::comm_buffers_open();
  auto work = call_process_group(buffers, [&]() -> c10::intrusive_ptr<c10d::Work> {
    if (g.size == 1) return {};
    std::vector<at::Tensor> ts{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    return g.pg->allreduce(ts, opts);
  });
  return issue(CollectiveKind::kAllReduce, g, std::move(work), int64_t(t.nbytes()), label, t0, {t}, buffers);
}

void Comm::broadcast(at::Tensor& t, int root, const std::string& label, const runtime::World* group) {
  const auto& g = group ? *group : world_;
  runtime::nvtx::Range range(std::string("broadcast ") + label);
  const double t0 = now_s();
  const int64_t buffers = runtime::comm_buffers_open();
  auto work = call_process_group(buffers, [&]() -> c10::intrusive_ptr<c10d::Work> {
    if (g.size == 1) return {};
    std::vector<at::Tensor> ts{t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return g.pg->broadcast(ts, opts);
  });
  wait_from_issue(
      issue(CollectiveKind::kBroadcast, g, std::move(work), int64_t(t.nbytes()), label, t0, {t}, buffers));
}

PendingCollective Comm::all_to_all_single_async(at::Tensor& out, at::Tensor& in, const std::string& label,
                                                const runtime::World* group) {
  const auto& g = group ? *group : world_;
  TORCH_CHECK(out.numel() == in.numel() && in.numel() % g.size == 0 && out.scalar_type() == in.scalar_type(),
              "all_to_all_single: input numel ", in.numel(), " and output numel ", out.numel(),
              " must be equal, of one dtype, and a multiple of the group size ", g.size);
  runtime::nvtx::Range range(std::string("all_to_all ") + label);
  const double t0 = now_s();
  const int64_t buffers = runtime::comm_buffers_open();
  auto work = call_process_group(buffers, [&]() -> c10::intrusive_ptr<c10d::Work> {
    if (g.size == 1) {
      out.copy_(in);
      return {};
    }
    std::vector<int64_t> equal_splits;  // empty: equal splits (all_to_all_single without split sizes)
    return g.pg->alltoall_base(out, in, equal_splits, equal_splits);
  });
  return issue(CollectiveKind::kAllToAll, g, std::move(work), int64_t(in.nbytes()), label, t0, {out, in}, buffers);
}

void Comm::all_to_all_single(at::Tensor& out, at::Tensor& in, const std::string& label,
                             const runtime::World* group) {
  wait_from_issue(all_to_all_single_async(out, in, label, group));
}


std::array<CollectiveStats, size_t(CollectiveKind::kCount)> stats_delta(
    const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& after,
    const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& before) {
  std::array<CollectiveStats, size_t(CollectiveKind::kCount)> d{};
  for (size_t i = 0; i < d.size(); ++i) {
    d[i].count = after[i].count - before[i].count;
    d[i].bytes = after[i].bytes - before[i].bytes;
    d[i].time_s = after[i].time_s - before[i].time_s;
    d[i].wait_s = after[i].wait_s - before[i].wait_s;
    d[i].untimed = after[i].untimed - before[i].untimed;
    d[i].not_measured = after[i].not_measured - before[i].not_measured;
  }
  return d;
}

}  // namespace zb::backends::common
