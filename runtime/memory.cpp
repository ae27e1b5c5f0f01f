// memory.cpp — counting CPU allocator and RSS (see memory.hpp).
#include "runtime/memory.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/device.hpp"

namespace zb::runtime {

namespace {
std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::mutex g_sizes_mutex;
std::unordered_map<void*, int64_t> g_sizes;  // live block -> bytes

// Context == data pointer (as c10's DefaultCPUAllocator does), so raw_allocate and
// raw_deallocate, which some CPU kernels use for scratch space, keep working.
void counting_free(void* ptr) {
  if (!ptr) return;
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_sizes_mutex);
    auto it = g_sizes.find(ptr);
    if (it != g_sizes.end()) {
      bytes = it->second;
      g_sizes.erase(it);
    }
  }
  g_current.fetch_sub(bytes);
  c10::free_cpu(ptr);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* ptr = c10::alloc_cpu(n);
    {
      std::lock_guard<std::mutex> lock(g_sizes_mutex);
      g_sizes[ptr] = int64_t(n);
    }
    const int64_t now = g_current.fetch_add(int64_t(n)) + int64_t(n);
    int64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    return {ptr, ptr, &counting_free, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counting_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

CountingCpuAllocator* g_allocator = nullptr;
}  // namespace

void install_counting_cpu_allocator() {
  if (g_allocator) return;
  g_allocator = new CountingCpuAllocator();  // lives for the process
  c10::SetCPUAllocator(g_allocator, /*priority=*/100);
}
bool counting_cpu_allocator_installed() { return g_allocator != nullptr; }
int64_t tracked_cpu_bytes() { return g_current.load(); }
int64_t tracked_cpu_peak_bytes() { return g_peak.load(); }
void reset_tracked_cpu_peak() { g_peak.store(g_current.load()); }

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;  // Linux reports KiB
}

int64_t current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * int64_t(sysconf(_SC_PAGESIZE));
}

int64_t hwm_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:   1234 kB"
  return -1;
}

bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  if (!clear) return false;
  clear << "5";
  clear.flush();
  return bool(clear);
}

int64_t tracked_bytes(at::Device device) {
  return device.is_cuda() ? cuda_memory_stats(device).allocated_bytes : tracked_cpu_bytes();
}
int64_t tracked_peak_bytes(at::Device device) {
  return device.is_cuda() ? cuda_memory_stats(device).peak_allocated_bytes : tracked_cpu_peak_bytes();
}
void reset_tracked_peak(at::Device device) {
  if (device.is_cuda())
    reset_cuda_peaks(device);
  else
    reset_tracked_cpu_peak();
}

}  // namespace zb::runtime
