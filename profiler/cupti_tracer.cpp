// cupti_tracer.cpp — the CUPTI activity tracer (see tracer.hpp); compiled only in CUDA builds.
// Buffers are handed to CUPTI on request and parsed (cupti_records.hpp) when CUPTI completes them
// (on its worker thread, or in cuptiActivityFlushAll at stop()). Timestamps come from our
// steady_clock callback, so kernels line up with NVTX ranges and step windows.
// Devices: every CUPTI call here is process-wide — cuptiActivityEnable/Disable for a kind (not
// cuptiActivityEnableContext), cuptiActivityFlushAll, cuptiActivityRegister*Callbacks,
// cuptiActivityGetNumDroppedRecords(nullptr, 0, ...) (the global buffers), cuptiGetResultString,
// cuptiGetCallbackName: none reads the current device or context, so none needs a device guard
// (CUPTI docs, cupti_activity.h). Records carry their own deviceId.
#include <cupti.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "profiler/cupti_records.hpp"
#include "profiler/nvtx_capture.hpp"
#include "profiler/tracer.hpp"
#include "runtime/errors.hpp"

namespace zb::profiler {

namespace {

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kAlign = 8;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  throw RunError(std::string("CUPTI ") + what + " failed: " + (msg ? msg : "unknown error") +
                 " (another CUPTI client such as nsys or the torch profiler may be attached)");
}

uint64_t CUPTIAPI steady_timestamp() { return uint64_t(now_ns()); }

struct Sink {
  mutable std::mutex mutex;
  std::vector<Activity> records;
  KernelNames names;
  SkippedRecords skipped;
  double processing_s = 0;
};
Sink* g_sink = nullptr;  // CUPTI's callbacks are plain functions

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  const auto t0 = std::chrono::steady_clock::now();
  if (g_sink) {
    std::lock_guard<std::mutex> lock(g_sink->mutex);
    parse_cupti_buffer(buffer, valid, g_sink->names, g_sink->records, g_sink->skipped);
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
  SkippedRecords skipped_records() const override {
    std::lock_guard<std::mutex> lock(sink_.mutex);
    return sink_.skipped;
  }
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
