// schedule.cpp — the engines' step programs (see schedule.hpp). Each builder mirrors its
// engine function by function; comments name the engine function a block follows.
#include "bench/projection/schedule.hpp"

#include <algorithm>
#include <deque>
#include <map>

#include "runtime/errors.hpp"

namespace zb::bench::projection {

namespace {
using json = nlohmann::json;
using backends::common::CollectiveKind;

struct Dt {
  std::string name;  // fp32 | bf16
  int64_t bytes = 4;
};
Dt dt_named(const std::string& n) {
  if (n == "fp32" || n == "Float") return {"fp32", 4};
  if (n == "bf16" || n == "BFloat16") return {"bf16", 2};
  if (n == "fp16" || n == "Half") return {"fp16", 2};
  throw UsageError("projection: unknown dtype '" + n + "' in the report's backend options");
}
// A resolved option naming a dtype (c10 or short name), else the fallback.
Dt dt_option(const json& o, const char* key, const Dt& fallback) {
  if (!o.contains(key) || !o[key].is_string() || o[key].get<std::string>().empty()) return fallback;
  return dt_named(o[key].get<std::string>());
}
Dt compute_dt(const std::string& precision) { return precision == "fp32" ? Dt{"fp32", 4} : Dt{"bf16", 2}; }

int64_t ceil_to(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

double share_at(const std::vector<double>& v, size_t u) { return u < v.size() ? v[u] : 0.0; }

// ---------------------------------------------------------------- FSDP-mode (fsdp_engine.cpp)
Program fsdp_program(const ScheduleInput& in, const Calibration& cal) {
  const auto& o = in.options;
  const std::string strategy = o.value("sharding_strategy", "FULL_SHARD");
  if (strategy == "HYBRID_SHARD" || strategy == "HYBRID_SHARD_ZERO2")
    throw UsageError("projection: fsdp sharding_strategy " + strategy + " is not modelled (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD are)");
  const bool sharded = strategy != "NO_SHARD";
  const bool reshard_after_forward = strategy == "FULL_SHARD";
  const std::string prefetch = o.value("backward_prefetch", "BACKWARD_PRE");
  const bool forward_prefetch = o.value("forward_prefetch", false);
  const bool limit = o.value("limit_all_gathers", true);
  const Dt param = dt_option(o, "param_dtype", compute_dt(in.precision));
  const Dt reduce = dt_option(o, "reduce_dtype", param);
  const int W = in.world, S = sharded ? W : 1;
  const bool cpu = in.exec == ExecModel::kHostIsDevice;

  const auto specs = models::unit_param_specs(in.model);
  const int U = int(specs.size()), L = U - 1;
  std::vector<int64_t> padded;
  for (const auto& unit : specs) {
    int64_t n = 0;
    for (const auto& p : unit) n += p.numel();
    padded.push_back(sharded ? ceil_to(n, S) : n);  // _flat_param.py: pad to a multiple of the shard group
  }
  Program p;
  std::vector<bool> unsharded(size_t(U), false), needs_pre_backward(size_t(U), false);
  std::vector<int> gather(size_t(U), -1);
  std::deque<int> free_events;  // compute action after which each reshard recorded its event
  int last_compute = -1;

  auto issue_unshard = [&](int u) {  // issue_unshard
    if (unsharded[size_t(u)]) return;
    if (limit && free_events.size() >= 2) {  // _FreeEventQueue: wait for the oldest of two frees
      p.host_sync(free_events.front());
      free_events.pop_front();
    }
    if (sharded) {
      const int64_t bytes = padded[size_t(u)] * param.bytes;
      gather[size_t(u)] = p.issue(CollectiveKind::kAllGather, "unit" + std::to_string(u), bytes,
                                  cal.collective_s(CollectiveKind::kAllGather, param.name, bytes, W, in.nodes), false);
    }
    unsharded[size_t(u)] = true;
  };
  auto wait_gather = [&](int u) {
    if (gather[size_t(u)] >= 0) p.wait(gather[size_t(u)]);
    gather[size_t(u)] = -1;
  };
  auto unshard = [&](int u) {  // unshard: issue, then wait
    issue_unshard(u);
    wait_gather(u);
  };
  auto reshard = [&](int u) {  // reshard: never free what a collective may still write
    if (!unsharded[size_t(u)] || !sharded) return;
    wait_gather(u);
    unsharded[size_t(u)] = false;
    if (limit && last_compute >= 0) free_events.push_back(last_compute);
  };
  auto prefetch_backward = [&](int u) {  // prefetch_backward
    const int target = u == 0 ? L : u - 1;
    if (target <= 0 || target == u) return;
    if (!needs_pre_backward[size_t(target)] || unsharded[size_t(target)]) return;
    issue_unshard(target);
  };

  const int64_t A = in.train.grad_accum;
  for (int64_t m = 0; m < A; ++m) {
    // accelerate's accumulate(): non-final micro-batches under no_sync unless sync_each_batch
    // (_post_backward_hook: `if not state._sync_gradients: return`); _should_free_in_backward:
    // sharded and (sync_gradients or a reshard-after-forward strategy).
    const bool sync = in.train.sync_each_batch || m == A - 1;
    const bool free_in_backward = sharded && (sync || reshard_after_forward);
    std::vector<int> pending, issued_this_backward;  // reductions_ / every reduce-scatter of this backward
    // Forward: the root's all-gather, then each block (unit_weights / after_unit_forward).
    unshard(0);
    if (forward_prefetch && L >= 1) issue_unshard(1);
    last_compute = p.compute("F0", in.costs.root_forward().first);  // the embedding, before block 1's pre-forward
    for (int u = 1; u <= L; ++u) {
      unshard(u);
      if (forward_prefetch && u + 1 <= L) issue_unshard(u + 1);
      last_compute = p.compute("F" + std::to_string(u), share_at(in.costs.forward_s, size_t(u)));
      if (reshard_after_forward) {
        reshard(u);
        needs_pre_backward[size_t(u)] = true;
      }
    }
    last_compute = p.compute("F0", in.costs.root_forward().second);  // final norm + LM head + loss
    // Backward: the root's pre-backward (prefetch of the last block), its LM-head backward,
    // then each block from the last.
    auto post_backward = [&](int u) {  // post_backward: reshard, prefetch, reduce, finish the previous
      if (free_in_backward) reshard(u);
      if (prefetch == "BACKWARD_POST") prefetch_backward(u);
      if (!sync) return;  // no_sync: the unsharded gradient accumulates, no reduction
      const int64_t bytes = padded[size_t(u)] * reduce.bytes;
      if (sharded) {
        const int rs = p.issue(CollectiveKind::kReduceScatter, "unit" + std::to_string(u), bytes,
                               cal.collective_s(CollectiveKind::kReduceScatter, reduce.name, bytes, W, in.nodes), true);
        if (cpu) {  // finish_reductions: the host waits for the previous unit's reduce-scatter
          for (int r : pending) p.wait(r);
          pending.clear();
        }
        pending.push_back(rs);
        issued_this_backward.push_back(rs);
      } else {
        const int ar = p.issue(CollectiveKind::kAllReduce, "unit" + std::to_string(u), bytes,
                               cal.collective_s(CollectiveKind::kAllReduce, reduce.name, bytes, W, in.nodes), true);
        p.wait(ar);
      }
    };
    if (prefetch == "BACKWARD_PRE") prefetch_backward(0);
    last_compute = p.compute("B0", in.costs.root_backward().first);  // loss, LM head, final norm
    for (int u = L; u >= 1; --u) {
      if (needs_pre_backward[size_t(u)]) unshard(u);  // pre_backward
      needs_pre_backward[size_t(u)] = false;
      if (prefetch == "BACKWARD_PRE") prefetch_backward(u);
      last_compute = p.compute("B" + std::to_string(u), share_at(in.costs.backward_s, size_t(u)));
      post_backward(u);
    }
    last_compute = p.compute("B0", in.costs.root_backward().second);  // the embedding's gradient: the root's last
    post_backward(0);
    // post_backward_final: every reduce-scatter is waited for before the optimizer or the next
    // micro-batch (CUDA: the compute stream waits for the post-backward stream).
    for (int r : cpu ? pending : issued_this_backward) p.wait(r);
    if (free_in_backward)
      for (int u = 0; u < U; ++u) reshard(u);
  }
  // optimizer_step: the global grad norm's all-reduce (one fp32), then clip + AdamW on the shard.
  if (sharded) {
    const int ar = p.issue(CollectiveKind::kAllReduce, "grad_norm", 4,
                           cal.collective_s(CollectiveKind::kAllReduce, "fp32", 4, W, in.nodes), true);
    p.wait(ar);
  }
  p.compute("optimizer", in.costs.optimizer_s);
  p.compute("other", in.costs.other_s);
  return p;
}

// ---------------------------------------------------------------- ZeRO3-mode (zero3_engine.cpp)
class Zero3Builder {
 public:
  Zero3Builder(const ScheduleInput& in, const Calibration& cal) : in_(in), cal_(cal), W_(in.world) {
    const auto& o = in.options;
    prefetch_bucket_ = o.value("stage3_prefetch_bucket_size", int64_t(50000000));
    max_live_ = o.value("stage3_max_live_parameters", int64_t(1000000000));
    reuse_distance_ = o.value("stage3_max_reuse_distance", int64_t(1000000000));
    reduce_bucket_ = o.value("reduce_bucket_size", int64_t(500000000));
    overlap_comm_ = o.value("overlap_comm", true);
    contiguous_ = o.value("contiguous_gradients", true);
    sub_groups_ = o.value("sub_groups", int64_t(1));  // the engine's resolved option
    const int64_t persistence = o.value("stage3_param_persistence_threshold", int64_t(100000));
    model_ = dt_option(o, "model_dtype", compute_dt(in.precision));
    comm_ = dt_option(o, "communication_data_type", model_);
    cpu_ = in.exec == ExecModel::kHostIsDevice;
    const auto specs = models::unit_param_specs(in.model);
    for (int u = 0; u < int(specs.size()); ++u) {
      first_.push_back(int(params_.size()));
      for (const auto& s : specs[size_t(u)]) {
        Param p;
        p.unit = u;
        p.numel = s.numel();
        p.part = (p.numel + W_ - 1) / W_;  // _partition_param
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
  int unit_size(int u) const { return (u + 1 < units() ? first_[size_t(u + 1)] : int(params_.size())) - first_[size_t(u)]; }

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
                         cal_.collective_s(CollectiveKind::kAllGather, model_.name, bytes, W_, in_.nodes), false);
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
      if (params_[size_t(next)].available || std::find(to_prefetch.begin(), to_prefetch.end(), next) != to_prefetch.end())
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
                               cal_.collective_s(CollectiveKind::kReduceScatter, comm_.name, bytes, W_, in_.nodes), true);
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
      if (in_.train.activation_checkpointing) {  // unit_weights: the whole block fetched at once
        release_held();
        for (int i = 0; i < unit_size(u); ++i) {
          fetch(first_[size_t(u)] + i);
          held_.push_back(first_[size_t(u)] + i);
        }
        prog_.compute("F" + std::to_string(u), share_at(in_.costs.forward_s, size_t(u)));
        release_held();
        continue;
      }
      const auto shares = module_shares(u);
      for (int i = 0; i < unit_size(u); ++i) {
        module(u, i);
        prog_.compute("F" + std::to_string(u), shares[size_t(i)] * share_at(in_.costs.forward_s, size_t(u)));
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
      const bool whole = in_.train.activation_checkpointing;
      if (whole)
        for (int i = unit_size(u) - 1; i >= 0; --i) fetch(first_[size_t(u)] + i);
      for (int i = unit_size(u) - 1; i >= 0; --i) {
        if (!whole) fetch(first_[size_t(u)] + i);
        prog_.compute("B" + std::to_string(u), shares[size_t(i)] * share_at(in_.costs.backward_s, size_t(u)));
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
                                 cal_.collective_s(CollectiveKind::kAllReduce, "fp32", 8, W_, in_.nodes), true);
      prog_.wait(ar);
    }
    prog_.compute("optimizer", in_.costs.optimizer_s);
    // _post_step -> _allgather_params_coalesced: one synchronous all-gather per persistent parameter.
    for (int id = 0; id < int(params_.size()); ++id)
      if (params_[size_t(id)].persistent) all_gather_coalesced({id}, "persistent", false);
    prog_.compute("other", in_.costs.other_s);
  }

  const ScheduleInput& in_;
  const Calibration& cal_;
  int W_;
  int64_t prefetch_bucket_, max_live_, reuse_distance_, reduce_bucket_;
  bool overlap_comm_ = true, contiguous_ = true, cpu_ = true, ipg_in_use_ = false;
  int64_t sub_groups_ = 1;
  Dt model_, comm_;
  std::vector<Param> params_;
  std::vector<int> first_, trace_, held_, bucket_, inflight_reductions_;
  int64_t bucket_numel_ = 0;
  size_t fetch_step_ = 0, prefetch_pos_ = 0;
  std::vector<Gather> gathers_;
  Program prog_;
};

// ---------------------------------------------------------------- FSDP2-mode (fsdp2_engine.cpp)
// The default grouping (PyTorch's recipe: fully_shard on each block, then on the model): group 0
// is the root (embedding, final norm, LM head; reshard_after_forward None -> False in
// _lazy_init), groups 1..L the blocks. Upstream (torch/distributed/fsdp/_fully_shard/): the
// all-gather streams never wait for compute except through the copy-out events, so the host
// issuing a group's all-gather in its pre-forward is FSDP2's implicit prefetch (kAsyncDevice:
// ready at once); the reduce-scatter stream waits the current stream (foreach_reduce); the
// current stream waits the previous group's reduce-scatter event in the next post-backward
// (_fsdp_param_group.py post_backward) and every reduction in finalize_backward.
Program fsdp2_program(const ScheduleInput& in, const Calibration& cal) {
  const auto& o = in.options;
  auto refuse = [](const std::string& what) {
    throw UsageError("projection: fsdp2 " + what + " is not modelled (the default grouping, reshard_after_forward "
                     "true/false, implicit prefetch, no HSDP are)");
  };
  if (o.value("grouping", std::string("root")) != "root") refuse("grouping " + o.value("grouping", std::string()));
  if (o.value("auto_wrap_policy", std::string("TRANSFORMER_BASED_WRAP")) != "TRANSFORMER_BASED_WRAP")
    refuse("auto_wrap_policy " + o.value("auto_wrap_policy", std::string()));
  if (o.value("modules_to_forward_prefetch", 0) > 0) refuse("modules_to_forward_prefetch");
  if (o.value("modules_to_backward_prefetch", 0) > 0) refuse("modules_to_backward_prefetch");
  if (o.contains("mesh") && o["mesh"].value("dp_replicate", 1) > 1) refuse("HSDP (dp_replicate_size > 1)");
  bool reshard_blocks = true;
  if (o.contains("reshard_after_forward")) {
    const auto& r = o["reshard_after_forward"];
    if (r.is_boolean())
      reshard_blocks = r.get<bool>();
    else
      refuse("reshard_after_forward " + r.dump() + " (a post-forward mesh)");
  }
  const Dt gather = dt_option(o, "all_gather_dtype", compute_dt(in.precision));
  const Dt reduce = dt_option(o, "reduce_scatter_dtype", gather);
  const int W = in.world;
  const bool cpu = in.exec == ExecModel::kHostIsDevice;
  const auto specs = models::unit_param_specs(in.model);
  const int L = int(specs.size()) - 1;
  // Shard(0) with dim 0 padded to a multiple of W (_fsdp_param.py _init_sharded_param): the
  // all-gather output is W x sum of padded shards, the reduce-scatter input the same.
  std::vector<int64_t> padded;
  for (const auto& unit : specs) {
    int64_t n = 0;
    for (const auto& p : unit) {
      const int64_t dim0 = p.shape.empty() ? 1 : p.shape.front();
      n += (dim0 + W - 1) / W * (p.numel() / std::max<int64_t>(1, dim0));
    }
    padded.push_back(n * W);
  }
  Program p;
  std::vector<bool> unsharded(size_t(L + 1), false);
  std::vector<int> gather_of(size_t(L + 1), -1);
  auto unshard = [&](int g) {  // unshard -> foreach_all_gather (no collective at W=1)
    if (unsharded[size_t(g)] || gather_of[size_t(g)] >= 0 || W == 1) return;
    const int64_t bytes = padded[size_t(g)] * gather.bytes;
    gather_of[size_t(g)] = p.issue(CollectiveKind::kAllGather, "unit" + std::to_string(g), bytes,
                                   cal.collective_s(CollectiveKind::kAllGather, gather.name, bytes, W, in.nodes), false);
  };
  auto wait_for_unshard = [&](int g) {  // wait_for_unshard: the current stream waits the all-gather
    if (gather_of[size_t(g)] >= 0) p.wait(gather_of[size_t(g)]);
    gather_of[size_t(g)] = -1;
    unsharded[size_t(g)] = true;
  };
  const int64_t A = in.train.grad_accum;
  for (int64_t m = 0; m < A; ++m) {
    const bool sync = in.train.sync_each_batch || m == A - 1;  // set_requires_gradient_sync
    std::vector<int> reductions;
    // Forward: the root's pre-forward, then each block's (unshard + wait), compute, reshard.
    unshard(0);
    wait_for_unshard(0);
    p.compute("F0", in.costs.root_forward().first);  // the embedding
    for (int g = 1; g <= L; ++g) {
      unshard(g);
      wait_for_unshard(g);
      p.compute("F" + std::to_string(g), share_at(in.costs.forward_s, size_t(g)));
      if (reshard_blocks) unsharded[size_t(g)] = false;  // post_forward: reshard
    }
    p.compute("F0", in.costs.root_forward().second);  // the root keeps its parameters (False)
    // Backward: the root's pre-backward prefetches the last block (_backward_prefetch in reverse
    // post-forward order), each block's pre-backward waits its gather and prefetches the one before.
    auto post_backward = [&](int g) {  // post_backward: reshard; reduce unless no_sync
      unsharded[size_t(g)] = false;
      if (!sync || W == 1) return;
      if (cpu) {  // the host finishes the previous reductions first (advance_reductions)
        for (int r : reductions) p.wait(r);
      } else if (!reductions.empty()) {
        p.wait(reductions.back());  // current stream waits the previous reduce_scatter_state.event
      }
      const int64_t bytes = padded[size_t(g)] * reduce.bytes;
      reductions.push_back(p.issue(CollectiveKind::kReduceScatter, "unit" + std::to_string(g), bytes,
                                   cal.collective_s(CollectiveKind::kReduceScatter, reduce.name, bytes, W, in.nodes),
                                   true));
    };
    if (L >= 1) unshard(L);
    p.compute("B0", in.costs.root_backward().first);
    for (int g = L; g >= 1; --g) {
      unshard(g);
      wait_for_unshard(g);
      if (g - 1 >= 1) unshard(g - 1);
      p.compute("B" + std::to_string(g), share_at(in.costs.backward_s, size_t(g)));
      post_backward(g);
    }
    p.compute("B0", in.costs.root_backward().second);  // the embedding's gradient
    post_backward(0);  // the root at the final callback (its input needs no gradient)
    for (int r : reductions) p.wait(r);  // finalize_backward
  }
  // clip_grad_norm_ over DTensor gradients: one all-reduce of every parameter's squared local
  // norm (the stacked _NormPartial vector redistributed) on the shard mesh, in the sharded
  // gradients' dtype.
  if (W > 1) {
    const Dt g = dt_option(o, "sharded_param_dtype", Dt{"fp32", 4});
    int64_t params = 0;
    for (const auto& unit : models::unit_param_specs(in.model)) params += int64_t(unit.size());
    const int64_t bytes = params * g.bytes;
    const int ar = p.issue(CollectiveKind::kAllReduce, "grad_norm", bytes,
                           cal.collective_s(CollectiveKind::kAllReduce, g.name, bytes, W, in.nodes), true);
    p.wait(ar);
  }
  p.compute("optimizer", in.costs.optimizer_s);
  p.compute("other", in.costs.other_s);
  return p;
}

// ---------------------------------------------------------------- DDP (ddp_engine.cpp)
Program ddp_program(const ScheduleInput& in, const Calibration& cal) {
  const Dt storage = dt_option(in.options, "storage_dtype", in.precision == "low" ? Dt{"bf16", 2} : Dt{"fp32", 4});
  const double cap_mb = in.options.value("bucket_cap_mb", 25.0);
  const int64_t n = models::count_params(in.model).total;
  const int64_t bucket = std::max<int64_t>(1, int64_t(cap_mb * 1024 * 1024) / storage.bytes);
  double fwd = 0, bwd = 0;
  for (double v : in.costs.forward_s) fwd += v;
  for (double v : in.costs.backward_s) bwd += v;
  Program p;
  for (int64_t m = 0; m < in.train.grad_accum; ++m) {
    p.compute("F", fwd);
    p.compute("B", bwd);
  }
  // all_reduce_gradients: buckets from the end of the flat buffer, each waited at once.
  for (int64_t end = n; end > 0; end -= bucket) {
    const int64_t bytes = (end - std::max<int64_t>(0, end - bucket)) * storage.bytes;
    const int ar = p.issue(CollectiveKind::kAllReduce, "grads", bytes,
                           cal.collective_s(CollectiveKind::kAllReduce, storage.name, bytes, in.world, in.nodes), true);
    p.wait(ar);
  }
  p.compute("optimizer", in.costs.optimizer_s);
  p.compute("other", in.costs.other_s);
  return p;
}
}  // namespace

std::pair<double, double> UnitCosts::root_forward() const {
  const double all = share_at(forward_s, 0), pre = std::clamp(root_forward_pre_s, 0.0, all);
  return {pre, all - pre};
}

std::pair<double, double> UnitCosts::root_backward() const {
  const double all = share_at(backward_s, 0), post = std::clamp(root_backward_post_s, 0.0, all);
  return {all - post, post};
}

bool projection_supports(const std::string& backend) {
  return backend == "fsdp" || backend == "fsdp2" || backend == "zero3" || backend == "ddp";
}

Program build_program(const ScheduleInput& in, const Calibration& cal) {
  if (in.backend == "fsdp") return fsdp_program(in, cal);
  if (in.backend == "fsdp2") return fsdp2_program(in, cal);
  if (in.backend == "zero3") return Zero3Builder(in, cal).build();
  if (in.backend == "ddp") return ddp_program(in, cal);
  throw UsageError("projection: backend '" + in.backend + "' has no modelled schedule (fsdp, fsdp2, zero3, ddp)");
}

int64_t shard_elements(const std::string& backend, const models::ModelConfig& model, const nlohmann::json& options,
                       int world) {
  int64_t total = 0;
  for (const auto& unit : models::unit_param_specs(model)) {
    if (backend == "zero3") {
      for (const auto& p : unit) total += (p.numel() + world - 1) / world;
    } else if (backend == "fsdp2") {  // Shard(0): ceil(dim0 / W) rows (rank 0's, the most)
      for (const auto& p : unit) {
        const int64_t dim0 = p.shape.empty() ? 1 : std::max<int64_t>(1, p.shape.front());
        total += (dim0 + world - 1) / world * (p.numel() / dim0);
      }
    } else {
      int64_t n = 0;
      for (const auto& p : unit) n += p.numel();
      const bool sharded = backend == "fsdp" && options.value("sharding_strategy", "FULL_SHARD") != "NO_SHARD";
      total += sharded ? (n + world - 1) / world : n;
    }
  }
  return total;
}

}  // namespace zb::bench::projection
