// cuda_device.cpp — CUDA events, caching-allocator statistics and versions (see cuda_device.hpp).
#include "runtime/cuda_device.hpp"
#include "runtime/cuda_seams.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#endif

namespace zb::runtime::cuda {

namespace {
c10::DeviceIndex resolve(int index) { return index < 0 ? c10::cuda::current_device() : c10::DeviceIndex(index); }

// Events record on `device`'s current stream (at::cuda::getCurrentCUDAStream(device)); CUDAEvent
// creates its cudaEvent_t on the recording stream's device and guards its own calls. The timer
// around them is device.cpp's make_event_pair_timer.
class CudaEventPair final : public EventPair {
 public:
  explicit CudaEventPair(c10::DeviceIndex device) : device_(device) {}
  void record_begin() override { begin_.record(at::cuda::getCurrentCUDAStream(device_)); }
  void record_end() override { end_.record(at::cuda::getCurrentCUDAStream(device_)); }
  void wait_end() override { end_.synchronize(); }
  float elapsed_ms() const override { return begin_.elapsed_time(end_); }

 private:
  c10::DeviceIndex device_;
  at::cuda::CUDAEvent begin_{cudaEventDefault};
  at::cuda::CUDAEvent end_{cudaEventDefault};
};

class StreamEvent final : public DeviceEvent {
 public:
  explicit StreamEvent(c10::DeviceIndex device) : device_(device) {}
  void record() override { event_.record(at::cuda::getCurrentCUDAStream(device_)); }
  void synchronize() override { event_.synchronize(); }

 private:
  c10::DeviceIndex device_;
  at::cuda::CUDAEvent event_{cudaEventDisableTiming};
};
}  // namespace

bool available() { return c10::cuda::device_count() > 0; }
int count() { return int(c10::cuda::device_count()); }
void set_device(int index) { c10::cuda::set_device(c10::DeviceIndex(index)); }
void synchronize(int index) {
  c10::cuda::CUDAGuard guard{resolve(index)};  // cudaDeviceSynchronize waits for the current device only
  c10::cuda::device_synchronize();
}
std::string name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, resolve(index)) != cudaSuccess) return "cuda";  // takes the device itself
  return prop.name;
}
int64_t total_memory_bytes(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, resolve(index)) != cudaSuccess) return -1;
  return int64_t(prop.totalGlobalMem);
}
std::unique_ptr<RegionTimer> make_event_timer(int index) {
  return make_event_pair_timer(std::make_unique<CudaEventPair>(resolve(index)));
}
std::unique_ptr<DeviceEvent> make_stream_event(int index) { return std::make_unique<StreamEvent>(resolve(index)); }

CudaMemoryStats memory_stats(int index) {
  using c10::CachingDeviceAllocator::StatType;
  c10::cuda::CUDAGuard guard{resolve(index)};  // cudaMemGetInfo reads the current device
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(resolve(index));
  const auto agg = size_t(StatType::AGGREGATE);
  CudaMemoryStats s;
  s.allocated_bytes = stats.allocated_bytes[agg].current;
  s.peak_allocated_bytes = stats.allocated_bytes[agg].peak;
  s.reserved_bytes = stats.reserved_bytes[agg].current;
  s.peak_reserved_bytes = stats.reserved_bytes[agg].peak;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) s.device_used_bytes = int64_t(total_bytes - free_bytes);
  return s;
}
void reset_peaks(int index) { c10::cuda::CUDACachingAllocator::resetPeakStats(resolve(index)); }
void empty_cache(int index) {
  c10::cuda::CUDAGuard guard{resolve(index)};
  c10::cuda::device_synchronize();  // blocks still in use by queued kernels are not released anyway
  c10::cuda::CUDACachingAllocator::emptyCache();
}

bool mem_get_info(int index, int64_t* free_bytes, int64_t* total_bytes) {
  c10::cuda::CUDAGuard guard{resolve(index)};
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return false;
  *free_bytes = int64_t(free);
  *total_bytes = int64_t(total);
  return true;
}

// Versions: process-wide queries, no device involved.
std::string runtime_version() {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
std::string driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return "";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
std::string nccl_version() {
#ifdef USE_C10D_NCCL
  return c10d::getNcclVersion();
#else
  return "";
#endif
}

}  // namespace zb::runtime::cuda
