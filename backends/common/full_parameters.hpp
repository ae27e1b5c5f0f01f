// full_parameters.hpp — Engine::full_parameters' one piece, for every sharding engine: a tensor
// sharded in equal padded chunks over a group made whole again (all-gathered, cut to its real
// elements, fp32 on the CPU), or an unsharded one cut and cast the same way. Owns: that (it was
// written out in fsdp_engine.cpp, fsdp2_engine.cpp and zero3_engine.cpp). Must not: know how an
// engine lays its shards out (the caller passes the padded and real sizes).
#pragma once
#include <ATen/ATen.h>

#include "backends/common/comm.hpp"

namespace zb::backends::common {

// `shard`: this rank's chunk of a tensor padded to `padded` elements, chunked over `group` (the
// world when null); all-gathered (counted as "full_parameters"), its first `numel` elements as
// fp32 on the CPU.
at::Tensor gathered_full(Comm& comm, const at::Tensor& shard, int64_t padded, int64_t numel,
                         const runtime::World* group = nullptr);
// An unsharded tensor's first `numel` elements as fp32 on the CPU.
at::Tensor unpadded_fp32(const at::Tensor& full, int64_t numel);

}  // namespace zb::backends::common
