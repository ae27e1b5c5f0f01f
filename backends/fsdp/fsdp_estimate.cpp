// fsdp_estimate.cpp — fsdp's (FSDP1's) pre-flight peak estimate (BackendInfo::training.estimate_peak;
// the shared terms and moments are backends/memory_estimate.hpp's, docs/metrics.md; CPUOffload's
// terms fsdp_offload_estimate.cpp's). Owns: FSDP1's own terms, as fsdp_engine.cpp allocates
// them. Must not: allocate or measure anything.
#include "backends/fsdp/fsdp_engine.hpp"

#include <algorithm>

#include "backends/fsdp/fsdp_layout.hpp"
#include "backends/fsdp/fsdp_offload_estimate.hpp"
#include "backends/fsdp/fsdp_wrap.hpp"
#include "backends/memory_estimate.hpp"

namespace zb::backends::fsdp {

using namespace estimate;

// fsdp: flat shards of S-padded units; unsharded units in the param dtype p while gathered;
// gradients reduced in r.
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& world, int rank, bool gloo) {
  const auto& o = fsdp_options(spec.options);
  // The shard group the engine builds (HYBRID_SHARD: the node's ranks, not the world) and each
  // unit's padded flat parameter, from the run's layout.
  const auto layout = shard_layout(spec, world);
  const int S = layout.shard_size;
  PeakEstimate e = for_layout(layout);
  const bool fp32_flat = spec.precision == "mixed" || spec.precision == "fp16";  // fp32 flat, low-precision compute
  const int s = fp32_flat || spec.precision == "fp32" ? 4 : 2;
  const int p = spec.precision == "fp32" ? 4 : 2;
  const int r = spec.precision == "fp32" ? 4 : fp32_flat && o.reduce_dtype == "fp32" ? 4 : p;
  add_common(e, spec, expected_bytes(spec, world, rank), p, gloo, /*grads_set_to_none=*/true);
  const bool sharded = S > 1;
  int64_t root = 0, block = 0, all = 0;
  for (size_t u = 0; u < layout.unit_padded.size(); ++u) {
    const int64_t padded = layout.unit_padded[u];  // numel when unsharded
    if (u == 0) root = padded;
    else block = std::max(block, padded);
    all += padded;
  }
  const bool prefetch = o.backward_prefetch != BackwardPrefetch::kNone;
  // NO_WRAP (or a size-based policy that wraps nothing): the root is the only unit — gathered from
  // its pre-forward to its post-backward under every strategy, no prefetch, no per-block gradient.
  const bool whole = wrapping(o, spec.model) == Wrapping::kWholeModel;
  if (whole) {
    if (sharded || p != s)
      e.terms.push_back({"unsharded units", kFwdBwd, all * p,
                         "model*p: one unit (NO_WRAP), gathered from the root's pre-forward to its post-backward"});
    // Autograd holds every parameter's gradient (p) until the split's backward concatenates them
    // into the flat gradient, after the embedding's arrives; without activation checkpointing a
    // block's saved activations are freed before the last blocks' gradients are made.
    const bool checkpointed = spec.train.activation_checkpointing.enabled() || o.activation_checkpointing;
    const int64_t block_act = models::block_saved_bytes(spec.model, spec.train.micro_batch, spec.train.seq_len, p);
    // (NO_SHARD: the gradient state term, model-sized, already counts them.)
    if (sharded)
      e.terms.push_back({"unsharded gradients", kBackward, std::max<int64_t>(0, all * p - (checkpointed ? 0 : block_act)),
                         checkpointed ? "model*p (every parameter's gradient; a checkpointed block's recompute is live "
                                        "while the first block's gradients are made)"
                                      : "model*p - a block's activations (every parameter's gradient, held until the "
                                        "flat gradient is assembled)"});
    // no_sync accumulation: the unsharded flat gradient held between micro-batches (as per block).
    if (sharded && spec.train.grad_accum > 1 && !spec.train.sync_each_batch)
      e.terms.push_back({"accumulated unsharded gradients", kFwdBwd, all * p,
                         "model*p (no_sync: held between micro-batches)"});
    // NO_SHARD in one dtype all-reduces the flat gradient in place: it is the gradient state itself.
    const bool flat_grad = sharded || p != s;
    e.terms.push_back({sharded ? "flat gradient reduce-scatter" : "flat gradient all-reduce", kEndOfBackward,
                       (flat_grad ? all * p : 0) + (r != p ? all * r : 0) + (sharded && gloo ? all * r : 0),
                       std::string(flat_grad ? "model*p (the flat gradient)" : "0 (reduced in place: the gradient state)") +
                           (r != p ? " + model*r" : "") + (sharded && gloo ? " + model*r (Gloo's clone)" : "")});
    add_optimizer_transient(e, std::min(spec.model.vocab * spec.model.hidden, all / (sharded ? S : 1)), s);
    add_offload_terms(e, spec, world, rank, gloo);
    return e;
  }
  if (sharded && !reshard_after_forward(o.sharding_strategy)) {
    e.terms.push_back({"unsharded units", kFwdBwd, all * p,
                       "sum(padded units)*p: " + to_string(o.sharding_strategy) +
                           " keeps every unit gathered from forward to its post-backward"});
  } else if (!sharded) {
    if (p != s) e.terms.push_back({"bf16 unit copies", kFwdBwd, all * p, "sum(units)*p: NO_SHARD's compute copies"});
  } else {
    // The root is never resharded after forward; the root's pre-backward hook (on the loss)
    // prefetches the last block (BACKWARD_PRE), and each block's pre-backward the next one.
    e.terms.push_back({"unsharded units", kLossHead, (root + (prefetch ? block : 0)) * p,
                       prefetch ? "(root + block)*p (the root, and the last block prefetched)" : "root*p"});
    e.terms.push_back({"unsharded units", kBackward, (root + (prefetch ? 2 : 1) * block) * p,
                       prefetch ? "(root + 2*block)*p (the root, the current block, the prefetched one)"
                                : "(root + block)*p"});
    // The prefetch all-gather runs while the loss head's backward computes: its input (the
    // shard cast to p under "mixed", _mp_shard) and, on Gloo, a flat output-sized staging buffer
    // (ProcessGroupGloo AsyncAllgatherWork).
    // The same for the next block's prefetch during a block's backward.
    const int64_t staging = (s != p ? block / S * p : 0) + (gloo ? block * p : 0);
    const std::string staging_formula = std::string(s != p ? "block/S*p (_mp_shard)" : "") +
                                        (s != p && gloo ? " + " : "") + (gloo ? "block*p (Gloo's flat output)" : "");
    if (prefetch && staging > 0) {
      e.terms.push_back({"prefetch all-gather staging", kLossHead, staging, staging_formula});
      e.terms.push_back({"prefetch all-gather staging", kBackward, staging, staging_formula});
    }
  }
  // A block's backward: autograd accumulates the unit's flat gradient (p) from each weight's
  // gradient expanded to the unit's size (NarrowBackward: another unit-sized tensor); the root's
  // flat gradient accumulates from the LM head's onward until the embedding's arrives last. The
  // previous unit's reduce-scatter is in flight meanwhile, its input held (and on Gloo cloned,
  // ProcessGroupGloo::reduce_scatter_tensor_coalesced), by when that unit's activations are freed.
  // A block's flat gradient is whole only once its own activations are freed, so one block's
  // activations come off the "backward" moment: what it saved, or what a checkpointed block
  // recomputed — the same bytes (block_saved_bytes), not the checkpointed input alone.
  const int64_t acc = root * p + 2 * block * p + (r != p ? block * r : 0);
  const int64_t in_flight = sharded ? block * r * (gloo ? 2 : 1) : 0;
  const int64_t block_act = models::block_saved_bytes(spec.model, spec.train.micro_batch, spec.train.seq_len, p);
  e.terms.push_back({"unsharded gradients", kBackward,
                     std::max<int64_t>(0, acc + std::max<int64_t>(0, in_flight - block_act) - block_act),
                     "(root + 2*block)*p" + std::string(r != p ? " + block*r" : "") +
                         " + max(0, in-flight reduce-scatter block*r" + (gloo ? "*2 (Gloo's clone)" : "") +
                         " - a block's activations) - a block's activations"});
  // Under no_sync accumulation (accelerate's non-final micro-batches; `if not
  // state._sync_gradients: return` in _post_backward_hook) each unit's unsharded flat gradient —
  // compute dtype p, unpadded — is held from the first micro-batch's backward to the last one's
  // post-backward (fsdp_engine.cpp unsharded_grad). NO_SHARD's reduced gradient is a model state.
  if (sharded && spec.train.grad_accum > 1 && !spec.train.sync_each_batch)
    e.terms.push_back({"accumulated unsharded gradients", kFwdBwd, models::count_params(spec.model).total * p,
                       "params*p (no_sync: held between micro-batches)"});
  // After the last gradient: the root's reduce-scatter input (and Gloo's clone of it).
  e.terms.push_back({"root gradient reduce-scatter", kEndOfBackward,
                     root * p + (r != p ? root * r : 0) + (sharded && gloo ? root * r : 0),
                     "root*p" + std::string(r != p ? " + root*r" : "") + (sharded && gloo ? " + root*r (Gloo's clone)" : "")});
  // The largest original-parameter view in this rank's shard (FSDP1 clips over per-parameter views).
  add_optimizer_transient(e, std::min(spec.model.vocab * spec.model.hidden, std::max(root, block) / (sharded ? S : 1)), s);
  add_offload_terms(e, spec, world, rank, gloo);  // CPUOffload (backends/fsdp/fsdp_offload_estimate.cpp)
  return e;
}

}  // namespace zb::backends::fsdp
