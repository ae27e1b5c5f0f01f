// fsdp_padding.hpp — FSDP-mode's per-unit padding rule: the one copy that the engine's flat
// parameter layout (fsdp_engine.cpp layouts(), which the closed form expected_bytes sums) and the
// projection program (fsdp_program.cpp) use. Upstream: torch/distributed/fsdp/_flat_param.py
// FlatParamHandle._init_flat_param_and_metadata pads the flat parameter by
// `world_size - total_numel % world_size` (when sharding) so it divides the shard group. Must
// not: know streams, dtypes or options.
#pragma once
#include <cstdint>

namespace zb::backends::fsdp {

// Elements of one unit's padded flat parameter (numel unpadded, over `shard_size` ranks).
inline int64_t padded_flat_numel(int64_t numel, int shard_size, bool sharded) {
  return sharded ? (numel + shard_size - 1) / shard_size * shard_size : numel;
}
// Elements of one rank's shard of it.
inline int64_t flat_shard_numel(int64_t numel, int shard_size, bool sharded) {
  return padded_flat_numel(numel, shard_size, sharded) / (sharded ? shard_size : 1);
}

}  // namespace zb::backends::fsdp
