// zero0_estimate.cpp — zero0's pre-flight peak estimate (BackendInfo::training.estimate_peak; the shared
// terms and moments are backends/memory_estimate.hpp's, docs/metrics.md). Owns: zero0's own terms,
// as zero0_engine.cpp allocates them: everything whole on every rank (expected_bytes: parameters
// and gradients in the model dtype, bf16/fp16's fp32 master, two fp32 AdamW states). Must not:
// allocate or measure anything.
#include "backends/memory_estimate.hpp"
#include "backends/zero0/zero0_config.hpp"
#include "backends/zero0/zero0_engine.hpp"
#include "models/llama.hpp"

namespace zb::backends::zero0 {

using namespace estimate;

PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo) {
  PeakEstimate e = for_layout(shard_layout(spec, topo));
  const int md = spec.precision == "fp32" ? 4 : 2;
  add_common(e, spec, expected_bytes(spec, topo, rank), md, gloo);
  const auto& m = spec.model;
  const int64_t N = models::count_params(m).total, VH = m.vocab * m.hidden;
  // The largest weight's gradient (LM head, V*H) before autograd adds it into the gradient buffer.
  e.terms.push_back({"weight-gradient transient", kBackward, VH * md, "V*H*" + std::to_string(md)});
  // allreduce_bucket: a communication_data_type other than the model dtype casts the bucket (the
  // whole gradient buffer below 5e8 elements); the model dtype's all-reduce works in place.
  const auto& o = zero0_options(spec.options);
  const int cd = o.communication_data_type.empty() ? md : o.communication_data_type == "fp32" ? 4 : 2;
  if (cd != md)
    e.terms.push_back({"communication_data_type copy", kEndOfBackward, std::min(N, kAllreduceBucketElements) * cd,
                       "min(params, 5e8)*" + std::to_string(cd) + " (allreduce_bucket's cast)"});
  // FP16_UnfusedOptimizer.step: every gradient's fp32 copy (fp32_param.grad) during the step.
  if (md != 4) e.terms.push_back({"fp32 gradient copies", kOpt, N * 4, "params*4 (fp16_param.grad.to(fp32))"});
  add_optimizer_transient(e, VH, md);  // the embedding and LM head are the largest tensors
  return e;
}

}  // namespace zb::backends::zero0
