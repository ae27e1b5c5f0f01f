// drain.hpp — what a sharding engine's destructor does first: run the work still queued on its
// side streams (on the CPU they are host queues whose closures touch the engine's members), never
// throwing out of a destructor. Owns: that one step (it was written out in the FSDP1, FSDP2 and
// ZeRO-3 engines). Must not: be called anywhere but a destructor (elsewhere a failure must surface).
#pragma once
#include "backends/common/streams.hpp"

namespace zb::backends::common {

inline void drain_before_destroy(Streams& streams) noexcept {
  try {
    streams.drain_all();
  } catch (...) {
  }
}

}  // namespace zb::backends::common
