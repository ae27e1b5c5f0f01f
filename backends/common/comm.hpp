// comm.hpp — the collectives every engine calls, each counted (calls, bytes) and timed per kind.
// Owns: the byte convention (nccl-tests' "size": all-gather = output bytes, reduce-scatter =
// input bytes, all-reduce/broadcast = tensor bytes) and busbw factors. Must not: choose what to
// communicate (engines do).
#pragma once
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <array>
#include <string>

#include "runtime/world.hpp"

namespace zb::backends::common {

enum class CollectiveKind { kAllGather = 0, kReduceScatter, kAllReduce, kBroadcast, kCount };
const char* collective_name(CollectiveKind kind);
// nccl-tests bus-bandwidth factor: all-gather/reduce-scatter (W-1)/W, all-reduce 2(W-1)/W, broadcast 1.
double busbw_factor(CollectiveKind kind, int world_size);

struct CollectiveStats {
  int64_t count = 0;
  int64_t bytes = 0;
  double time_s = 0;
};

class Comm {
 public:
  explicit Comm(runtime::World world) : world_(std::move(world)) {}
  int rank() const { return world_.rank; }
  int size() const { return world_.size; }
  const runtime::World& world() const { return world_; }

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

  // Order of collectives as "all_gather:unit3" entries, while tracing is on (tests, debugging).
  void set_tracing(bool on) { tracing_ = on; }
  const std::vector<std::string>& trace() const { return trace_; }
  void clear_trace() { trace_.clear(); }

  const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  // {"all_gather": {"count", "bytes", "time_s", "busbw_gbps"}, ...}
  nlohmann::json stats_json() const;

 private:
  void record(CollectiveKind kind, int64_t bytes, double seconds, const std::string& label);
  runtime::World world_;
  bool tracing_ = false;
  std::vector<std::string> trace_;
  std::array<CollectiveStats, size_t(CollectiveKind::kCount)> stats_{};
};

// Difference of two snapshots (e.g. one step's traffic).
std::array<CollectiveStats, size_t(CollectiveKind::kCount)> stats_delta(
    const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& after,
    const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& before);
nlohmann::json stats_to_json(const std::array<CollectiveStats, size_t(CollectiveKind::kCount)>& s, int world_size);

}  // namespace zb::backends::common
