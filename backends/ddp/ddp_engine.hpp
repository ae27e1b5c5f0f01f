// ddp_engine.hpp — the plain data-parallel reference engine, registered as "ddp".
// Owns: a full replica per rank in one flat buffer, gradients as views into one flat gradient
// buffer (DDP's gradient_as_bucket_view), bucketed all-reduce (bucket_cap_mb, reverse order)
// after the last micro-batch, AdamW on the whole buffer. Precisions: fp32; low (everything
// bf16); mixed (fp32 parameters and gradients, bf16 compute — what autocast gives DDP).
#pragma once
#include "backends/engine.hpp"
#include "backends/shard_layout.hpp"

namespace zb::backends::ddp {
BackendInfo backend_info();
// BackendInfo::training.expected_bytes (ddp_engine.cpp) and estimate_peak (ddp_estimate.cpp).
ModelStateBytes expected_bytes(const EngineSpec& spec, const Topology& topo, int rank);
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo);
// BackendInfo::training.shard_layout (ddp_layout.cpp): nothing sharded, every rank a replica of the world.
ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo);
}  // namespace zb::backends::ddp
