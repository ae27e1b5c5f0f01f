// fsdp2_program.cpp — FSDP2-mode's projection program (see fsdp2_program.hpp), moved from the
// projection's schedule.cpp: it mirrors fsdp2_engine.cpp; kAsyncDevice follows upstream's
// streams (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, _fsdp_collectives.py).
// Each parameter's padded shard is fsdp2_layout's layout_param, as the closed form's.
#include "backends/fsdp2/fsdp2_program.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "backends/fsdp2/fsdp2_layout.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::fsdp2 {

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

// ---------------------------------------------------------------- FSDP2-mode (fsdp2_engine.cpp)
// The default grouping (PyTorch's recipe: fully_shard on each block, then on the model): group 0
// is the root (embedding, final norm, LM head; reshard_after_forward None -> False in
// _lazy_init), groups 1..L the blocks. Upstream (torch/distributed/fsdp/_fully_shard/): the
// all-gather streams never wait for compute except through the copy-out events, so the host
// issuing a group's all-gather in its pre-forward is FSDP2's implicit prefetch (kAsyncDevice:
// ready at once); the reduce-scatter stream waits the current stream (foreach_reduce); the
// current stream waits the previous group's reduce-scatter event in the next post-backward
// (_fsdp_param_group.py post_backward) and every reduction in finalize_backward.
Program fsdp2_program(const ProgramInput& in, const CollectiveCost& cost) {
  // The report's resolved options as the engine's record (a key a report lacks: the default).
  const Fsdp2Resolved r = fsdp2_resolved_from_json(in.options);
  const Fsdp2Options& o = r.options;
  auto refuse = [](const std::string& what) {
    throw UsageError("projection: fsdp2 " + what +
                     " is not modelled (the default grouping, reshard_after_forward "
                     "true/false, implicit prefetch, no HSDP are)");
  };
  if (o.grouping != "root") refuse("grouping " + o.grouping);
  if (o.auto_wrap_policy != "TRANSFORMER_BASED_WRAP") refuse("auto_wrap_policy " + o.auto_wrap_policy);
  if (o.modules_to_forward_prefetch > 0) refuse("modules_to_forward_prefetch");
  if (o.modules_to_backward_prefetch > 0) refuse("modules_to_backward_prefetch");
  if (r.mesh_dp_replicate > 1) refuse("HSDP (dp_replicate_size > 1)");
  // CPUOffloadPolicy's copies (fsdp2_offload.cpp) are not scheduled here yet (fsdp CPUOffload is).
  if (o.offloads()) refuse("offload_policy " + o.offload_policy);
  if (o.reshard_after_forward != kReshardTrue && o.reshard_after_forward != kReshardFalse)
    refuse("reshard_after_forward " + reshard_after_forward_text(o.reshard_after_forward) + " (a post-forward mesh)");
  const bool reshard_blocks = o.reshard_after_forward == kReshardTrue;
  const ProgramDtype gather = program_dtype_or(r.all_gather_dtype, program_compute_dtype(in.precision));
  const ProgramDtype reduce = program_dtype_or(r.reduce_scatter_dtype, gather);
  const int W = in.world;
  const bool cpu = in.exec == ExecModel::kHostIsDevice;
  const auto specs = models::unit_param_specs(in.model);
  const int L = int(specs.size()) - 1;
  // Shard(0) with dim 0 padded to a multiple of W (_fsdp_param.py _init_sharded_param): the
  // all-gather output is W x sum of padded shards, the reduce-scatter input the same.
  std::vector<int64_t> padded;
  for (size_t u = 0; u < specs.size(); ++u) {
    int64_t n = 0;
    for (size_t i = 0; i < specs[u].size(); ++i)
      n += layout_param(specs[u][i], int(u), int(i), W, 0).padded_shard_numel();
    padded.push_back(n * W);
  }
  Program p;
  std::vector<bool> unsharded(size_t(L + 1), false);
  std::vector<int> gather_of(size_t(L + 1), -1);
  auto unshard = [&](int g) {  // unshard -> foreach_all_gather (no collective at W=1)
    if (unsharded[size_t(g)] || gather_of[size_t(g)] >= 0 || W == 1) return;
    const int64_t bytes = padded[size_t(g)] * gather.bytes;
    gather_of[size_t(g)] = p.issue(CollectiveKind::kAllGather, "unit" + std::to_string(g), bytes,
                                   cost(CollectiveKind::kAllGather, gather.name, bytes, W, in.nodes), false);
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
      p.compute("F" + std::to_string(g), unit_share(in.costs.forward_s, size_t(g)));
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
                                   cost(CollectiveKind::kReduceScatter, reduce.name, bytes, W, in.nodes), true));
    };
    if (L >= 1) unshard(L);
    p.compute("B0", in.costs.root_backward().first);
    for (int g = L; g >= 1; --g) {
      unshard(g);
      wait_for_unshard(g);
      if (g - 1 >= 1) unshard(g - 1);
      p.compute("B" + std::to_string(g), unit_share(in.costs.backward_s, size_t(g)));
      post_backward(g);
    }
    p.compute("B0", in.costs.root_backward().second);  // the embedding's gradient
    post_backward(0);                                  // the root at the final callback (its input needs no gradient)
    for (int r : reductions) p.wait(r);                // finalize_backward
  }
  // clip_grad_norm_ over DTensor gradients: one all-reduce of every parameter's squared local
  // norm (the stacked _NormPartial vector redistributed) on the shard mesh, in the sharded
  // gradients' dtype.
  if (W > 1) {
    const ProgramDtype g = program_dtype_or(r.sharded_param_dtype, ProgramDtype{"fp32", 4});
    int64_t params = 0;
    for (const auto& unit : models::unit_param_specs(in.model)) params += int64_t(unit.size());
    const int64_t bytes = params * g.bytes;
    const int ar = p.issue(CollectiveKind::kAllReduce, "grad_norm", bytes,
                           cost(CollectiveKind::kAllReduce, g.name, bytes, W, in.nodes), true);
    p.wait(ar);
  }
  p.compute("optimizer", in.costs.optimizer_s);
  p.compute("other", in.costs.other_s);
  return p;
}

// Per rank: per parameter, Shard(0)'s padded chunk, ceil(dim0 / W) rows (rank 0's, the most).
int64_t shard_elements(const models::ModelConfig& model, const json& /*options*/, int world) {
  int64_t total = 0;
  const auto units = models::unit_param_specs(model);
  for (size_t u = 0; u < units.size(); ++u)
    for (size_t i = 0; i < units[u].size(); ++i)
      total += layout_param(units[u][i], int(u), int(i), world, 0).padded_shard_numel();
  return total;
}
}  // namespace

common::ProjectionHooks projection_hooks() {
  common::ProjectionHooks h;
  h.program = fsdp2_program;
  h.shard_elements = shard_elements;
  h.per_unit_times = true;
  return h;
}

}  // namespace zb::backends::fsdp2
