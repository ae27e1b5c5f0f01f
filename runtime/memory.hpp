// memory.hpp — per-rank memory measurement. Owns: the counting CPU allocator (current/peak
// bytes of every CPU tensor), its program-order ledger (the deterministic peak below), peak and
// current RSS, and the CUDA caching-allocator peaks.
// Must not: decide what the engine owns (engines report their own model-state bytes), or decide
// when a collective is issued or waited (Comm tells the ledger).
#pragma once
#include <ATen/ATen.h>

#include <string>

#include <cstdint>

namespace zb::runtime {

// Installs the counting allocator as c10's CPU allocator (idempotent) and marks the calling thread
// as the program thread (below). Call before creating tensors you want counted.
void install_counting_cpu_allocator();
bool counting_cpu_allocator_installed();
int64_t tracked_cpu_bytes();       // live bytes now
int64_t tracked_cpu_peak_bytes();  // high-water mark since the last reset (observed: timing-dependent)
void reset_tracked_cpu_peak();     // peak := current; also the program-order peak and ledger stats

// ---- The program-order peak (docs/metrics.md "Observed and program-order peaks") ----
// tracked_cpu_peak_bytes() is what the allocator saw, in real time, on every thread: it depends on
// when collectives complete. Gloo runs each collective on its worker threads, which allocate
// staging buffers there (the all-gather's flat output) and drop their references to the work —
// and so free tensors only the work still held (the reduce-scatter's input clone) — whenever the
// scheduler lets them; two identical runs differ by those buffers.
// The ledger computes a peak that does not depend on that timing: the live bytes of the program
// thread's allocations and frees, in program order, plus each collective's comm buffers — every
// block allocated inside its issue call or by whichever thread runs it (Gloo's worker runs with
// the issuing thread's ThreadLocalState) — held at their high-water mark from the collective's
// issue to its wait, whenever they were really allocated or freed. It is the peak of a run in
// which every collective completes at its wait; with threads: 1 and a deterministic program, two
// runs give the same bytes. Allocations on other threads outside any collective (intra-op
// workers) are not in it (ProgramLedgerStats counts them).
void mark_program_thread();  // the calling thread's allocations are the program's
// Comm: a collective is issued. Returns its id; while `CommBufferScope` is alive on the issuing
// thread (around the process group's call), allocations there and on any thread that runs with
// that thread-local state are the collective's comm buffers.
int64_t comm_buffers_open();
// Comm: the collective with this id was waited: its comm buffers end here (their real frees,
// earlier or later, no longer count).
void comm_buffers_close(int64_t id);
class CommBufferScope {
 public:
  explicit CommBufferScope(int64_t id);  // installs the thread-local tag (c10::DebugInfoGuard)
  ~CommBufferScope();
  CommBufferScope(const CommBufferScope&) = delete;
  CommBufferScope& operator=(const CommBufferScope&) = delete;

 private:
  void* guard_;  // the c10::DebugInfoGuard (kept out of this header)
};
int64_t program_live_bytes();
// The program-order peak since the last reset_tracked_cpu_peak(). Reading it does not change it;
// collectives still in flight count with their comm buffers' high-water so far.
int64_t program_peak_bytes();
// What could make program_peak_bytes() depend on timing, since the last reset; all 0 in a run
// whose program-order peak is exact.
struct ProgramLedgerStats {
  int64_t late_frees = 0;             // program blocks freed on another thread (at a time the scheduler chose)
  int64_t open_at_read = 0;           // collectives in flight when the peak was last read
  int64_t other_thread_peak_bytes = 0;  // live bytes allocated on other threads outside any collective (high-water)
  int64_t comm_buffers_peak_bytes = 0;  // the largest comm-buffer high-water of one collective (in the peak)
};
ProgramLedgerStats program_ledger_stats();

// ---- The large-block cache (docs/metrics.md "The CPU block cache") ----
// The counting allocator keeps freed blocks of 1 MiB or more and hands each back to the next
// allocation of exactly its size, as CUDA's caching allocator keeps blocks on a GPU: a buffer the
// program frees and allocates again every step (FSDP1's flat gradient, freed at zero_grad as FSDP1
// frees it) is not re-mapped and page-faulted by glibc each time. It changes where the memory comes
// from, not when the program allocates or frees: tracked and program-order bytes count a cached
// block as freed. Bounded by ZEROBENCH_CPU_BLOCK_CACHE_MB (default 1024; 0: no cache); a block that
// does not fit evicts cached blocks of other sizes, oldest first, else goes back to glibc. Cached
// blocks are in the process's RSS.
constexpr int64_t kDefaultCpuBlockCacheBytes = int64_t(1024) << 20;
struct CpuBlockCacheStats {
  int64_t hits = 0, misses = 0, evictions = 0;  // allocations of >= 1 MiB served / not; blocks given back
  int64_t cached_bytes = 0, cached_peak_bytes = 0, limit_bytes = 0;
};
CpuBlockCacheStats cpu_block_cache_stats();
void release_cpu_block_cache();  // frees every cached block (tests)
// The variable's value in MiB; UsageError naming it unless a whole number >= 0.
int64_t parse_cpu_block_cache_mb(const std::string& text);

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
