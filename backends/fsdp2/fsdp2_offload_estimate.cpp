// fsdp2_offload_estimate.cpp — see fsdp2_offload_estimate.hpp.
#include "backends/fsdp2/fsdp2_offload_estimate.hpp"

#include <algorithm>
#include <string>

#include "backends/fsdp2/fsdp2_layout.hpp"

namespace zb::backends::fsdp2 {

void add_offload_terms(PeakEstimate& e, const EngineSpec& spec, const Topology& topo, int rank) {
  const auto o = fsdp2_options_from_json(spec.options);
  if (!o.offloads()) return;
  const auto d = dtypes_for(spec.precision, o);
  const auto sl = shard_layout(spec, topo);
  const int s = int(c10::elementSize(d.orig)), p = int(c10::elementSize(d.compute()));
  // Host gradients: set_to_none after each step, made again in backward (as the device ones
  // without offload: memory_estimate.cpp add_common's grads_set_to_none).
  std::vector<PeakEstimate::Term> moved;
  for (auto it = e.terms.begin(); it != e.terms.end();) {
    if (it->location == "host" && it->name == "host grads") {
      moved.push_back(*it);
      it = e.terms.erase(it);
    } else {
      if (it->name == "grad-norm transient") it->location = "host";  // the norms of host gradients
      ++it;
    }
  }
  for (const auto& t : moved)
    for (const char* moment : {"backward", "end_of_backward", "optimizer_step"})
      e.terms.push_back({t.name, moment, t.bytes, t.formula + " (set_to_none after each step: made again in backward)",
                         "host"});
  // The copy-in staging of the largest group re-gathered in backward: its host shards copied to
  // device tensors (sharded dtype s) and, with a param_dtype, cast (p), before the all-gather.
  const auto specs = models::unit_param_specs(spec.model);
  int64_t largest = 0;
  for (const auto& g : group_specs(spec.model, o)) {
    int64_t shard = 0;
    for (const auto& [u, i] : g.params)
      shard += layout_param(specs[size_t(u)][size_t(i)], u, i, sl.shard_size, sl.shard_index(rank)).padded_shard_numel();
    if (g.kind == GroupKind::kBlock) largest = std::max(largest, shard);
  }
  const int64_t per = d.param ? s + p : s;
  e.terms.push_back({"offload copy-in staging", "backward", largest * per,
                     std::string("block shard*") + (d.param ? "(s+p)" : "s") +
                         " (CPUOffloadPolicy: host shards copied to the device, then cast, before the all-gather)"});
}

}  // namespace zb::backends::fsdp2
