// ddp_estimate.cpp — ddp's pre-flight peak estimate (BackendInfo::training.estimate_peak; the shared
// terms and moments are backends/memory_estimate.hpp's, docs/metrics.md). Owns: ddp's own terms,
// as ddp_engine.cpp allocates them. Must not: allocate or measure anything.
#include "backends/ddp/ddp_engine.hpp"
#include "backends/memory_estimate.hpp"

namespace zb::backends::ddp {

using namespace estimate;

// ddp: a full replica in the storage dtype s; "mixed" computes on bf16 copies of the weights.
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& world, int rank, bool gloo) {
  PeakEstimate e = for_layout(shard_layout(spec, world));
  const bool mixed = spec.precision == "mixed";
  const int s = spec.precision == "low" ? 2 : 4, c = spec.precision == "fp32" ? 4 : 2;
  add_common(e, spec, expected_bytes(spec, world, rank), c, gloo);
  const auto& m = spec.model;
  const int64_t N = models::count_params(m).total, VH = m.vocab * m.hidden;
  if (mixed)
    e.terms.push_back({"bf16 weight copies", kFwdBwd, 2 * (N - VH),
                       "2*(params - V*H): each unit's w.to(bf16) is saved by the ops that use it (the embedding's "
                       "copy is not)"});
  // The largest weight's gradient (LM head, V*H) before autograd adds it into the flat gradient
  // buffer; in "mixed" its bf16 gradient and the fp32 cast exist together. (The gradient
  // all-reduce after backward works in place: Gloo and NCCL all-reduce the buffer itself.)
  e.terms.push_back({"weight-gradient transient", kBackward, VH * (s + (mixed ? 2 : 0)),
                     std::string("V*H*") + (mixed ? "(4+2)" : std::to_string(s))});
  add_optimizer_transient(e, VH, s);  // the embedding and LM head are the largest tensors
  return e;
}

}  // namespace zb::backends::ddp
