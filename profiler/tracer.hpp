// tracer.hpp — device activity tracers. Owns: the interface the trainer drives while it
// profiles (start before the traced steps, stop after them, take the records) and choosing
// one: CUPTI on CUDA; on CPU the host source (host_source.hpp) needs no tracer.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "profiler/activity.hpp"

namespace zb::profiler {

// Records a tracer read but did not turn into activity (profile.ranks[].skipped_records, present
// only when one is non-zero).
struct SkippedRecords {
  int64_t other_kind = 0;          // a kind the profile does not read (cupti_records.hpp)
  int64_t no_timestamp = 0;        // a start or end of 0, or an end before the start
  int64_t unreadable_buffers = 0;  // buffers whose walk stopped on a record CUPTI could not read
  int64_t total() const { return other_kind + no_timestamp + unreadable_buffers; }
};

class ActivityTracer {
 public:
  virtual ~ActivityTracer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;  // flushes every buffer; call after a device synchronize
  virtual std::vector<Activity> take() = 0;
  virtual int64_t dropped_records() const = 0;  // records CUPTI dropped (no buffer to write them to)
  virtual SkippedRecords skipped_records() const = 0;
  virtual double processing_s() const = 0;  // time spent parsing activity buffers
};

// CUPTI activity API: concurrent kernels, memcpy, memset and CUDA runtime calls, timestamps in
// steady_clock ns. Throws RunError in a build without CUDA or when CUPTI refuses (e.g. another
// CUPTI client such as nsys is attached).
std::unique_ptr<ActivityTracer> make_cupti_tracer();
bool cupti_built();

}  // namespace zb::profiler
