// zero12_estimate.hpp — the ZeRO-1/2 terms of the pre-flight peak estimate (estimate_peak in
// zero12_estimate.cpp adds the common ones of backends/memory_estimate.hpp: model states from
// the closed form, batches, activations):
// the IPG bucket(s), stage 1's whole gradients, the bucket flush's flattened copy, a second
// grads_in_partition buffer under accumulation, and the step's fp32 gradient partition. Owns:
// those formulas. Must not: allocate or measure anything.
#pragma once
#include <string>
#include <vector>

#include "backends/engine.hpp"
#include "backends/topology.hpp"

namespace zb::backends::zero12 {

// Terms as the engine (zero12_reduce.cpp, zero12_step.cpp) allocates them; phases are
// memory_estimate.hpp's moment names.
struct EstimateTerm {
  std::string name, phase;
  int64_t bytes;
  std::string formula;
};
std::vector<EstimateTerm> estimate_terms(const EngineSpec& spec, const Topology& topo, int rank, int stage);

}  // namespace zb::backends::zero12
