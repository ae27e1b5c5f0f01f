// fsdp2_estimate.cpp — fsdp2's pre-flight peak estimate (BackendInfo::training.estimate_peak; the shared
// terms and moments are backends/memory_estimate.hpp's, docs/metrics.md; CPUOffloadPolicy's
// terms fsdp2_offload_estimate.cpp's). Owns: FSDP2's own terms, as the engine (fsdp2_*.cpp)
// allocates them. Must not: allocate or measure anything.
#include "backends/fsdp2/fsdp2_engine.hpp"

#include <algorithm>

#include "backends/fsdp2/fsdp2_layout.hpp"
#include "backends/fsdp2/fsdp2_offload_estimate.hpp"
#include "backends/memory_estimate.hpp"

namespace zb::backends::fsdp2 {

using namespace estimate;

// fsdp2: every parameter Shard(0) over the mesh's dp_shard ranks S (padded to ceil(dim0/S) rows),
// one all-gather per fully_shard group into a [S, sum of padded shards] output in the compute
// dtype p, copied out into each parameter's [S * padded rows] buffer (backends/fsdp2/, docs/
// backends/fsdp2.md); gradients in p, reduce-scattered per group in r, kept sharded in the
// sharded dtype s and freed each step (zero_grad(set_to_none=True)).
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo) {
  const auto& o = fsdp2_options(spec.options);
  const auto d = dtypes_for(spec.precision, o);
  const auto layout = shard_layout(spec, topo);  // the mesh's dp_shard ranks
  const int S = layout.shard_size;
  PeakEstimate e = for_layout(layout);
  const int s = int(c10::elementSize(d.orig)), p = int(c10::elementSize(d.compute())),
            r = int(c10::elementSize(d.comm_reduce()));
  add_common(e, spec, closed_form_bytes(spec, topo, rank), p, gloo, /*grads_set_to_none=*/true);
  const auto& m = spec.model;
  const auto param_specs = models::unit_param_specs(m);
  // Per group: its unsharded all-gather size (S x the padded shards, elements) and its unpadded
  // numel (what autograd's gradients cover).
  int64_t kept = 0, kept_numel = 0, block = 0, block_numel = 0, largest_local = 0, all = 0, all_numel = 0;
  for (const auto& g : group_specs(m, o)) {
    int64_t shard = 0, numel = 0;
    for (const auto& [u, i] : g.params) {
      const auto l = layout_param(param_specs[size_t(u)][size_t(i)], u, i, S, layout.shard_index(rank));
      shard += l.padded_shard_numel();
      numel += l.numel;
      largest_local = std::max(largest_local, l.local_numel());
    }
    const int64_t unsharded = shard * S;
    all += unsharded;
    all_numel += numel;
    if (g.reshard_after_forward_false) {
      kept += unsharded;
      kept_numel += numel;
    } else if (g.kind == GroupKind::kBlock) {
      block = std::max(block, unsharded);
      block_numel = std::max(block_numel, numel);
    }
  }
  const int64_t L = std::max<int64_t>(1, m.layers);
  const bool raf_false = o.reshard_after_forward == kReshardFalse || S == 1;
  // The groups held unsharded at the loss head and in a block's backward: those never resharded
  // after forward (the root, accelerate's tail), the current block, and the previous block
  // prefetched (_backward_prefetch) with its all-gather output [S, shard] in p while it is in
  // flight — on Gloo with a flat output-sized staging copy (ProcessGroupGloo allgather). With
  // reshard_after_forward=False every group stays unsharded from forward to its post-backward;
  // with an int N each block keeps 1/N of its unsharded data (to_sharded_post_forward).
  if (raf_false) {
    e.terms.push_back({"unsharded groups", kFwdBwd, all * p,
                       "sum(S*padded shards)*p: reshard_after_forward=False keeps every group unsharded"});
  } else {
    const int64_t staging = gloo ? block * p : 0;
    e.terms.push_back({"unsharded groups", kLossHead, (kept + block) * p + staging,
                       std::string("(kept + block)*p (groups never resharded, the last block's prefetch output)") +
                           (gloo ? " + block*p (Gloo's flat all-gather output)" : "")});
    e.terms.push_back({"unsharded groups", kBackward, (kept + 2 * block) * p + staging,
                       std::string("(kept + 2*block)*p (the current block, the previous one's prefetch output)") +
                           (gloo ? " + block*p (Gloo's flat all-gather output)" : "")});
    if (o.reshard_after_forward > 1)
      e.terms.push_back({"post-forward shards", kFwdBwd, L * block / o.reshard_after_forward * p,
                         "L*block/N*p (reshard_after_forward=N keeps 1/N of each block)"});
  }
  // Gradients: autograd's unsharded gradients in p — the kept groups' (the LM head's arrives in
  // the loss head's backward and waits for the final callback) and one block's — then the block's
  // post-backward copies them into a [S, shard] reduce-scatter input in r (chunk_cat) that stays
  // alive until the next group's post-backward (ReduceScatterState), Gloo cloning it while in
  // flight. The in-flight one belongs to the block after, whose activations are freed by then
  // (what it saved, or what a checkpointed block recomputed: block_saved_bytes either way).
  const int64_t held = kept_numel * p + block_numel * p;
  const int64_t in_flight = S > 1 ? block * r * (gloo ? 2 : 1) : 0;
  const int64_t block_act = models::block_saved_bytes(spec.model, spec.train.micro_batch, spec.train.seq_len, p);
  e.terms.push_back({"unsharded gradients", kBackward,
                     std::max<int64_t>(0, held + std::max<int64_t>(0, in_flight - block_act) - block_act),
                     "(kept numel + block numel)*p + max(0, in-flight reduce-scatter block*r" +
                         std::string(gloo ? "*2 (Gloo's clone)" : "") +
                         " - a block's activations) - a block's activations"});
  // Under no_sync accumulation (set_requires_gradient_sync(False)) every unsharded gradient is
  // held from the first micro-batch's backward to the last one's post-backward, in p (or upcast
  // once to reduce_dtype when it is set).
  if (spec.train.grad_accum > 1 && !o.sync_each_batch && !spec.train.sync_each_batch) {
    const int held_bytes = d.reduce ? r : p;
    e.terms.push_back({"accumulated unsharded gradients", kFwdBwd, all_numel * held_bytes,
                       "params*" + std::string(d.reduce ? "r" : "p") + " (no_sync: held between micro-batches)"});
  }
  // The final callback: the kept groups' post-backward (the root's inputs need no gradient): its
  // gradients and the reduce-scatter input, then the input, Gloo's clone and the output
  // (cast to s when r differs).
  const int64_t kept_shard = kept / std::max(1, S);
  const int64_t rs_tail = std::max(kept_numel * p, (S > 1 && gloo ? kept * r : 0) + kept_shard * r) +
                          (r != s ? kept_shard * s : 0);
  e.terms.push_back({"root gradient reduce-scatter", kEndOfBackward, kept * r + rs_tail,
                     "kept*r + max(kept numel*p, " + std::string(S > 1 && gloo ? "kept*r (Gloo's clone) + " : "") +
                         "kept/S*r)" + (r != s ? " + kept/S*s (cast)" : "")});
  // Optimizer: one vector_norm per local gradient (an fp32 copy of a bf16 one on CPU), the [P]
  // stack; fused AdamW adds nothing full-size.
  add_optimizer_transient(e, largest_local, s);
  add_offload_terms(e, spec, topo, rank);  // CPUOffloadPolicy (backends/fsdp2/fsdp2_offload_estimate.cpp)
  return e;
}

}  // namespace zb::backends::fsdp2
