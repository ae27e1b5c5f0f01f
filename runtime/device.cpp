// device.cpp — device choice, sync, timing and names (see device.hpp).
#include "runtime/device.hpp"

#include <atomic>
#include <fstream>

#include "runtime/cuda_seams.hpp"
#include "runtime/env_gate.hpp"
#include "runtime/errors.hpp"
#include "runtime/gpu_skus.hpp"
#include "runtime/memory.hpp"
#ifdef ZEROBENCH_WITH_CUDA
#include "runtime/cuda_device.hpp"
#endif

namespace zb::runtime {

namespace {
class SteadyClockTimer final : public RegionTimer {
 public:
  explicit SteadyClockTimer(at::Device d) : device_(d) {}
  void start() override {
    synchronize(device_);
    t0_ = std::chrono::steady_clock::now();
  }
  double stop_s() override {
    synchronize(device_);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  at::Device device_;
  std::chrono::steady_clock::time_point t0_;
};

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}
}  // namespace

bool cuda_built() {
#ifdef ZEROBENCH_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_available() {
#ifdef ZEROBENCH_WITH_CUDA
  return cuda::available();
#else
  return false;
#endif
}

void check_one_rank_per_gpu(int local_ranks, int gpu_count) {
  if (gpu_count < 1 || local_ranks <= gpu_count) return;
  throw UsageError("--nproc " + std::to_string(local_ranks) + " with --device cuda: " + std::to_string(local_ranks) +
                   " ranks on this machine but " + std::to_string(gpu_count) +
                   " visible GPU(s), and NCCL cannot run two ranks on one GPU; run at most " +
                   std::to_string(gpu_count) + " ranks per machine, or one process with --emulate-world-size " +
                   std::to_string(local_ranks) + " (a rank of a " + std::to_string(local_ranks) +
                   "-rank job, collectives emulated)");
}

void check_local_ranks_fit(const std::string& kind, int local_ranks) {
  if (kind != "cuda" || !cuda_available()) return;
#ifdef ZEROBENCH_WITH_CUDA
  check_one_rank_per_gpu(local_ranks, cuda::count());
#endif
}

at::Device pick_device(const std::string& kind, int local_rank, int local_ranks) {
  if (kind == "cpu") return at::kCPU;
  if (kind != "cuda") throw UsageError("--device must be cpu or cuda, got '" + kind + "'");
  if (!cuda_built()) throw UsageError("--device cuda: this build has no CUDA path (rebuild with -DZEROBENCH_CUDA=ON)");
  if (!cuda_available()) throw UsageError("--device cuda: no CUDA device is visible");
#ifdef ZEROBENCH_WITH_CUDA
  check_one_rank_per_gpu(local_ranks, cuda::count());
  // Two CUDA runtimes (a 12.x toolkit's next to the cu130 wheel's) make zerobench's direct calls
  // talk to a runtime whose current device torch never set: refuse to measure anything then.
  if (const auto dup = check_one_cuda_stack(read_self_maps(), /*require_each=*/false); !dup.empty())
    throw RunError("--device cuda: more than one CUDA stack in this process: " + dup);
  const int index = local_rank % cuda::count();
  cuda::set_device(index);
  return at::Device(at::kCUDA, c10::DeviceIndex(index));
#else
  return at::kCPU;
#endif
}

void synchronize(at::Device device) {
#ifdef ZEROBENCH_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize(device.index());
#endif
}

std::string device_name(at::Device device) {
#ifdef ZEROBENCH_WITH_CUDA
  if (device.is_cuda()) return cuda::name(device.index());
#endif
  return "cpu: " + cpu_model_name();
}

int device_count(at::Device device) {
#ifdef ZEROBENCH_WITH_CUDA
  if (device.is_cuda()) return cuda::count();
#endif
  return 1;
}

int64_t device_total_memory_bytes(at::Device device) {
#ifdef ZEROBENCH_WITH_CUDA
  if (device.is_cuda()) return cuda::total_memory_bytes(device.index());
#endif
  return -1;
}

std::optional<double> datasheet_peak_tflops(const std::string& name, int64_t total_memory_bytes) {
  return datasheet_peak_tflops(name, "bf16", total_memory_bytes);
}

std::optional<double> datasheet_peak_tflops(const std::string& name, const std::string& math, int64_t total_memory_bytes) {
  const auto sku = gpu_sku(name, total_memory_bytes);
  return sku ? sku_peak_tflops(*sku, math) : std::nullopt;
}

namespace {
class EventPairTimer final : public RegionTimer {
 public:
  explicit EventPairTimer(std::unique_ptr<EventPair> events) : events_(std::move(events)) {}
  void start() override { events_->record_begin(); }
  double stop_s() override {
    events_->record_end();
    events_->wait_end();
    return double(events_->elapsed_ms()) / 1e3;
  }

 private:
  std::unique_ptr<EventPair> events_;
};
}  // namespace

std::unique_ptr<RegionTimer> make_event_pair_timer(std::unique_ptr<EventPair> events) {
  return std::make_unique<EventPairTimer>(std::move(events));
}

std::unique_ptr<RegionTimer> make_region_timer(at::Device device) {
#ifdef ZEROBENCH_WITH_CUDA
  if (device.is_cuda()) return cuda::make_event_timer(device.index());
#endif
  return std::make_unique<SteadyClockTimer>(device);
}

namespace {
class HostEvent final : public DeviceEvent {
 public:
  void record() override {}
  void synchronize() override {}
};
}  // namespace

std::unique_ptr<DeviceEvent> make_device_event(at::Device device) {
#ifdef ZEROBENCH_WITH_CUDA
  if (device.is_cuda()) return cuda::make_stream_event(device.index());
#endif
  return std::make_unique<HostEvent>();
}

CudaMemoryStats cuda_memory_stats(at::Device device) {
#ifdef ZEROBENCH_WITH_CUDA
  if (device.is_cuda()) return cuda::memory_stats(device.index());
#endif
  return {};
}

namespace {
#ifdef ZEROBENCH_WITH_CUDA
constexpr DeviceMemInfo kBuildMemInfo = cuda::mem_get_info;
#else
constexpr DeviceMemInfo kBuildMemInfo = nullptr;
#endif
std::atomic<DeviceMemInfo> g_mem_info{kBuildMemInfo};
}  // namespace

DeviceMemInfo set_device_mem_info(DeviceMemInfo source) { return g_mem_info.exchange(source ? source : kBuildMemInfo); }

int64_t available_bytes(at::Device device, int64_t* total_bytes) {
  if (device.is_cuda()) {
    if (const DeviceMemInfo mem_info = g_mem_info.load()) {
      int64_t free = -1, total = -1;
      if (!mem_info(device.index(), &free, &total)) return -1;
      if (total_bytes) *total_bytes = total;
      return free;
    }
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t value = 0, available = -1;
  while (meminfo >> key >> value >> unit) {
    if (key == "MemTotal:" && total_bytes) *total_bytes = value * 1024;
    if (key == "MemAvailable:") available = value * 1024;
  }
  return available;
}

void reset_cuda_peaks(at::Device device) {
#ifdef ZEROBENCH_WITH_CUDA
  if (device.is_cuda()) cuda::reset_peaks(device.index());
#endif
}

void empty_cuda_cache(at::Device device) {
#ifdef ZEROBENCH_WITH_CUDA
  if (device.is_cuda()) cuda::empty_cache(device.index());
#endif
}

std::string cuda_runtime_version() {
#ifdef ZEROBENCH_WITH_CUDA
  return cuda::runtime_version();
#else
  return "";
#endif
}
std::string nccl_version() {
#ifdef ZEROBENCH_WITH_CUDA
  return cuda::nccl_version();
#else
  return "";
#endif
}
std::string gpu_driver_version() {
#ifdef ZEROBENCH_WITH_CUDA
  return cuda_available() ? cuda::driver_version() : "";
#else
  return "";
#endif
}

}  // namespace zb::runtime
