// memory.hpp — per-rank memory measurement. Owns: the counting CPU allocator (current/peak
// bytes of every CPU tensor), peak and current RSS, and the CUDA caching-allocator peaks.
// Must not: decide what the engine owns (engines report their own model-state bytes).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace zb::runtime {

// Installs the counting allocator as c10's CPU allocator (idempotent). Call before creating
// tensors you want counted.
void install_counting_cpu_allocator();
bool counting_cpu_allocator_installed();
int64_t tracked_cpu_bytes();       // live bytes now
int64_t tracked_cpu_peak_bytes();  // high-water mark since the last reset
void reset_tracked_cpu_peak();     // peak := current

int64_t peak_rss_bytes();     // getrusage max RSS of this process
int64_t current_rss_bytes();  // /proc/self/statm
// The kernel's RSS high-water mark (VmHWM, /proc/self/status), and its reset to the current RSS
// (writing 5 to /proc/self/clear_refs, Linux >= 4.0): a peak over one phase (the model load).
// reset_peak_rss returns false where the kernel refuses (then VmHWM is the whole process's).
int64_t hwm_rss_bytes();
bool reset_peak_rss();

struct CudaMemoryStats {
  int64_t allocated_bytes = 0, peak_allocated_bytes = 0;
  int64_t reserved_bytes = 0, peak_reserved_bytes = 0;
  int64_t device_used_bytes = 0;  // cudaMemGetInfo total - free (the whole device, every process)
};
// Zeros on a CPU device or a build without CUDA.
CudaMemoryStats cuda_memory_stats(at::Device device);
void reset_cuda_peaks(at::Device device);
// The caching allocator's cached, unused blocks back to the driver (after the GEMM peak probe, so
// its 3 x 8192^2 operands' blocks do not sit in the run's reserved bytes). No-op on CPU.
void empty_cuda_cache(at::Device device);

// Memory a new allocation can still get: on CUDA the device's free bytes (cudaMemGetInfo), on CPU
// the kernel's MemAvailable (/proc/meminfo), shared by every process on the machine.
// `total_bytes` (if given) gets the device's or machine's total. Returns -1 if unknown.
int64_t available_bytes(at::Device device, int64_t* total_bytes = nullptr);

// Bytes currently tracked for `device`: the counting allocator on CPU, allocated bytes on CUDA.
int64_t tracked_bytes(at::Device device);
int64_t tracked_peak_bytes(at::Device device);
void reset_tracked_peak(at::Device device);

}  // namespace zb::runtime
