// nvtx.cpp — see nvtx.hpp. NVTX3 is header-only: without a profiler attached every call is a
// cheap no-op, so ranges stay on in every build that has the headers.
#include "runtime/nvtx.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>

#ifdef ZEROBENCH_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace zb::runtime::nvtx {

namespace {
std::mutex g_mutex;
Recorder g_recorder;
thread_local std::vector<std::string> t_stack;
std::atomic<uint64_t> g_next_id{1};
#ifdef ZEROBENCH_WITH_NVTX
std::unordered_map<uint64_t, nvtxRangeId_t> g_nvtx_ids;  // our start/end id -> NVTX's (guarded by g_mutex)
#endif

void record(const char* kind, const std::string& name, uint64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_recorder) g_recorder(kind, name, id);
}

#ifdef ZEROBENCH_WITH_NVTX
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("zerobench");
  return d;
}
nvtxEventAttributes_t attributes(const std::string& name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name.c_str();
  return a;
}
#endif
}  // namespace

bool compiled_in() {
#ifdef ZEROBENCH_WITH_NVTX
  return true;
#else
  return false;
#endif
}

Range::Range(const std::string& name) {
  t_stack.push_back(name);
  record("push", name, 0);
#ifdef ZEROBENCH_WITH_NVTX
  auto a = attributes(name);
  nvtxDomainRangePushEx(domain(), &a);
#endif
}

Range::~Range() {
  record("pop", t_stack.empty() ? std::string() : t_stack.back(), 0);
  if (!t_stack.empty()) t_stack.pop_back();
#ifdef ZEROBENCH_WITH_NVTX
  nvtxDomainRangePop(domain());
#endif
}

// Our own ids: NVTX returns 0 for every range when no tool is attached, and the recorder
// must still pair starts with ends.
uint64_t start(const std::string& name) {
  const uint64_t id = g_next_id++;
  record("start", name, id);
#ifdef ZEROBENCH_WITH_NVTX
  auto a = attributes(name);
  const auto nvtx_id = nvtxDomainRangeStartEx(domain(), &a);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_nvtx_ids[id] = nvtx_id;
#endif
  return id;
}

void end(uint64_t id) {
  if (id == 0) return;
  record("end", "", id);
#ifdef ZEROBENCH_WITH_NVTX
  nvtxRangeId_t nvtx_id = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_nvtx_ids.find(id);
    if (it == g_nvtx_ids.end()) return;
    nvtx_id = it->second;
    g_nvtx_ids.erase(it);
  }
  nvtxDomainRangeEnd(domain(), nvtx_id);
#endif
}

void set_recorder(Recorder recorder) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_recorder = std::move(recorder);
}

}  // namespace zb::runtime::nvtx
