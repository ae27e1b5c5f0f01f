// nvtx_capture.cpp — see nvtx_capture.hpp.
#include "profiler/nvtx_capture.hpp"

#include <chrono>
#include <cstring>

#include "runtime/nvtx.hpp"

namespace zb::profiler {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

NvtxCapture::NvtxCapture() {
  runtime::nvtx::set_recorder([this](const char* kind, const std::string& name, uint64_t id) { on_event(kind, name, id); });
}

NvtxCapture::~NvtxCapture() { runtime::nvtx::set_recorder(nullptr); }

void NvtxCapture::set_enabled(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  enabled_ = on;
}

void NvtxCapture::on_event(const char* kind, const std::string& name, uint64_t id) {
  const int64_t t = now_ns();
  std::lock_guard<std::mutex> lock(mutex_);
  auto& stack = stacks_[std::this_thread::get_id()];
  if (std::strcmp(kind, "push") == 0) {
    Activity a;
    a.kind = ActivityKind::kRange;
    a.name = name;
    a.start_ns = t;
    a.depth = int(stack.size());
    stack.push_back(std::move(a));
  } else if (std::strcmp(kind, "pop") == 0) {
    if (stack.empty()) return;
    Activity a = std::move(stack.back());
    stack.pop_back();
    a.end_ns = t;
    if (enabled_) done_.push_back(std::move(a));
  } else if (std::strcmp(kind, "start") == 0) {
    Activity a;
    a.kind = ActivityKind::kRange;
    a.name = name;
    a.start_ns = t;
    a.depth = int(stack.size());
    open_[id] = std::move(a);
  } else if (std::strcmp(kind, "end") == 0) {
    auto it = open_.find(id);
    if (it == open_.end()) return;
    it->second.end_ns = t;
    if (enabled_) done_.push_back(std::move(it->second));
    open_.erase(it);
  }
}

std::vector<Activity> NvtxCapture::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(done_, {});
}

}  // namespace zb::profiler
