// nvtx.cpp — see nvtx.hpp. NVTX3 is header-only: without a profiler attached every call is a
// cheap no-op, so ranges stay on in every build that has the headers.
#include "runtime/nvtx.hpp"

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

void record(const char* kind, const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_recorder) g_recorder(kind, name);
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
  record("push", name);
#ifdef ZEROBENCH_WITH_NVTX
  auto a = attributes(name);
  nvtxDomainRangePushEx(domain(), &a);
#endif
}

Range::~Range() {
  record("pop", t_stack.empty() ? std::string() : t_stack.back());
  if (!t_stack.empty()) t_stack.pop_back();
#ifdef ZEROBENCH_WITH_NVTX
  nvtxDomainRangePop(domain());
#endif
}

uint64_t start(const std::string& name) {
  record("start", name);
#ifdef ZEROBENCH_WITH_NVTX
  auto a = attributes(name);
  return nvtxDomainRangeStartEx(domain(), &a);
#else
  return 0;
#endif
}

void end(uint64_t id) {
  record("end", "");
#ifdef ZEROBENCH_WITH_NVTX
  nvtxDomainRangeEnd(domain(), id);
#else
  (void)id;
#endif
}

void set_recorder(Recorder recorder) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_recorder = std::move(recorder);
}

}  // namespace zb::runtime::nvtx
