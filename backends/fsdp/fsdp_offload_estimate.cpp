// fsdp_offload_estimate.cpp — see fsdp_offload_estimate.hpp (the derivations are in its comments
// and in docs/backends/fsdp.md "Offload").
#include "backends/fsdp/fsdp_offload_estimate.hpp"

#include <c10/core/ScalarType.h>

#include <algorithm>

#include "backends/fsdp/fsdp_layout.hpp"

namespace zb::backends::fsdp {

ModelStateBytes offloaded_bytes(int64_t shard_bytes) {
  ModelStateBytes b;  // device: all zero at the end of backward
  b.host.params = shard_bytes;         // _local_shard
  b.host.grads = shard_bytes;          // _cpu_grad (kept between steps; zero_grad drops only .grad)
  b.host.optimizer = 2 * shard_bytes;  // AdamW exp_avg, exp_avg_sq (zeros_like the host shard)
  b.host.pinned = true;
  return b;
}

common::OffloadTraffic offload_traffic_per_step(const EngineSpec& spec, const Topology& topo, int rank) {
  const auto& o = fsdp_options(spec.options);
  if (!o.offload_params) return {};
  const auto l = shard_layout(spec, topo);
  const int64_t e = int64_t(c10::elementSize(dtypes_for(spec.precision, o).storage));
  const int64_t units = int64_t(l.unit_padded.size()), n = l.shard_numel(), a = spec.train.grad_accum;
  const bool sharded = l.shard_size > 1;
  bool holds_grad = false;  // some original parameter has elements in this rank's shard
  for (size_t u = 0; u < l.unit_padded.size(); ++u)
    holds_grad = holds_grad || int64_t(l.shard_index(rank)) * (l.unit_padded[u] / l.shard_size) < l.unit_numel[u];
  const int64_t norm_h2d = sharded && holds_grad ? 1 : 0, norm_d2h = sharded ? 1 : 0;
  common::OffloadTraffic t;
  t.h2d_copies = 2 * a * units + norm_h2d;
  t.h2d_bytes = 2 * a * n * e + 4 * norm_h2d;
  t.d2h_copies = units + norm_d2h;
  t.d2h_bytes = n * e + 4 * norm_d2h;
  return t;
}

void add_offload_terms(PeakEstimate& e, const EngineSpec& spec, const Topology& topo, int /*rank*/, bool /*gloo*/) {
  const auto& o = fsdp_options(spec.options);
  if (!o.offload_params) return;
  const auto l = shard_layout(spec, topo);
  const auto d = dtypes_for(spec.precision, o);
  const int64_t s = int64_t(c10::elementSize(d.storage)), S = l.shard_size;
  const bool sharded = S > 1, same_dtype = d.param == d.storage;
  const int64_t root = l.unit_padded.front();
  int64_t block = 0;
  for (size_t u = 1; u < l.unit_padded.size(); ++u) block = std::max(block, l.unit_padded[u]);
  // The optimizer step's gradient-norm transient reads the host gradients.
  for (auto& t : e.terms)
    if (t.name == "grad-norm transient") t.location = "host";
  // _saved_grad_shard: each unit's reduce-scattered gradient stays on the device until the final
  // callback's _finalize_params (after the last one, all of them).
  const int64_t grads = l.shard_numel() * s;
  for (const char* moment : {"backward", "end_of_backward"})
    e.terms.push_back({"device sharded gradients", moment, grads,
                       "sum(padded units)/S*s (_saved_grad_shard, until the final callback; copied to _cpu_grad)"});
  if (!sharded) {
    // NO_SHARD: flat_param_to(device) is the unit's flat parameter while it computes, freed at
    // each reshard (under mixed the bf16 copy already counted is it; the fp32 copy is a staging
    // copy dropped after the cast). In backward the root's copy is held to its end (the
    // embedding's gradient comes last) besides the block's.
    if (same_dtype) {
      e.terms.push_back({"device unit copies", "loss_head", root * s, "root*s (NO_SHARD: the root's device copy)"});
      e.terms.push_back({"device unit copies", "backward", (root + block) * s,
                         "(root + block)*s (NO_SHARD: the root's and the current block's device copies)"});
    }
    return;
  }
  // A prefetched all-gather in flight during the loss head's or a block's backward reads the
  // device copy of the host shard (flat_param_to(device)); under mixed that copy is dropped after
  // the cast and _mp_shard (already counted) is the input.
  const bool prefetch = o.backward_prefetch != BackwardPrefetch::kNone;
  const bool keeps_units = o.sharding_strategy == ShardingStrategy::kShardGradOp;
  if (prefetch && same_dtype && !keeps_units)
    for (const char* moment : {"loss_head", "backward"})
      e.terms.push_back({"offload h2d staging", moment, block / S * s,
                         "block/S*s (the prefetched all-gather's input: the host shard's device copy)"});
}

}  // namespace zb::backends::fsdp
