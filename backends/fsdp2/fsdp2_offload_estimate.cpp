// fsdp2_offload_estimate.cpp — see fsdp2_offload_estimate.hpp.
#include "backends/fsdp2/fsdp2_offload_estimate.hpp"

#include <string>
#include <vector>

#include "backends/fsdp2/fsdp2_options.hpp"

namespace zb::backends::fsdp2 {

void add_offload_terms(PeakEstimate& e, const EngineSpec& spec, const Topology& /*topo*/, int /*rank*/) {
  const auto& o = fsdp2_options(spec.options);
  if (!o.offloads()) return;
  // Host gradients: set_to_none after each step, made again in backward (as the device ones
  // without offload: memory_estimate.hpp add_common's grads_set_to_none).
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
  // Not a term: the all-gather copy-in's device staging (each host shard copied to a device
  // tensor, then cast) lives only inside foreach_all_gather's copy-in and is freed before the
  // group's compute, so it never coincides with a moment's peak (measured: the offload cells'
  // peaks are no higher than the same cells' without offload; docs/backends/fsdp2.md "Offload").
}

}  // namespace zb::backends::fsdp2
