// cuda_seams.hpp — where the GPU-only paths of device.hpp/memory.hpp meet their CUDA calls, so
// their logic is driven on CPU with injected device answers (tests/test_gpu_readiness.cpp).
// Owns: the event timer's logic over an EventPair (start/stop, ms -> s), and the source of a
// GPU's free/total memory behind available_bytes (cudaMemGetInfo unless a test installs one).
// Must not: make CUDA calls itself (cuda_device.cpp does) or be used by anything but
// device.cpp, cuda_device.cpp and tests.
#pragma once
#include <cstdint>
#include <memory>

#include "runtime/device.hpp"

namespace zb::runtime {

// The CUDA event timer's device calls (cuda_device.cpp: two CUDA events on the device's current
// stream).
class EventPair {
 public:
  virtual ~EventPair() = default;
  virtual void record_begin() = 0;
  virtual void record_end() = 0;
  virtual void wait_end() = 0;           // blocks the host until the end event has fired
  virtual float elapsed_ms() const = 0;  // begin -> end (cudaEventElapsedTime: ms, ~0.5 us resolution)
};
// start() records the begin event; stop_s() records the end event, waits for it and returns the
// elapsed time in seconds. make_region_timer's timer on a GPU.
std::unique_ptr<RegionTimer> make_event_pair_timer(std::unique_ptr<EventPair> events);

// A GPU's free and total bytes (cudaMemGetInfo on `device_index`); false when the query failed,
// and available_bytes then says -1 (unknown: the memory pre-flight does not check).
using DeviceMemInfo = bool (*)(int device_index, int64_t* free_bytes, int64_t* total_bytes);
// Installs `source` as what available_bytes reads for every CUDA device (nullptr: the build's
// own, cudaMemGetInfo in a CUDA build and none otherwise) and returns the one it replaces. Tests.
DeviceMemInfo set_device_mem_info(DeviceMemInfo source);

}  // namespace zb::runtime
