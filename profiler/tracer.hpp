// tracer.hpp — device activity tracers. Owns: the interface the trainer drives while it
// profiles (start before the traced steps, stop after them, take the records) and choosing
// one: CUPTI on CUDA; on CPU the host source (host_source.hpp) needs no tracer.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "profiler/activity.hpp"

namespace zb::profiler {

class ActivityTracer {
 public:
  virtual ~ActivityTracer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;  // flushes every buffer; call after a device synchronize
  virtual std::vector<Activity> take() = 0;
  virtual int64_t dropped_records() const = 0;
  virtual double processing_s() const = 0;  // time spent parsing activity buffers
};

// CUPTI activity API: concurrent kernels, memcpy, memset and CUDA runtime calls, timestamps in
// steady_clock ns. Throws RunError in a build without CUDA or when CUPTI refuses (e.g. another
// CUPTI client such as nsys is attached).
std::unique_ptr<ActivityTracer> make_cupti_tracer();
bool cupti_built();

}  // namespace zb::profiler
