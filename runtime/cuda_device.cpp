// cuda_device.cpp — CUDA events, caching-allocator statistics and versions (see cuda_device.hpp).
#include "runtime/cuda_device.hpp"

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
class EventTimer final : public RegionTimer {
 public:
  void start() override { begin_.record(at::cuda::getCurrentCUDAStream()); }
  double stop_s() override {
    end_.record(at::cuda::getCurrentCUDAStream());
    end_.synchronize();
    return double(begin_.elapsed_time(end_)) / 1e3;
  }

 private:
  at::cuda::CUDAEvent begin_{cudaEventDefault};
  at::cuda::CUDAEvent end_{cudaEventDefault};
};

class StreamEvent final : public DeviceEvent {
 public:
  void record() override { event_.record(at::cuda::getCurrentCUDAStream()); }
  void synchronize() override { event_.synchronize(); }

 private:
  at::cuda::CUDAEvent event_{cudaEventDisableTiming};
};
}  // namespace

bool available() { return c10::cuda::device_count() > 0; }
int count() { return int(c10::cuda::device_count()); }
void set_device(int index) { c10::cuda::set_device(c10::DeviceIndex(index)); }
void synchronize(int index) { c10::cuda::device_synchronize(); }
std::string name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "cuda";
  return prop.name;
}
std::unique_ptr<RegionTimer> make_event_timer() { return std::make_unique<EventTimer>(); }
std::unique_ptr<DeviceEvent> make_stream_event() { return std::make_unique<StreamEvent>(); }

CudaMemoryStats memory_stats(int index) {
  using c10::CachingDeviceAllocator::StatType;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::DeviceIndex(index));
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
void reset_peaks(int index) { c10::cuda::CUDACachingAllocator::resetPeakStats(c10::DeviceIndex(index)); }

bool mem_get_info(int index, int64_t* free_bytes, int64_t* total_bytes) {
  c10::cuda::CUDAGuard guard{c10::DeviceIndex(index)};
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return false;
  *free_bytes = int64_t(free);
  *total_bytes = int64_t(total);
  return true;
}

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
