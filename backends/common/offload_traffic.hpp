// offload_traffic.hpp — the count of host <-> device copies an offloading engine made
// (Engine::offload_traffic, reported per step by the trainer). A value type alone, so that
// engine.hpp carries it without the host-offload implementation (host_offload.hpp counts it).
// Owns: the counters and their difference. Must not: allocate or copy anything.
#pragma once
#include <cstdint>

namespace zb::backends::common {

// Bytes and copies between host and device, cumulative since the engine was made.
struct OffloadTraffic {
  int64_t h2d_bytes = 0, d2h_bytes = 0;    // host -> device, device -> host
  int64_t h2d_copies = 0, d2h_copies = 0;  // copy_ calls
  OffloadTraffic operator-(const OffloadTraffic& o) const {
    return {h2d_bytes - o.h2d_bytes, d2h_bytes - o.d2h_bytes, h2d_copies - o.h2d_copies, d2h_copies - o.d2h_copies};
  }
};

}  // namespace zb::backends::common
