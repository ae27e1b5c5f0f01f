// cupti_tracer.cpp — the CUPTI activity tracer (see tracer.hpp); compiled only in CUDA builds.
// Buffers are handed to CUPTI on request and parsed when CUPTI completes them (on its worker
// thread, or in cuptiActivityFlushAll at stop()). Timestamps come from our steady_clock
// callback, so kernels line up with NVTX ranges and step windows.
// Devices: every CUPTI call here is process-wide — cuptiActivityEnable/Disable for a kind (not
// cuptiActivityEnableContext), cuptiActivityFlushAll, cuptiActivityRegister*Callbacks,
// cuptiActivityGetNumDroppedRecords(nullptr, 0, ...) (the global buffers), cuptiGetResultString,
// cuptiGetCallbackName: none reads the current device or context, so none needs a device guard
// (CUPTI docs, cupti_activity.h). Records carry their own deviceId.
#include <cupti.h>
#include <cxxabi.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "profiler/nvtx_capture.hpp"
#include "profiler/tracer.hpp"
#include "runtime/errors.hpp"

namespace zb::profiler {

namespace {

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kAlign = 8;

// Kernel records. cupti_activity.h declares only the newest kernel record version (older ones
// are in cupti_activity_deprecated.h); CUPTI appends fields from one version to the next, and
// the loaded libcupti writes its own newest layout. The fields read here (kind .. name) sit at
// the same offsets in every version since CUpti_ActivityKernel4, so reading them through the
// newest struct the headers define is right whichever version the library writes; the asserts
// keep that true if a future header moves them.
#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;  // the newest in the CUDA 13 headers
#else
using KernelRecord = CUpti_ActivityKernel9;   // the newest in the CUDA 12.4+ headers
#endif
static_assert(offsetof(KernelRecord, start) == offsetof(CUpti_ActivityKernel4, start), "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, end) == offsetof(CUpti_ActivityKernel4, end), "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, deviceId) == offsetof(CUpti_ActivityKernel4, deviceId), "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, streamId) == offsetof(CUpti_ActivityKernel4, streamId), "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, correlationId) == offsetof(CUpti_ActivityKernel4, correlationId),
              "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, name) == offsetof(CUpti_ActivityKernel4, name), "CUPTI kernel record layout");

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  throw RunError(std::string("CUPTI ") + what + " failed: " + (msg ? msg : "unknown error") +
                 " (another CUPTI client such as nsys or the torch profiler may be attached)");
}

uint64_t CUPTIAPI steady_timestamp() { return uint64_t(now_ns()); }

struct Sink {
  std::mutex mutex;
  std::vector<Activity> records;
  std::unordered_map<const char*, std::string> names;  // demangled kernel names by CUPTI's pointer
  double processing_s = 0;
};
Sink* g_sink = nullptr;  // CUPTI's callbacks are plain functions

const std::string& kernel_name(Sink& sink, const char* mangled) {
  auto it = sink.names.find(mangled);
  if (it != sink.names.end()) return it->second;
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : (mangled ? mangled : "?");
  std::free(demangled);
  return sink.names.emplace(mangled, std::move(name)).first->second;
}

const char* memcpy_name(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy";
  }
}

// memcpy and memset records share these fields.
template <typename Record>
Activity transfer(ActivityKind kind, const char* name, const Record& r) {
  Activity a;
  a.kind = kind;
  a.name = name;
  a.start_ns = int64_t(r.start);
  a.end_ns = int64_t(r.end);
  a.device = int(r.deviceId);
  a.stream = int64_t(r.streamId);
  a.correlation = int64_t(r.correlationId);
  a.bytes = int64_t(r.bytes);
  return a;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  const auto t0 = std::chrono::steady_clock::now();
  if (g_sink) {
    std::lock_guard<std::mutex> lock(g_sink->mutex);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      Activity a;
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
          auto* k = reinterpret_cast<KernelRecord*>(record);
          a.kind = ActivityKind::kKernel;
          a.name = kernel_name(*g_sink, k->name);
          a.start_ns = int64_t(k->start);
          a.end_ns = int64_t(k->end);
          a.device = int(k->deviceId);
          a.stream = int64_t(k->streamId);
          a.correlation = int64_t(k->correlationId);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto& m = *reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
          a = transfer(ActivityKind::kMemcpy, memcpy_name(m.copyKind), m);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET:
          a = transfer(ActivityKind::kMemset, "memset", *reinterpret_cast<CUpti_ActivityMemset4*>(record));
          break;
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
          // Driver-API records matter for NCCL: it launches its kernels with cuLaunchKernelEx,
          // which no runtime record covers, so without them its kernels have no launch to link to.
          auto* r = reinterpret_cast<CUpti_ActivityAPI*>(record);
          const bool driver = record->kind == CUPTI_ACTIVITY_KIND_DRIVER;
          const char* name = nullptr;
          cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, r->cbid, &name);
          a.kind = ActivityKind::kRuntime;
          a.name = name ? name : (driver ? "cuda_driver" : "cuda_runtime");
          a.start_ns = int64_t(r->start);
          a.end_ns = int64_t(r->end);
          a.correlation = int64_t(r->correlationId);
          break;
        }
        default: continue;
      }
      g_sink->records.push_back(std::move(a));
    }
    g_sink->processing_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::free(buffer);
}

// CONCURRENT_KERNEL records every kernel whatever API launched it (NCCL's driver-API launches
// included); DRIVER adds the cuLaunchKernel(Ex) calls those kernels correlate with.
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER};

class CuptiTracer final : public ActivityTracer {
 public:
  CuptiTracer() {
    if (g_sink) throw RunError("only one CUPTI tracer may exist at a time");
    g_sink = &sink_;
    try {
      // Before any kind is enabled, so every record uses our clock.
      check(cuptiActivityRegisterTimestampCallback(steady_timestamp), "timestamp callback");
      check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "buffer callbacks");
    } catch (...) {
      g_sink = nullptr;
      throw;
    }
  }
  ~CuptiTracer() override {
    if (running_) {
      for (auto k : kKinds) cuptiActivityDisable(k);
    }
    cuptiActivityFlushAll(1);
    g_sink = nullptr;
  }

  void start() override {
    for (auto k : kKinds) check(cuptiActivityEnable(k), "activity enable");
    running_ = true;
  }
  void stop() override {
    for (auto k : kKinds) cuptiActivityDisable(k);
    running_ = false;
    check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS) dropped_ += int64_t(dropped);
  }
  std::vector<Activity> take() override {
    std::lock_guard<std::mutex> lock(sink_.mutex);
    return std::exchange(sink_.records, {});
  }
  int64_t dropped_records() const override { return dropped_; }
  double processing_s() const override { return sink_.processing_s; }

 private:
  Sink sink_;
  bool running_ = false;
  int64_t dropped_ = 0;
};

}  // namespace

bool cupti_built() { return true; }
std::unique_ptr<ActivityTracer> make_cupti_tracer() { return std::make_unique<CuptiTracer>(); }

}  // namespace zb::profiler
