// zero3_program.cpp — ZeRO3-mode's projection program (see zero3_program.hpp), moved from the
// projection's schedule.cpp: it mirrors zero3_engine.cpp; kAsyncDevice follows DeepSpeed's
// streams (deepspeed/runtime/zero/partitioned_param_coordinator.py, stage3.py).
#include "backends/zero3/zero3_program.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "backends/zero3/zero3_options.hpp"
#include "backends/zero3/zero3_padding.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

namespace {
using json = nlohmann::json;
using common::CollectiveCost;
using common::CollectiveKind;
using common::ExecModel;
using common::Program;
using common::program_compute_dtype;
using common::program_dtype_or;
using common::ProgramDtype;
using common::ProgramInput;
using common::unit_share;

// ---------------------------------------------------------------- ZeRO3-mode (zero3_engine.cpp)
class Zero3Builder {
 public:
  Zero3Builder(const ProgramInput& in, const CollectiveCost& cost) : in_(in), cost_(cost), W_(in.world) {
    // The report's resolved options as the engine's record (a key a report lacks: the default).
    const Zero3Resolved r = zero3_resolved_from_json(in.options);
    const Zero3Options& o = r.options;
    prefetch_bucket_ = o.stage3_prefetch_bucket_size;
    max_live_ = o.stage3_max_live_parameters;
    reuse_distance_ = o.stage3_max_reuse_distance;
    reduce_bucket_ = o.reduce_bucket_size;
    overlap_comm_ = o.overlap_comm;
    contiguous_ = o.contiguous_gradients;
    sub_groups_ = std::max<int64_t>(1, r.sub_groups);  // a report without the engine's count: one
    const int64_t persistence = o.stage3_param_persistence_threshold;
    model_ = program_dtype_or(r.precision.model_dtype, program_compute_dtype(in.precision));
    comm_ = program_dtype_or(r.precision.communication_data_type, model_);
    cpu_ = in.exec == ExecModel::kHostIsDevice;
    const auto specs = models::unit_param_specs(in.model);
    for (int u = 0; u < int(specs.size()); ++u) {
      first_.push_back(int(params_.size()));
      for (const auto& s : specs[size_t(u)]) {
        Param p;
        p.unit = u;
        p.numel = s.numel();
        p.part = partition_numel(p.numel, W_);  // zero3_padding.hpp, as the closed form's
        p.persistent = p.numel <= persistence;
        p.is_norm = s.is_norm;
        params_.push_back(p);
      }
    }
  }

  Program build() {
    // Steady state: the trace is complete (recorded by the run's first micro-batch) and
    // persistent parameters stay gathered from then on.
    trace_ = fetch_order();
    for (auto& p : params_) p.available = p.persistent;
    for (int64_t m = 0; m < in_.train.grad_accum; ++m) micro_batch();
    optimizer_step();
    return std::move(prog_);
  }

 private:
  struct Param {
    int unit = 0;
    int64_t numel = 0, part = 0;
    bool persistent = false, is_norm = false, available = false;
    int inflight = -1;  // index into gathers_ while a prefetch carries it
  };
  struct Gather {
    std::vector<int> ids;
    int coll = -1;
    bool done = false;
  };

  int units() const { return int(first_.size()); }
  int unit_size(int u) const {
    return (u + 1 < units() ? first_[size_t(u + 1)] : int(params_.size())) - first_[size_t(u)];
  }

  // The fetch sequence of one micro-batch (what the engine's trace_ records): forward per
  // module in execution order, then the backward pre-hooks, then the embedding's post-backward.
  std::vector<int> fetch_order() const {
    std::vector<int> t = {first_[0]};  // embedding
    for (int u = 1; u < units(); ++u)
      for (int i = 0; i < unit_size(u); ++i) t.push_back(first_[size_t(u)] + i);
    t.push_back(first_[0] + 1);  // final norm
    t.push_back(first_[0] + 2);  // LM head
    t.push_back(first_[0] + 2);  // backward: pre_backward(root) fetches LM head, final norm
    t.push_back(first_[0] + 1);
    for (int u = units() - 1; u >= 1; --u)
      for (int i = unit_size(u) - 1; i >= 0; --i) t.push_back(first_[size_t(u)] + i);
    t.push_back(first_[0]);  // the embedding's own gradient comes last
    return t;
  }

  // Compute shares of a block's modules: matmul FLOPs (2 x numel per token), the causal
  // attention's (2 x hidden x seq_len per token) with wv (it runs between fetching wv and wo).
  std::vector<double> module_shares(int u) const {
    std::vector<double> w;
    double total = 0;
    for (int i = 0; i < unit_size(u); ++i) {
      const auto& p = params_[size_t(first_[size_t(u)] + i)];
      double f = p.is_norm ? 0.0 : 2.0 * double(p.numel);
      if (u >= 1 && i == 3) f += 2.0 * double(in_.model.hidden) * double(in_.train.seq_len);
      w.push_back(f);
      total += f;
    }
    for (auto& x : w) x = total > 0 ? x / total : 1.0 / double(w.size());
    return w;
  }

  int64_t live_numel() const {
    int64_t n = 0;
    for (const auto& p : params_)
      if (p.available) n += p.numel;
    return n;
  }

  void all_gather_coalesced(const std::vector<int>& ids, const std::string& label, bool async) {
    int64_t total = 0;
    for (int id : ids) total += params_[size_t(id)].part;
    const int64_t bytes = int64_t(W_) * total * model_.bytes;  // output [W * sum P_i]
    Gather g;
    g.ids = ids;
    g.coll = prog_.issue(CollectiveKind::kAllGather, label, bytes,
                         cost_(CollectiveKind::kAllGather, model_.name, bytes, W_, in_.nodes), false);
    gathers_.push_back(g);
    for (int id : ids) {
      params_[size_t(id)].available = true;
      params_[size_t(id)].inflight = int(gathers_.size()) - 1;
    }
    if (!async) complete_gather_of(ids.front());
  }

  void complete_gather_of(int id) {
    auto& g = gathers_[size_t(params_[size_t(id)].inflight)];
    prog_.wait(g.coll);
    for (int pid : g.ids) params_[size_t(pid)].inflight = -1;
    g.done = true;
  }

  void fetch(int id) {  // fetch_sub_module
    const size_t step = fetch_step_++;
    auto& p = params_[size_t(id)];
    if (p.inflight >= 0) {
      complete_gather_of(id);
    } else if (!p.available) {
      all_gather_coalesced({id}, "module", false);
    }
    prefetch(step + 1);
  }

  // The trace's next unavailable parameters from `from`, one coalesced all-gather in flight.
  void prefetch(size_t from) {
    if (prefetch_bucket_ <= 0) return;
    std::vector<int> to_prefetch;
    int64_t prefetching = 0;
    const int64_t live = live_numel();
    size_t pos = std::max(prefetch_pos_, from);
    for (; pos < trace_.size() && prefetching < prefetch_bucket_; ++pos) {
      const int next = trace_[pos];
      if (params_[size_t(next)].available ||
          std::find(to_prefetch.begin(), to_prefetch.end(), next) != to_prefetch.end())
        continue;
      const int64_t n = params_[size_t(next)].numel;
      if (live + prefetching + n > max_live_) break;
      to_prefetch.push_back(next);
      prefetching += n;
    }
    prefetch_pos_ = pos;
    if (!to_prefetch.empty()) all_gather_coalesced(to_prefetch, "prefetch", true);
  }

  void release(int id) {
    auto& p = params_[size_t(id)];
    if (!p.available) return;
    if (p.inflight >= 0) complete_gather_of(id);
    p.available = false;
  }

  void release_if_allowed(int id) {  // __params_to_release
    if (params_[size_t(id)].persistent) return;
    int64_t traversed = 0;
    for (size_t pos = fetch_step_; pos < trace_.size(); ++pos) {
      if (traversed >= reuse_distance_) break;
      if (trace_[pos] == id) return;
      traversed += params_[size_t(trace_[pos])].numel;
    }
    release(id);
  }

  void release_held() {
    for (int id : held_) release_if_allowed(id);
    held_.clear();
  }

  void finish_reductions(bool host) {
    for (int r : inflight_reductions_) host ? prog_.host_wait(r) : prog_.wait(r);
    inflight_reductions_.clear();
    ipg_in_use_ = false;
  }

  void flush_bucket() {  // __reduce_and_partition_ipg_grads
    if (bucket_.empty()) return;
    // CPU: the engine's query() of its param_reduce_events runs the reduce-and-partition
    // stream's deferred partition_grads (Streams::query drains it), so the host finishes every
    // earlier bucket before it issues this one (CUDA: query does not block).
    if (cpu_) finish_reductions(false);
    int64_t total = 0;
    for (int id : bucket_) total += params_[size_t(id)].part;
    const int64_t bytes = int64_t(W_) * total * comm_.bytes;  // input [W, sum P_i]
    const int rs = prog_.issue(CollectiveKind::kReduceScatter, "bucket", bytes,
                               cost_(CollectiveKind::kReduceScatter, comm_.name, bytes, W_, in_.nodes), true);
    // One gradient that went into the IPG buffer and divides by W is reduce-scattered in place
    // on that buffer (the engine's in_place_on_ipg).
    const auto& first = params_[size_t(bucket_.front())];
    ipg_in_use_ = contiguous_ && bucket_.size() == 1 && first.numel % W_ == 0 && first.numel <= reduce_bucket_;
    bucket_.clear();
    bucket_numel_ = 0;
    inflight_reductions_.push_back(rs);
    if (!overlap_comm_) finish_reductions(false);
  }

  void post_backward(int id) {
    if (id == first_[0]) fetch(id);
    const auto& p = params_[size_t(id)];
    if (bucket_numel_ > 0 && bucket_numel_ + p.numel > reduce_bucket_) flush_bucket();
    // add_grad_to_bucket (CPU): copying into the IPG buffer while an in-place reduce-scatter
    // may still read it waits for that reduce-scatter (the engine drains its stream).
    if (cpu_ && ipg_in_use_ && contiguous_ && bucket_numel_ + p.numel <= reduce_bucket_) finish_reductions(false);
    bucket_.push_back(id);
    bucket_numel_ += p.numel;
    release_if_allowed(id);
  }

  void micro_batch() {
    fetch_step_ = 0;
    prefetch_pos_ = 0;
    // The model's own (parameterless) module is fetched first and prefetches from the head of
    // the trace, the embedding included (_fetch_sub_module_impl; the engine's begin_micro_batch).
    prefetch(0);
    // Forward, one module at a time (module_weight / after_unit_forward).
    auto module = [&](int u, int i) {
      release_held();
      fetch(first_[size_t(u)] + i);
      held_.push_back(first_[size_t(u)] + i);
    };
    module(0, 0);
    prog_.compute("F0", in_.costs.root_forward().first);  // the embedding
    for (int u = 1; u < units(); ++u) {
      if (in_.train.activation_checkpointing.checkpoints_block(u)) {  // unit_weights: the whole block at once
        release_held();
        for (int i = 0; i < unit_size(u); ++i) {
          fetch(first_[size_t(u)] + i);
          held_.push_back(first_[size_t(u)] + i);
        }
        prog_.compute("F" + std::to_string(u), unit_share(in_.costs.forward_s, size_t(u)));
        release_held();
        continue;
      }
      const auto shares = module_shares(u);
      for (int i = 0; i < unit_size(u); ++i) {
        module(u, i);
        prog_.compute("F" + std::to_string(u), shares[size_t(i)] * unit_share(in_.costs.forward_s, size_t(u)));
      }
      release_held();
    }
    module(0, 1);
    module(0, 2);
    prog_.compute("F0", in_.costs.root_forward().second);
    release_held();
    // Backward: pre_backward(root), the LM head's and final norm's gradients, then each block
    // module by module in reverse execution order (_pre_backward_module_hook: fetch_sub_module
    // when the module's output gradient arrives, then its weight's gradient).
    fetch(first_[0] + 2);
    fetch(first_[0] + 1);
    prog_.compute("B0", in_.costs.root_backward().first);
    post_backward(first_[0] + 2);
    post_backward(first_[0] + 1);
    for (int u = units() - 1; u >= 1; --u) {
      const auto shares = module_shares(u);
      // A checkpointed block recomputes as a whole: the engine fetches all its weights at the
      // block's pre-backward (reverse execution order).
      const bool whole = in_.train.activation_checkpointing.checkpoints_block(u);
      if (whole)
        for (int i = unit_size(u) - 1; i >= 0; --i) fetch(first_[size_t(u)] + i);
      for (int i = unit_size(u) - 1; i >= 0; --i) {
        if (!whole) fetch(first_[size_t(u)] + i);
        prog_.compute("B" + std::to_string(u), shares[size_t(i)] * unit_share(in_.costs.backward_s, size_t(u)));
        post_backward(first_[size_t(u)] + i);
      }
    }
    prog_.compute("B0", in_.costs.root_backward().second);  // the embedding's gradient
    post_backward(first_[0]);
    // end_of_backward: the last bucket; every reduction finished (CUDA: the host synchronizes
    // the reduce-and-partition stream, independent_gradient_partition_epilogue); release all.
    flush_bucket();
    finish_reductions(!cpu_);
    for (int id = 0; id < int(params_.size()); ++id)
      if (!params_[size_t(id)].persistent) release(id);
    held_.clear();
  }

  void optimizer_step() {
    // step(): _partition_all_parameters releases every parameter, persistent ones included.
    for (int id = 0; id < int(params_.size()); ++id) release(id);
    // One fp64 norm all-reduce per sub-group (get_grad_norm_direct), the host reads the norm.
    for (int64_t g = 0; g < sub_groups_; ++g) {
      const int ar = prog_.issue(CollectiveKind::kAllReduce, "grad_norm", 8,
                                 cost_(CollectiveKind::kAllReduce, "fp32", 8, W_, in_.nodes), true);
      prog_.wait(ar);
    }
    prog_.compute("optimizer", in_.costs.optimizer_s);
    // _post_step -> _allgather_params_coalesced: one synchronous all-gather per persistent parameter.
    for (int id = 0; id < int(params_.size()); ++id)
      if (params_[size_t(id)].persistent) all_gather_coalesced({id}, "persistent", false);
    prog_.compute("other", in_.costs.other_s);
  }

  const ProgramInput& in_;
  const CollectiveCost& cost_;
  int W_;
  int64_t prefetch_bucket_, max_live_, reuse_distance_, reduce_bucket_;
  bool overlap_comm_ = true, contiguous_ = true, cpu_ = true, ipg_in_use_ = false;
  int64_t sub_groups_ = 1;
  ProgramDtype model_, comm_;
  std::vector<Param> params_;
  std::vector<int> first_, trace_, held_, bucket_, inflight_reductions_;
  int64_t bucket_numel_ = 0;
  size_t fetch_step_ = 0, prefetch_pos_ = 0;
  std::vector<Gather> gathers_;
  Program prog_;
};

// Per rank: per parameter, its partition ceil(numel / W) (_partition_param).
int64_t shard_elements(const models::ModelConfig& model, const json& /*options*/, int world) {
  int64_t total = 0;
  for (const auto& unit : models::unit_param_specs(model))
    for (const auto& p : unit) total += partition_numel(p.numel(), world);
  return total;
}
}  // namespace

common::ProjectionHooks projection_hooks() {
  common::ProjectionHooks h;
  h.program = [](const ProgramInput& in, const CollectiveCost& cost) {
    // Offload's copies (zero3_offload.cpp: per-parameter fetches, gradient copies per bucket, the
    // host step) are not scheduled here yet: refuse rather than project a run without them.
    const Zero3Options o = zero3_resolved_from_json(in.options).options;
    for (const auto& [section, device] : {std::pair<const char*, std::string>{"offload_optimizer", o.offload_optimizer.device},
                                          {"offload_param", o.offload_param.device}})
      if (device != "none")
        throw UsageError(std::string("projection: zero3 ") + section + " device " + device +
                         " is not modelled yet (fsdp CPUOffload is: docs/projection.md)");
    return Zero3Builder(in, cost).build();
  };
  h.shard_elements = shard_elements;
  h.per_unit_times = true;
  return h;
}

}  // namespace zb::backends::zero3
