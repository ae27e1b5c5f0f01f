// chrome_trace.hpp — activity as Chrome/Perfetto trace events (the JSON Object Format that
// chrome://tracing and ui.perfetto.dev open). Owns: the mapping pid = rank, tid = CUDA stream
// (or a fixed host lane), NVTX ranges as CPU slices, runtime-call -> kernel flow arrows, and
// merging ranks into one file.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "profiler/activity.hpp"

namespace zb::profiler {

// Host lanes (tids) next to CUDA stream ids, which CUPTI numbers from small integers.
inline constexpr int64_t kTidNvtx = 1'000'000;      // NVTX ranges of the training thread
inline constexpr int64_t kTidRuntime = 1'000'001;   // CUDA runtime calls
inline constexpr int64_t kTidHostCompute = 1'000'002;  // host source: training thread running
inline constexpr int64_t kTidCollectives = 1'000'003;  // host source: collectives in flight

// Events for one rank: metadata (process/thread names), one complete ("X") event per
// activity, with ts/dur in microseconds relative to `origin_ns`, and flow arrows from each
// runtime call to the kernel it launched (same correlation id).
nlohmann::json trace_events(const std::vector<Activity>& activities, int rank, int64_t origin_ns);

// {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": meta}.
nlohmann::json trace_document(nlohmann::json events, const nlohmann::json& meta);

}  // namespace zb::profiler
