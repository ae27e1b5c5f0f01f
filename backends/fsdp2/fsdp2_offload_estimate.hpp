// fsdp2_offload_estimate.hpp — the pre-flight estimate's CPUOffloadPolicy terms for FSDP2-mode
// (fsdp2_estimate.cpp calls it last; docs/metrics.md names the terms).
// Owns: where offloaded states sit in the step's moments and the device/host transients the
// offload path adds (backends/fsdp2/fsdp2_offload.hpp). Must not: estimate anything that does not
// change with offload (fsdp2_estimate.cpp does).
#pragma once
#include "backends/engine.hpp"
#include "backends/topology.hpp"

namespace zb::backends::fsdp2 {

// No-op without offload. With CPUOffloadPolicy: the host gradients (add_common counts every
// host state as resident) are made in backward and freed by zero_grad(set_to_none=True), so they
// move to the backward, end-of-backward and optimizer moments; the gradient-norm transient is on
// the host (the gradients are). The copy-in's device staging is transient inside the copy-in
// and adds no term.
void add_offload_terms(PeakEstimate& e, const EngineSpec& spec, const Topology& topo, int rank);

}  // namespace zb::backends::fsdp2
