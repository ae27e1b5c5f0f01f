// comm.cpp — counted c10d collectives (see comm.hpp). Gloo has no AVG reduction, so every
// reduction is a SUM and engines scale before/after as their framework does.
#include "backends/common/comm.hpp"

#include <chrono>

#include "runtime/nvtx.hpp"

namespace zb::backends::common {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    default: return "unknown";
  }
}

double busbw_factor(CollectiveKind kind, int w) {
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: return double(w - 1) / double(w);
    case CollectiveKind::kAllReduce: return 2.0 * double(w - 1) / double(w);
    default: return 1.0;
  }
}

void Comm::record(CollectiveKind kind, int64_t bytes, double seconds, const std::string& label) {
  if (tracing_) trace_.push_back(std::string(collective_name(kind)) + ":" + label);
  auto& s = stats_[size_t(kind)];
  s.count += 1;
  s.bytes += bytes;
  s.time_s += seconds;
}

void Comm::all_gather(at::Tensor& out, at::Tensor& in, const std::string& label, const runtime::World* group) {
  const auto& g = group ? *group : world_;
  TORCH_CHECK(out.numel() == in.numel() * g.size, "all_gather: output numel ", out.numel(), " != ", g.size, " x ",
              in.numel());
  runtime::nvtx::Range range(std::string("all_gather ") + label);
  const double t0 = now_s();
  if (g.size == 1) {
    out.copy_(in);
  } else {
    g.pg->_allgather_base(out, in)->wait();
  }
  record(CollectiveKind::kAllGather, int64_t(out.nbytes()), now_s() - t0, label);
}

void Comm::reduce_scatter_sum(at::Tensor& out, at::Tensor& in, const std::string& label,
                              const runtime::World* group) {
  const auto& g = group ? *group : world_;
  TORCH_CHECK(in.numel() == out.numel() * g.size, "reduce_scatter: input numel ", in.numel(), " != ", g.size, " x ",
              out.numel());
  runtime::nvtx::Range range(std::string("reduce_scatter ") + label);
  const double t0 = now_s();
  if (g.size == 1) {
    out.copy_(in);
  } else {
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    g.pg->_reduce_scatter_base(out, in, opts)->wait();
  }
  record(CollectiveKind::kReduceScatter, int64_t(in.nbytes()), now_s() - t0, label);
}

void Comm::all_reduce_sum(at::Tensor& t, const std::string& label, const runtime::World* group) {
  const auto& g = group ? *group : world_;
  runtime::nvtx::Range range(std::string("all_reduce ") + label);
  const double t0 = now_s();
  if (g.size > 1) {
    std::vector<at::Tensor> ts{t};
    g.pg->allreduce(ts)->wait();
  }
  record(CollectiveKind::kAllReduce, int64_t(t.nbytes()), now_s() - t0, label);
}

void Comm::broadcast(at::Tensor& t, int root, const std::string& label, const runtime::World* group) {
  const auto& g = group ? *group : world_;
  runtime::nvtx::Range range(std::string("broadcast ") + label);
  const double t0 = now_s();
  if (g.size > 1) {
    std::vector<at::Tensor> ts{t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    g.pg->broadcast(ts, opts)->wait();
  }
  record(CollectiveKind::kBroadcast, int64_t(t.nbytes()), now_s() - t0, label);
}

nlohmann::json Comm::stats_json() const { return stats_to_json(stats_, size()); }

std::array<CollectiveStats, size_t(CollectiveKind::kCount)> stats_delta(
    const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& after,
    const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& before) {
  std::array<CollectiveStats, size_t(CollectiveKind::kCount)> d{};
  for (size_t i = 0; i < d.size(); ++i) {
    d[i].count = after[i].count - before[i].count;
    d[i].bytes = after[i].bytes - before[i].bytes;
    d[i].time_s = after[i].time_s - before[i].time_s;
  }
  return d;
}

nlohmann::json stats_to_json(const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& s, int world_size) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < s.size(); ++i) {
    const auto kind = CollectiveKind(i);
    const auto& c = s[i];
    // algbw = bytes / time; busbw = algbw * factor (nccl-tests' PERFORMANCE.md).
    const double busbw = c.time_s > 0 ? double(c.bytes) / c.time_s * busbw_factor(kind, world_size) / 1e9 : 0.0;
    j[collective_name(kind)] = {{"count", c.count}, {"bytes", c.bytes}, {"time_s", c.time_s}, {"busbw_gbps", busbw}};
  }
  return j;
}

}  // namespace zb::backends::common
