// zero3_padding.hpp — ZeRO3-mode's per-parameter padding rule, the one copy that the engine's
// parameter layout (zero3_engine.cpp param_layouts(): the closed form and the engine) and the
// projection program (zero3_program.cpp) use. Upstream: deepspeed/runtime/zero/
// partition_parameters.py Init._partition_param: tensor_size = _aligned_size(param) (numel
// padded to a multiple of the world size), partition_size = tensor_size // world size; rank r
// keeps elements [r*P, (r+1)*P). Must not: know buckets, dtypes or options.
#pragma once
#include <cstdint>

namespace zb::backends::zero3 {

// P: elements of one rank's partition of a parameter of `numel` elements over `world` ranks.
inline int64_t partition_numel(int64_t numel, int world) { return (numel + world - 1) / world; }

}  // namespace zb::backends::zero3
