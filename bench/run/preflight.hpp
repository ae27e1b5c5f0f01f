// preflight.hpp — the memory pre-flight of `zerobench run`: before the engine allocates anything,
// each rank's estimated peak (BackendInfo::training.estimate_peak, backends/memory_estimate.cpp) against
// what its device can still give (runtime::available_bytes: a GPU's free memory, or the kernel's
// MemAvailable shared by every rank on this machine). Owns: that comparison and its one-line
// refusal, and under offload the host's estimated peak against MemAvailable. Must not: estimate
// (the backends do) or allocate.
#pragma once
#include <ATen/ATen.h>

#include <string>

#include "backends/engine.hpp"
#include "backends/topology.hpp"

namespace zb::bench {

// Throws UsageError (exit 2) when `ranks_sharing` ranks, each needing the largest per-rank
// estimate, do not fit in what `device` has available. No-op for a backend without an estimate
// or when the available memory cannot be read.
// `topo`: the job's world and ranks per node (a shard group may be a node: HYBRID_SHARD).
// On CUDA, offloaded host terms (PeakEstimate::host_peak_bytes) are checked as well, the
// `ranks_on_host` ranks of this machine against its MemAvailable (on CPU the device check already
// counts them: PeakEstimate::host_is_device).
void check_memory(const std::string& backend, const backends::EngineSpec& spec, const backends::Topology& topo,
                  int ranks_sharing, at::Device device, int ranks_on_host = 1);

// The comparison itself: throws UsageError when `sharing` x the estimate's peak (its host terms'
// peak when `host`) exceeds `available` bytes of `device` (CPU for the host check); -1 = unknown.
void check_estimate_fits(const backends::PeakEstimate& estimate, int sharing, at::Device device, bool host,
                         int64_t available);

// The ranks of this machine that share GPU `gpu_index` of `gpus`: pick_device gives local rank r
// GPU r % gpus. (check_one_rank_per_gpu refuses more ranks than GPUs before this is asked.)
int ranks_sharing_gpu(int local_ranks, int gpus, int gpu_index);

// "1.5 GiB", "312.0 MiB", "1.23 TiB".
std::string human_bytes(double bytes);

}  // namespace zb::bench
