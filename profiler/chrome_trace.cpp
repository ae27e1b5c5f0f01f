// chrome_trace.cpp — Chrome/Perfetto trace export (see chrome_trace.hpp).
#include "profiler/chrome_trace.hpp"

#include <map>
#include <set>

namespace zb::profiler {

namespace {
int64_t lane(const Activity& a) {
  switch (a.kind) {
    case ActivityKind::kRange: return kTidNvtx;
    case ActivityKind::kRuntime: return kTidRuntime;
    case ActivityKind::kHostCompute: return kTidHostCompute;
    case ActivityKind::kCollective: return kTidCollectives;
    default: return a.stream;
  }
}

std::string lane_name(int64_t tid) {
  switch (tid) {
    case kTidNvtx: return "host: NVTX ranges";
    case kTidRuntime: return "host: CUDA runtime";
    case kTidHostCompute: return "host: training thread (not blocked on comm)";
    case kTidCollectives: return "host: collectives in flight";
    default: return "stream " + std::to_string(tid);
  }
}

double us(int64_t ns) { return double(ns) / 1e3; }
}  // namespace

nlohmann::json trace_events(const std::vector<Activity>& activities, int rank, int64_t origin_ns) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  std::set<int64_t> lanes;
  std::map<int64_t, const Activity*> launches;  // correlation -> runtime call
  for (const auto& a : activities)
    if (a.kind == ActivityKind::kRuntime && a.correlation != 0) launches[a.correlation] = &a;
  for (const auto& a : activities) {
    const int64_t tid = lane(a);
    lanes.insert(tid);
    const auto cls = classify(a);
    nlohmann::json e = {{"ph", "X"},
                        {"name", a.name},
                        {"cat", cls == KernelClass::kNotKernel ? activity_kind_name(a.kind) : kernel_class_name(cls)},
                        {"pid", rank},
                        {"tid", tid},
                        {"ts", us(a.start_ns - origin_ns)},
                        {"dur", us(a.duration_ns())}};
    nlohmann::json args = nlohmann::json::object();
    if (a.correlation != 0) args["correlation"] = a.correlation;
    if (a.bytes != 0) args["bytes"] = a.bytes;
    if (a.kind == ActivityKind::kKernel || a.kind == ActivityKind::kMemcpy || a.kind == ActivityKind::kMemset) {
      args["device"] = a.device;
      args["stream"] = a.stream;
    }
    if (!args.empty()) e["args"] = args;
    events.push_back(std::move(e));
    if (a.kind == ActivityKind::kKernel || a.kind == ActivityKind::kMemcpy || a.kind == ActivityKind::kMemset) {
      auto it = launches.find(a.correlation);
      if (it != launches.end()) {  // flow arrow: the launch, then the kernel it enqueued
        const Activity& l = *it->second;
        events.push_back({{"ph", "s"}, {"id", a.correlation}, {"name", "launch"}, {"cat", "flow"}, {"pid", rank},
                          {"tid", kTidRuntime}, {"ts", us(l.start_ns - origin_ns)}});
        events.push_back({{"ph", "f"}, {"bp", "e"}, {"id", a.correlation}, {"name", "launch"}, {"cat", "flow"},
                          {"pid", rank}, {"tid", tid}, {"ts", us(a.start_ns - origin_ns)}});
      }
    }
  }
  for (int64_t tid : lanes)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", tid}, {"args", {{"name", lane_name(tid)}}}});
  return events;
}

nlohmann::json trace_document(nlohmann::json events, const nlohmann::json& meta) {
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}, {"otherData", meta}};
}

}  // namespace zb::profiler
