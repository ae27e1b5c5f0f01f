// nvtx_capture.hpp — the zerobench NVTX ranges as timed CPU slices for the profile's trace,
// through runtime/nvtx's recorder hook (CUPTI's own NVTX capture needs NVTX_INJECTION64_PATH
// set before the process starts; the hook needs nothing and uses the same clock).
#pragma once
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "profiler/activity.hpp"

namespace zb::profiler {

int64_t now_ns();  // steady_clock, the clock of every Activity

// Installs the recorder while alive (one at a time). Thread-safe: backward ranges may come
// from autograd's device threads.
class NvtxCapture {
 public:
  NvtxCapture();
  ~NvtxCapture();
  NvtxCapture(const NvtxCapture&) = delete;
  NvtxCapture& operator=(const NvtxCapture&) = delete;
  void set_enabled(bool on);
  std::vector<Activity> take();

 private:
  void on_event(const char* kind, const std::string& name, uint64_t id);
  std::mutex mutex_;
  bool enabled_ = false;
  std::unordered_map<std::thread::id, std::vector<Activity>> stacks_;  // open push/pop ranges
  std::unordered_map<uint64_t, Activity> open_;                         // open start/end ranges
  std::vector<Activity> done_;
};

}  // namespace zb::profiler
