// cuda_device.hpp — internal: the CUDA half of device.hpp/memory.hpp, compiled only when
// ZEROBENCH_WITH_CUDA is on. Other files call these through device.hpp and memory.hpp.
// Every function that takes a device index makes that device current for its CUDA calls
// (c10::cuda::CUDAGuard), so a call never lands on whatever device the thread had current;
// an index < 0 means the current device.
#pragma once
#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "runtime/device.hpp"
#include "runtime/memory.hpp"

namespace zb::runtime::cuda {

bool available();
int count();
void set_device(int index);
void synchronize(int index);
std::string name(int index);
int64_t total_memory_bytes(int index);  // cudaDeviceProp::totalGlobalMem
std::unique_ptr<RegionTimer> make_event_timer(int index);
std::unique_ptr<DeviceEvent> make_stream_event(int index);
CudaMemoryStats memory_stats(int index);
void reset_peaks(int index);
void empty_cache(int index);  // the caching allocator's unused blocks back to the driver
bool mem_get_info(int index, int64_t* free_bytes, int64_t* total_bytes);  // cudaMemGetInfo on `index`
std::string runtime_version();
std::string nccl_version();
std::string driver_version();

}  // namespace zb::runtime::cuda
