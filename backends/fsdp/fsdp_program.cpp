// fsdp_program.cpp — FSDP-mode's projection program (see fsdp_program.hpp), moved from the
// projection's schedule.cpp: it mirrors fsdp_engine.cpp function by function (comments name the
// engine function a block follows); kAsyncDevice follows upstream FSDP1's CUDA streams
// (torch/distributed/fsdp/_runtime_utils.py, rate limit _limiter_utils.py _FreeEventQueue).
#include "backends/fsdp/fsdp_program.hpp"

#include <deque>
#include <string>
#include <vector>

#include "backends/fsdp/fsdp_options.hpp"
#include "backends/fsdp/fsdp_padding.hpp"
#include "backends/fsdp/fsdp_wrap.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::fsdp {

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

int64_t shard_elements(const models::ModelConfig& model, const json& options, int world);

// ---------------------------------------------------------------- FSDP-mode (fsdp_engine.cpp)
Program fsdp_program(const ProgramInput& in, const CollectiveCost& cost) {
  // The report's resolved options as the engine's record (a key a report lacks: the default).
  const FsdpResolved r = fsdp_resolved_from_json(in.options);
  const ShardingStrategy strategy = r.options.sharding_strategy;
  if (is_hybrid(strategy))
    throw UsageError("projection: fsdp sharding_strategy " + to_string(strategy) +
                     " is not modelled (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD are)");
  if (wrapping(r.options, in.model) == Wrapping::kWholeModel)
    throw UsageError("projection: fsdp auto_wrap_policy " + r.options.auto_wrap_policy +
                     " (one FSDP unit for the whole model) is not modelled (units per decoder block are)");
  const bool sharded = strategy != ShardingStrategy::kNoShard;
  const bool reshard_after_forward = strategy == ShardingStrategy::kFullShard;
  const BackwardPrefetch prefetch = r.options.backward_prefetch;
  const bool forward_prefetch = r.options.forward_prefetch;
  const bool limit = r.options.limit_all_gathers;
  const ProgramDtype param = program_dtype_or(r.param_dtype, program_compute_dtype(in.precision));
  const ProgramDtype reduce = program_dtype_or(r.reduce_dtype, param);
  const int W = in.world, S = sharded ? W : 1;
  const bool cpu = in.exec == ExecModel::kHostIsDevice;
  // CPUOffload(offload_params=True) (fsdp_offload.cpp, docs/backends/fsdp.md "Offload"): each
  // unit's host shard goes to the device once per forward and once per backward (_pre_unshard,
  // on the pre-unshard stream; the all-gather follows it), its gradient shard back after the
  // reduction (_offload_grad, on the post-backward stream; the final callback syncs the host),
  // and the optimizer steps on the host (the calibration's host AdamW rate).
  const bool offload = r.options.offload_params;
  const int64_t store_bytes = in.precision == "low" ? 2 : 4;  // the flat parameter's dtype

  const auto specs = models::unit_param_specs(in.model);
  const int U = int(specs.size()), L = U - 1;
  std::vector<int64_t> padded;
  for (const auto& unit : specs) {
    int64_t n = 0;
    for (const auto& p : unit) n += p.numel();
    padded.push_back(padded_flat_numel(n, S, sharded));  // fsdp_padding.hpp, as the closed form's
  }
  Program p;
  std::vector<bool> unsharded(size_t(U), false), needs_pre_backward(size_t(U), false);
  std::vector<int> gather(size_t(U), -1);  // the all-gather (or, unsharded, the offload copy) to wait for
  int pass = 0;                              // forward / backward passes so far: one host copy per unit each
  std::vector<int> copied(size_t(U), -1);
  auto pre_unshard_copy = [&](int u) -> int {  // _pre_unshard under offload: host shard -> device
    if (!offload || copied[size_t(u)] == pass) return -1;
    copied[size_t(u)] = pass;
    const int64_t bytes = padded[size_t(u)] / S * store_bytes;
    return p.copy(true, "unit" + std::to_string(u) + " shard", bytes, in.offload.copy_s(true, bytes), false);
  };
  std::deque<int> free_events;  // compute action after which each reshard recorded its event
  int last_compute = -1;

  auto issue_unshard = [&](int u) {  // issue_unshard
    if (unsharded[size_t(u)]) return;
    if (limit && free_events.size() >= 2) {  // _FreeEventQueue: wait for the oldest of two frees
      p.host_sync(free_events.front());
      free_events.pop_front();
    }
    const int copy = pre_unshard_copy(u);
    if (sharded) {
      const int64_t bytes = padded[size_t(u)] * param.bytes;
      gather[size_t(u)] = p.issue(CollectiveKind::kAllGather, "unit" + std::to_string(u), bytes,
                                  cost(CollectiveKind::kAllGather, param.name, bytes, W, in.nodes), false, copy);
    } else {
      gather[size_t(u)] = copy;
    }
    unsharded[size_t(u)] = true;
  };
  auto wait_gather = [&](int u) {
    if (gather[size_t(u)] >= 0) p.wait(gather[size_t(u)]);
    gather[size_t(u)] = -1;
  };
  auto unshard = [&](int u) {  // unshard: issue, then wait
    if (unsharded[size_t(u)] && gather[size_t(u)] < 0) gather[size_t(u)] = pre_unshard_copy(u);  // no all-gather
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
    std::vector<int> grad_copies;                    // offload: gradient shards on their way to the host
    // Forward: the root's all-gather, then each block (unit_weights / after_unit_forward).
    ++pass;
    unshard(0);
    if (forward_prefetch && L >= 1) issue_unshard(1);
    last_compute = p.compute("F0", in.costs.root_forward().first);  // the embedding, before block 1's pre-forward
    for (int u = 1; u <= L; ++u) {
      unshard(u);
      if (forward_prefetch && u + 1 <= L) issue_unshard(u + 1);
      last_compute = p.compute("F" + std::to_string(u), unit_share(in.costs.forward_s, size_t(u)));
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
      if (prefetch == BackwardPrefetch::kBackwardPost) prefetch_backward(u);
      if (!sync) return;  // no_sync: the unsharded gradient accumulates, no reduction
      const int64_t bytes = padded[size_t(u)] * reduce.bytes;
      const int64_t grad_bytes = padded[size_t(u)] / S * store_bytes;  // _cpu_grad: the shard, flat param dtype
      if (sharded) {
        const int rs = p.issue(CollectiveKind::kReduceScatter, "unit" + std::to_string(u), bytes,
                               cost(CollectiveKind::kReduceScatter, reduce.name, bytes, W, in.nodes), true);
        if (cpu) {  // finish_reductions: the host waits for the previous unit's reduce-scatter
          for (int r : pending) p.wait(r);
          pending.clear();
        }
        pending.push_back(rs);
        issued_this_backward.push_back(rs);
        if (offload)  // _offload_grad on the post-backward stream, after the reduce-scatter
          grad_copies.push_back(p.copy(false, "unit" + std::to_string(u) + " grad", grad_bytes,
                                       in.offload.copy_s(false, grad_bytes), true, rs));
      } else {
        const int ar = p.issue(CollectiveKind::kAllReduce, "unit" + std::to_string(u), bytes,
                               cost(CollectiveKind::kAllReduce, reduce.name, bytes, W, in.nodes), true);
        p.wait(ar);
        if (offload)  // NO_SHARD's copy to the host is blocking
          p.host_wait(p.copy(false, "unit" + std::to_string(u) + " grad", grad_bytes,
                             in.offload.copy_s(false, grad_bytes), true, ar));
      }
    };
    ++pass;
    if (offload && unsharded[0]) {  // the root's pre-backward: its host shard again (no all-gather)
      const int c = pre_unshard_copy(0);
      if (c >= 0) p.wait(c);
    }
    if (prefetch == BackwardPrefetch::kBackwardPre) prefetch_backward(0);
    last_compute = p.compute("B0", in.costs.root_backward().first);  // loss, LM head, final norm
    for (int u = L; u >= 1; --u) {
      if (needs_pre_backward[size_t(u)]) {
        unshard(u);  // pre_backward
      } else if (offload) {  // still unsharded (SHARD_GRAD_OP, NO_SHARD): _pre_unshard copies all the same
        const int c = pre_unshard_copy(u);
        if (c >= 0) p.wait(c);
      }
      needs_pre_backward[size_t(u)] = false;
      if (prefetch == BackwardPrefetch::kBackwardPre) prefetch_backward(u);
      last_compute = p.compute("B" + std::to_string(u), unit_share(in.costs.backward_s, size_t(u)));
      post_backward(u);
    }
    last_compute = p.compute("B0", in.costs.root_backward().second);  // the embedding's gradient: the root's last
    post_backward(0);
    // post_backward_final: every reduce-scatter is waited for before the optimizer or the next
    // micro-batch (CUDA: the compute stream waits for the post-backward stream).
    for (int r : cpu ? pending : issued_this_backward) p.wait(r);
    for (int c : grad_copies) p.host_wait(c);  // offload: the final callback synchronises the host
    if (free_in_backward)
      for (int u = 0; u < U; ++u) reshard(u);
  }
  // optimizer_step: the global grad norm's all-reduce (one fp32), then clip + AdamW on the shard.
  if (sharded) {
    // Offload (fsdp_offload.cpp clip_grad_norm_): the host's local norm goes to the device for the
    // all-reduce, the total comes back to the host (`total_norm.cpu()`, blocking).
    const int up = offload ? p.copy(true, "grad_norm", 4, in.offload.copy_s(true, 4), true) : -1;
    const int ar = p.issue(CollectiveKind::kAllReduce, "grad_norm", 4,
                           cost(CollectiveKind::kAllReduce, "fp32", 4, W, in.nodes), true, up);
    p.wait(ar);
    if (offload) p.host_wait(p.copy(false, "grad_norm", 4, in.offload.copy_s(false, 4), true, ar));
  }
  if (offload)  // clip + AdamW on the host shards: the calibration's host AdamW rate per element
    p.compute("host optimizer", in.offload.host_optimizer_s(shard_elements(in.model, in.options, W)));
  else
    p.compute("optimizer", in.costs.optimizer_s);
  p.compute("other", in.costs.other_s);
  return p;
}

// Per rank: sum over units of ceil(numel_u / W) flat-shard elements (NO_SHARD: numel_u).
int64_t shard_elements(const models::ModelConfig& model, const json& options, int world) {
  const bool sharded = fsdp_resolved_from_json(options).options.sharding_strategy != ShardingStrategy::kNoShard;
  int64_t total = 0;
  for (const auto& unit : models::unit_param_specs(model)) {
    int64_t n = 0;
    for (const auto& p : unit) n += p.numel();
    total += flat_shard_numel(n, world, sharded);
  }
  return total;
}

// FSDP1 runs NO_SHARD at world size 1 (_init_utils.py _init_core_state) and its report keeps what
// was asked for (FsdpResolved::sharding_strategy_requested): at more ranks the requested strategy
// runs. At world size 1, or with nothing recorded, the options stand as they are.
json fsdp_options_at_world(const json& options, int world) {
  FsdpResolved r = fsdp_resolved_from_json(options);
  if (!r.sharding_strategy_requested || world <= 1) return options;
  r.options.sharding_strategy = *r.sharding_strategy_requested;
  r.sharding_strategy_requested.reset();
  return to_json(r);
}
}  // namespace

common::ProjectionHooks projection_hooks() {
  common::ProjectionHooks h;
  h.program = fsdp_program;
  h.shard_elements = shard_elements;
  h.options_at_world = fsdp_options_at_world;
  h.per_unit_times = true;
  return h;
}

}  // namespace zb::backends::fsdp
