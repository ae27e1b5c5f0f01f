// cupti_records.cpp — see cupti_records.hpp.
#include "profiler/cupti_records.hpp"

#include <cupti.h>
#include <cxxabi.h>

#include <cstdlib>
#include <utility>

namespace zb::profiler {

namespace {

// Kernel records. cupti_activity.h declares only the newest kernel record version (older ones
// are in cupti_activity_deprecated.h); CUPTI appends fields from one version to the next, and
// the loaded libcupti writes its own newest layout. The fields read here (kind .. name) sit at
// the same offsets in every version since CUpti_ActivityKernel4, so reading them through the
// newest struct the headers define is right whichever version the library writes; the asserts
// keep that true if a future header moves them.
#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;  // the newest in the CUDA 13 headers
#else
using KernelRecord = CUpti_ActivityKernel9;   // the newest in the CUDA 12.4+ headers
#endif
static_assert(offsetof(KernelRecord, start) == offsetof(CUpti_ActivityKernel4, start), "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, end) == offsetof(CUpti_ActivityKernel4, end), "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, deviceId) == offsetof(CUpti_ActivityKernel4, deviceId), "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, streamId) == offsetof(CUpti_ActivityKernel4, streamId), "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, correlationId) == offsetof(CUpti_ActivityKernel4, correlationId),
              "CUPTI kernel record layout");
static_assert(offsetof(KernelRecord, name) == offsetof(CUpti_ActivityKernel4, name), "CUPTI kernel record layout");

const char* memcpy_name(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy";
  }
}

// memcpy and memset records share these fields (the timestamps are checked and set by the caller).
template <typename Record>
Activity transfer(ActivityKind kind, const char* name, const Record& r) {
  Activity a;
  a.kind = kind;
  a.name = name;
  a.device = int(r.deviceId);
  a.stream = int64_t(r.streamId);
  a.correlation = int64_t(r.correlationId);
  a.bytes = int64_t(r.bytes);
  return a;
}

// CUPTI writes 0 where it could not time a record (e.g. no device memory for a kernel's
// timestamps); such a record at t = 0 would be outside every step yet pull a trace's origin there.
bool timed(uint64_t start, uint64_t end) { return start != 0 && end != 0 && end >= start; }

}  // namespace

const std::string& KernelNames::demangled(const char* mangled) {
  auto it = names_.find(mangled);
  if (it != names_.end()) return it->second;
  int status = 0;
  char* d = mangled ? abi::__cxa_demangle(mangled, nullptr, nullptr, &status) : nullptr;
  std::string name = status == 0 && d ? d : (mangled ? mangled : "?");
  std::free(d);
  return names_.emplace(mangled, std::move(name)).first->second;
}

void parse_cupti_buffer(uint8_t* buffer, size_t valid, KernelNames& names, std::vector<Activity>& out,
                        SkippedRecords& skipped) {
  if (buffer == nullptr || valid == 0) return;  // nothing recorded (CUPTI says INVALID_PARAMETER to a null buffer)
  CUpti_Activity* record = nullptr;
  CUptiResult status;
  while ((status = cuptiActivityGetNextRecord(buffer, valid, &record)) == CUPTI_SUCCESS) {
    Activity a;
    uint64_t start = 0, end = 0;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto& k = *reinterpret_cast<const KernelRecord*>(record);
        a.kind = ActivityKind::kKernel;
        a.name = names.demangled(k.name);
        a.device = int(k.deviceId);
        a.stream = int64_t(k.streamId);
        a.correlation = int64_t(k.correlationId);
        start = k.start;
        end = k.end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto& m = *reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        a = transfer(ActivityKind::kMemcpy, memcpy_name(m.copyKind), m);
        start = m.start;
        end = m.end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto& m = *reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        a = transfer(ActivityKind::kMemset, "memset", m);
        start = m.start;
        end = m.end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        // Driver-API records matter for NCCL: it launches its kernels with cuLaunchKernelEx,
        // which no runtime record covers, so without them its kernels have no launch to link to.
        const auto& r = *reinterpret_cast<const CUpti_ActivityAPI*>(record);
        const bool driver = record->kind == CUPTI_ACTIVITY_KIND_DRIVER;
        const char* name = nullptr;
        if (cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, r.cbid, &name) !=
            CUPTI_SUCCESS)
          name = nullptr;
        a.kind = ActivityKind::kRuntime;
        a.name = name ? name : (driver ? "cuda_driver" : "cuda_runtime");
        a.correlation = int64_t(r.correlationId);
        start = r.start;
        end = r.end;
        break;
      }
      default:
        ++skipped.other_kind;
        continue;
    }
    if (!timed(start, end)) {
      ++skipped.no_timestamp;
      continue;
    }
    a.start_ns = int64_t(start);
    a.end_ns = int64_t(end);
    out.push_back(std::move(a));
  }
  // MAX_LIMIT_REACHED: every record read. Anything else (INVALID_KIND) stopped the walk on a
  // record CUPTI could not size, and what followed it in this buffer is lost.
  if (status != CUPTI_ERROR_MAX_LIMIT_REACHED) ++skipped.unreadable_buffers;
}

}  // namespace zb::profiler
