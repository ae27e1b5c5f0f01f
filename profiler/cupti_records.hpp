// cupti_records.hpp — reading a completed CUPTI activity buffer into Activity records (CUDA builds
// only; the tracer that enables CUPTI and owns its buffers is cupti_tracer.cpp). Owns: which
// record kinds become which Activity (kernels with their demangled names, memcpy with its
// direction, memset, runtime and driver API calls by callback name), the timestamps and ids each
// carries, and counting what is skipped (tracer.hpp SkippedRecords). Needs no device: the buffer
// is walked with cuptiActivityGetNextRecord and API names come from cuptiGetCallbackName, both
// pure library calls, so tests/test_profiler.cpp runs it on a synthetic buffer on CPU.
// Must not: enable, flush or free buffers, or classify kernels (activity.hpp does).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiler/activity.hpp"
#include "profiler/tracer.hpp"

namespace zb::profiler {

// Demangled kernel names by CUPTI's name pointer (CUPTI keeps each kernel's name string alive
// for the process, and hands the same pointer for every launch of that kernel).
class KernelNames {
 public:
  const std::string& demangled(const char* mangled);

 private:
  std::unordered_map<const char*, std::string> names_;
};

// Appends the activity of the first `valid` bytes of `buffer` to `out`; counts what it skips.
void parse_cupti_buffer(uint8_t* buffer, size_t valid, KernelNames& names, std::vector<Activity>& out,
                        SkippedRecords& skipped);

}  // namespace zb::profiler
