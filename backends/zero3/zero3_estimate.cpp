// zero3_estimate.cpp — zero3's pre-flight peak estimate (BackendInfo::training.estimate_peak; the shared
// terms and moments are backends/memory_estimate.hpp's, docs/metrics.md; offload's terms
// zero3_offload_estimate.cpp's). Owns: ZeRO3-mode's own terms, as zero3_engine.cpp and its
// coordinator allocate them. Must not: allocate or measure anything.
#include "backends/zero3/zero3_engine.hpp"

#include <algorithm>

#include "backends/memory_estimate.hpp"
#include "backends/zero3/zero3_layout.hpp"
#include "backends/zero3/zero3_offload_estimate.hpp"

namespace zb::backends::zero3 {

namespace {
using namespace estimate;

int bytes_of(const std::string& dtype_name, int fallback) {
  if (dtype_name == "fp32") return 4;
  if (dtype_name == "bf16" || dtype_name == "fp16") return 2;
  return fallback;
}
}  // namespace

// zero3: per-parameter partitions; gathered parameters and gradient buckets in model/comm dtypes.
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo) {
  const auto layout = shard_layout(spec, topo);
  const int world = layout.shard_size;  // ZeRO-3 partitions over every rank
  PeakEstimate e = for_layout(layout);
  const auto& o = zero3_options(spec.options);
  const int md = spec.precision == "bf16" || spec.precision == "fp16" ? 2 : 4;
  const int comm = bytes_of(o.communication_data_type, md), ga = bytes_of(o.grad_accum_dtype, md);
  add_common(e, spec, expected_bytes(spec, topo, rank), md, gloo);
  int64_t np_padded = 0, largest = 0, largest_root = 0, largest_block = 0, total_numel = 0, total_padded = 0, local = 0;
  std::vector<int64_t> parts;
  const auto units = models::unit_param_specs(spec.model);
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& ps : units[u]) {
      const int64_t numel = ps.numel(), padded = (numel + world - 1) / world * world;
      total_numel += numel;
      total_padded += padded;
      local += padded / world;
      parts.push_back(padded / world);
      largest = std::max(largest, padded);
      int64_t& unit_largest = u == size_t(models::kRootUnit) ? largest_root : largest_block;
      unit_largest = std::max(unit_largest, padded);
      if (numel > o.stage3_param_persistence_threshold) np_padded += padded;
    }
  // Gathered non-persistent parameters: with a recorded trace a parameter reused within
  // stage3_max_reuse_distance elements stays, and prefetch adds up to stage3_prefetch_bucket_size
  // (within stage3_max_live_parameters). An upper bound; small models keep everything.
  const int64_t prefetch = std::min(o.stage3_prefetch_bucket_size, o.stage3_max_live_parameters);
  const int64_t gathered = std::min(np_padded, o.stage3_max_reuse_distance + prefetch + largest);
  e.terms.push_back({"gathered parameters", kFwdBwd, gathered * md,
                     "min(non-persistent padded, max_reuse_distance + min(prefetch, max_live) + largest)*model bytes"});
  // A parameter's gradient arrives as the weight's gradient expanded to its padded buffer. The
  // root's (the LM head's) comes first in backward, before any block's backward transients or
  // bucket flush: its own moment; a block's during its block's backward.
  e.terms.push_back({"root gradient transient", kRootGradient, 2 * largest_root * md,
                     "2*largest padded root parameter*model bytes (the LM head's, the first gradient of backward)"});
  e.terms.push_back({"gradient transient", kBackward, 2 * largest_block * md,
                     "2*largest padded block parameter*model bytes"});
  // The reduce bucket holds each gradient (padded, comm dtype) until reduce_bucket_size elements;
  // a flush copies them into a [W, sum P] staging buffer (+ the [sum P] output; Gloo clones the
  // staging buffer too), mid-backward when the bucket is smaller than the model, and at its end.
  const double per_elem = double(total_padded) / double(std::max<int64_t>(1, total_numel));
  const int64_t bucket = int64_t(double(std::min(o.reduce_bucket_size, total_numel)) * per_elem);
  const double flush_factor = 2.0 + 1.0 / world + (gloo ? 1.0 : 0.0);
  const std::string flush_formula =
      std::string("(2 + 1/W") + (gloo ? " + 1" : "") + ")*min(reduce_bucket_size, params)*comm bytes (gradients, "
      "staging copy, output" + (gloo ? ", Gloo's clone" : "") + ")";
  if (o.reduce_bucket_size < total_numel)
    e.terms.push_back({"gradient bucket flush", kBackward, int64_t(flush_factor * double(bucket * comm)), flush_formula});
  e.terms.push_back({"final gradient bucket flush", kEndOfBackward, int64_t(flush_factor * double(bucket * comm)),
                     flush_formula});
  // Optimizer: per sub-group an fp32 gradient copy (when grad_accum_dtype is not fp32) and AdamW's
  // denominator on the fp32 master; the global norm's fp32 square before that.
  int64_t sub_group = 0, in_group = 0;
  const bool split = o.sub_group_size < local;
  for (size_t i = 0; i < parts.size() && split; ++i) {
    in_group += parts[i];
    if (in_group >= o.sub_group_size || i + 1 == parts.size()) {
      sub_group = std::max(sub_group, in_group);
      in_group = 0;
    }
  }
  if (!split) sub_group = local;
  const int64_t norm = local * 4 * (ga == 4 ? 1 : 2);
  const int64_t step = sub_group * ((ga == 4 ? 0 : 4) + 2 * 4);
  if (norm >= step)
    e.terms.push_back({"grad-norm transient", kOpt, norm,
                       "local partitions*4 (fp32 square" + std::string(ga == 4 ? ")" : " and fp32 copy)")});
  else
    e.terms.push_back({"sub-group step transient", kOpt, step,
                       "largest sub-group*(" + std::string(ga == 4 ? "" : "4 + ") + "2*4) (fp32 gradient, AdamW denominator)"});
  // offload_optimizer / offload_param (zero3_offload_estimate.cpp); the partitions are fetched
  // again in backward only when not every non-persistent parameter stays gathered.
  add_offload_terms(e, spec, topo, rank, /*refetch_in_backward=*/gathered < np_padded);
  return e;
}

}  // namespace zb::backends::zero3
