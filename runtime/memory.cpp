// memory.cpp — counting CPU allocator, its program-order ledger, and RSS (see memory.hpp).
#include "runtime/memory.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/errors.hpp"

namespace zb::runtime {

namespace {
std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

// ---- the program-order ledger (memory.hpp) ----
constexpr int64_t kProgram = -1, kOtherThread = -2;  // a block's owner; >= 0: a collective's id
thread_local bool t_program = false;

// The thread-local tag of a collective's comm buffers: a c10 debug info, because c10d's Gloo
// worker runs each collective under the issuing thread's at::ThreadLocalState, which carries it.
struct CommTag final : c10::DebugInfoBase {
  explicit CommTag(int64_t id) : id(id) {}
  int64_t id;
};
constexpr auto kTagKind = c10::DebugInfoKind::PRODUCER_INFO;  // unused by torch's own code

struct Block {
  int64_t bytes = 0;
  int64_t owner = kProgram;
};
struct Collective {
  int64_t live = 0, high = 0;  // its comm buffers: live bytes, high-water mark
  bool closed = false;
};
// The program's timeline between two collective events (issue, wait): the highest live program
// bytes in it and the collectives in flight throughout. Its value — max_live + their comm
// buffers' high-water — is known once each of them was waited.
struct Segment {
  int64_t max_live = 0;
  std::vector<int64_t> in_flight;
};

std::mutex g_mutex;  // the block map and the ledger
std::unordered_map<void*, Block> g_blocks;  // live block -> bytes, owner
std::map<int64_t, Collective> g_collectives;  // open, or closed but still in a pending segment
std::vector<int64_t> g_in_flight;             // open collectives, in issue order
std::vector<Segment> g_pending;               // closed segments waiting for a collective's wait
int64_t g_next_id = 0;
int64_t g_program_live = 0;
int64_t g_segment_max = 0;  // the current segment's highest live program bytes
int64_t g_program_peak = 0;  // resolved segments since the last reset
int64_t g_other_live = 0;
ProgramLedgerStats g_stats;

int64_t comm_high(const std::vector<int64_t>& ids) {
  int64_t sum = 0;
  for (int64_t id : ids)
    if (auto it = g_collectives.find(id); it != g_collectives.end()) sum += it->second.high;
  return sum;
}

// Ends the current segment (at a collective event): its value is final now if nothing is in
// flight, else once everything in flight was waited.
void end_segment() {
  if (g_in_flight.empty())
    g_program_peak = std::max(g_program_peak, g_segment_max);
  else
    g_pending.push_back({g_segment_max, g_in_flight});
  g_segment_max = g_program_live;
}

void resolve_segments() {
  auto closed = [](int64_t id) {
    auto it = g_collectives.find(id);
    return it == g_collectives.end() || it->second.closed;
  };
  std::vector<Segment> kept;
  for (auto& s : g_pending) {
    if (std::all_of(s.in_flight.begin(), s.in_flight.end(), closed))
      g_program_peak = std::max(g_program_peak, s.max_live + comm_high(s.in_flight));
    else
      kept.push_back(std::move(s));
  }
  g_pending = std::move(kept);
  // Closed collectives no pending segment names are done with.
  for (auto it = g_collectives.begin(); it != g_collectives.end();) {
    bool named = !it->second.closed;
    for (const auto& s : g_pending)
      named = named || std::find(s.in_flight.begin(), s.in_flight.end(), it->first) != s.in_flight.end();
    it = named ? std::next(it) : g_collectives.erase(it);
  }
}

int64_t owner_of_new_block() {
  if (auto* tag = dynamic_cast<CommTag*>(c10::ThreadLocalDebugInfo::get(kTagKind))) return tag->id;
  return t_program ? kProgram : kOtherThread;
}

// Called with g_mutex held.
void ledger_alloc(void* ptr, int64_t n) {
  Block b{n, owner_of_new_block()};
  if (b.owner >= 0) {
    auto it = g_collectives.find(b.owner);
    if (it == g_collectives.end() || it->second.closed) {
      b.owner = kOtherThread;  // a collective's thread allocating after its wait: not in the peak
    } else {
      it->second.live += n;
      it->second.high = std::max(it->second.high, it->second.live);
      g_stats.comm_buffers_peak_bytes = std::max(g_stats.comm_buffers_peak_bytes, it->second.high);
    }
  }
  if (b.owner == kProgram) {
    g_program_live += n;
    g_segment_max = std::max(g_segment_max, g_program_live);
  } else if (b.owner == kOtherThread) {
    g_other_live += n;
    g_stats.other_thread_peak_bytes = std::max(g_stats.other_thread_peak_bytes, g_other_live);
  }
  g_blocks[ptr] = b;
}

// Called with g_mutex held; returns the block's bytes (0 for a block never counted).
int64_t ledger_free(void* ptr) {
  auto it = g_blocks.find(ptr);
  if (it == g_blocks.end()) return 0;
  const Block b = it->second;
  g_blocks.erase(it);
  if (b.owner == kProgram) {
    g_program_live -= b.bytes;
    if (!t_program) ++g_stats.late_frees;
  } else if (b.owner == kOtherThread) {
    g_other_live -= b.bytes;
  } else if (auto c = g_collectives.find(b.owner); c != g_collectives.end() && !c->second.closed) {
    c->second.live -= b.bytes;  // its high-water stands until the wait
  }
  return b.bytes;
}

// ---- the large-block cache (memory.hpp) ----
// Freed blocks of at least kCacheMinBytes, newest last, each handed back whole to the next
// allocation of exactly its size. Bounded by g_cache.limit: a block that does not fit evicts the
// oldest blocks of other sizes first (a size the program stopped using), else goes to glibc.
constexpr int64_t kCacheMinBytes = int64_t(1) << 20;
struct CachedBlock {
  int64_t bytes;
  void* ptr;
};
struct BlockCache {
  std::mutex m;
  std::list<CachedBlock> blocks;  // oldest first
  int64_t limit = -1;             // -1: not read yet
  CpuBlockCacheStats stats;
};
BlockCache g_cache;

int64_t cache_limit_locked() {
  if (g_cache.limit < 0) {
    g_cache.limit = kDefaultCpuBlockCacheBytes;
    if (const char* v = std::getenv("ZEROBENCH_CPU_BLOCK_CACHE_MB")) g_cache.limit = parse_cpu_block_cache_mb(v) << 20;
    g_cache.stats.limit_bytes = g_cache.limit;
  }
  return g_cache.limit;
}

void* cache_take(size_t n) {
  if (int64_t(n) < kCacheMinBytes) return nullptr;
  std::lock_guard<std::mutex> lock(g_cache.m);
  if (cache_limit_locked() == 0) return nullptr;
  for (auto it = g_cache.blocks.rbegin(); it != g_cache.blocks.rend(); ++it) {
    if (it->bytes != int64_t(n)) continue;
    void* ptr = it->ptr;
    g_cache.stats.cached_bytes -= it->bytes;
    g_cache.blocks.erase(std::next(it).base());
    ++g_cache.stats.hits;
    return ptr;
  }
  ++g_cache.stats.misses;
  return nullptr;
}

// True when the block was kept (the caller must not free it).
bool cache_keep(void* ptr, int64_t bytes) {
  if (bytes < kCacheMinBytes) return false;
  std::vector<void*> evicted;
  {
    std::lock_guard<std::mutex> lock(g_cache.m);
    const int64_t limit = cache_limit_locked();
    if (bytes > limit) return false;
    for (auto it = g_cache.blocks.begin(); g_cache.stats.cached_bytes + bytes > limit && it != g_cache.blocks.end();) {
      if (it->bytes == bytes) {  // the same size is what the program may ask for again
        ++it;
        continue;
      }
      evicted.push_back(it->ptr);
      g_cache.stats.cached_bytes -= it->bytes;
      ++g_cache.stats.evictions;
      it = g_cache.blocks.erase(it);
    }
    if (g_cache.stats.cached_bytes + bytes > limit) {
      ++g_cache.stats.evictions;
      evicted.push_back(ptr);
    } else {
      g_cache.blocks.push_back({bytes, ptr});
      g_cache.stats.cached_bytes += bytes;
      g_cache.stats.cached_peak_bytes = std::max(g_cache.stats.cached_peak_bytes, g_cache.stats.cached_bytes);
    }
  }
  bool kept = true;
  for (void* p : evicted) {
    if (p == ptr) kept = false;
    else c10::free_cpu(p);
  }
  return kept;
}

// Context == data pointer (as c10's DefaultCPUAllocator does), so raw_allocate and
// raw_deallocate, which some CPU kernels use for scratch space, keep working.
void counting_free(void* ptr) {
  if (!ptr) return;
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    bytes = ledger_free(ptr);
  }
  g_current.fetch_sub(bytes);
  if (!cache_keep(ptr, bytes)) c10::free_cpu(ptr);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* ptr = cache_take(n);
    if (!ptr) ptr = c10::alloc_cpu(n);
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      ledger_alloc(ptr, int64_t(n));
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
  mark_program_thread();
  if (g_allocator) return;
  cpu_block_cache_stats();  // reads ZEROBENCH_CPU_BLOCK_CACHE_MB now: a bad value is a UsageError here, not in an allocation
  g_allocator = new CountingCpuAllocator();  // lives for the process
  c10::SetCPUAllocator(g_allocator, /*priority=*/100);
}
bool counting_cpu_allocator_installed() { return g_allocator != nullptr; }
int64_t tracked_cpu_bytes() { return g_current.load(); }
int64_t tracked_cpu_peak_bytes() { return g_peak.load(); }
void reset_tracked_cpu_peak() {
  g_peak.store(g_current.load());
  std::lock_guard<std::mutex> lock(g_mutex);
  // The window starts here: earlier segments were read with the previous window. Collectives in
  // flight now keep their comm buffers in the segment that starts here.
  g_pending.clear();
  resolve_segments();
  g_segment_max = g_program_live;
  g_program_peak = 0;
  g_stats = {};
  g_stats.other_thread_peak_bytes = g_other_live;
  for (const auto& [id, c] : g_collectives)
    if (!c.closed) g_stats.comm_buffers_peak_bytes = std::max(g_stats.comm_buffers_peak_bytes, c.high);
}

void mark_program_thread() { t_program = true; }

int64_t comm_buffers_open() {
  std::lock_guard<std::mutex> lock(g_mutex);
  end_segment();
  const int64_t id = g_next_id++;
  g_collectives[id] = Collective{};
  g_in_flight.push_back(id);
  return id;
}

void comm_buffers_close(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_collectives.find(id);
  if (it == g_collectives.end() || it->second.closed) return;
  end_segment();
  it->second.closed = true;
  g_in_flight.erase(std::remove(g_in_flight.begin(), g_in_flight.end(), id), g_in_flight.end());
  resolve_segments();
}

CommBufferScope::CommBufferScope(int64_t id)
    : guard_(new c10::DebugInfoGuard(kTagKind, std::make_shared<CommTag>(id))) {}
CommBufferScope::~CommBufferScope() { delete static_cast<c10::DebugInfoGuard*>(guard_); }

int64_t program_live_bytes() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_program_live;
}

int64_t program_peak_bytes() {
  std::lock_guard<std::mutex> lock(g_mutex);
  int64_t peak = std::max(g_program_peak, g_segment_max + comm_high(g_in_flight));
  for (const auto& s : g_pending) peak = std::max(peak, s.max_live + comm_high(s.in_flight));
  g_stats.open_at_read = int64_t(g_in_flight.size());
  return peak;
}

ProgramLedgerStats program_ledger_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

int64_t parse_cpu_block_cache_mb(const std::string& text) {
  size_t used = 0;
  long long mb = -1;
  try {
    mb = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || mb < 0 || mb > (int64_t(1) << 30))
    throw UsageError("ZEROBENCH_CPU_BLOCK_CACHE_MB '" + text + "': expected a whole number of MiB >= 0 (0: no cache)");
  return mb;
}

CpuBlockCacheStats cpu_block_cache_stats() {
  std::lock_guard<std::mutex> lock(g_cache.m);
  cache_limit_locked();
  return g_cache.stats;
}

void release_cpu_block_cache() {
  std::list<CachedBlock> blocks;
  {
    std::lock_guard<std::mutex> lock(g_cache.m);
    blocks.swap(g_cache.blocks);
    g_cache.stats.cached_bytes = 0;
  }
  for (const auto& b : blocks) c10::free_cpu(b.ptr);
}

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
