// zero3_offload_estimate.hpp — the pre-flight estimate's offload terms for ZeRO3-mode
// (zero3_estimate.cpp calls it last). Owns: the transients the offload
// data path adds (zero3_offload.cpp) and where they live; the resident host bytes come from
// expected_bytes().host through add_common. Must not: count resident model states again.
#pragma once
#include "backends/engine.hpp"
#include "backends/topology.hpp"

namespace zb::backends::zero3 {

// With offload_optimizer the step's device transients (the fp32 gradient per sub-group, the
// global norm's copies) do not happen: they are replaced by the host's. Adds nothing without offload.
// `refetch_in_backward`: backward all-gathers parameters again (not all stay gathered from forward).
void add_offload_terms(PeakEstimate& e, const EngineSpec& spec, const Topology& topo, int rank,
                       bool refetch_in_backward);

}  // namespace zb::backends::zero3
