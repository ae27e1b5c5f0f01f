// activity.hpp — what a tracer records and how the profile classifies it. Owns: the Activity
// record (one kernel, memcpy/memset, runtime call, host collective or host compute span, or
// NVTX range), every timestamp in one clock (steady_clock ns, which the CUPTI tracer also
// uses), and the kernel classes of DESIGN §7 / Holistic Trace Analysis.
#pragma once
#include <cstdint>
#include <string>

namespace zb::profiler {

enum class ActivityKind {
  kKernel,       // a GPU kernel (CUPTI CONCURRENT_KERNEL)
  kMemcpy,       // a GPU memory copy
  kMemset,       // a GPU memset
  kRuntime,      // a CUDA runtime API call on a host thread
  kCollective,   // host source: a collective from issue to completion (Gloo worker threads)
  kHostCompute,  // host source: the training thread running, not blocked on a collective
  kRange,        // an NVTX range of the "zerobench" domain, as a CPU slice
};
const char* activity_kind_name(ActivityKind kind);

struct Activity {
  ActivityKind kind = ActivityKind::kKernel;
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
  int64_t stream = 0;       // CUDA stream id; host sources use small fixed ids (see host_source.hpp)
  int64_t correlation = 0;  // CUPTI correlation id linking a runtime call to its kernel
  int64_t bytes = 0;        // memcpy/memset/collective
  int device = 0;
  int depth = 0;            // NVTX nesting depth (ranges only)
  int64_t duration_ns() const { return end_ns - start_ns; }
};

// HTA's kernel types, with compute split as DESIGN §7 asks. Communication, memory and idle are
// "non-compute"; GEMM, attention, elementwise/other and host compute are "compute".
enum class KernelClass { kCommunication, kGemm, kAttention, kElementwiseOther, kMemory, kHostCompute, kNotKernel };
const char* kernel_class_name(KernelClass c);
bool is_compute(KernelClass c);

// Communication: kernel names starting with "nccl" (HTA's rule) and host collectives. Memory:
// memcpy/memset. Attention: flash/fmha/sdpa/attention kernels. GEMM: cuBLAS/cuBLASLt/CUTLASS
// names (gemm, xmma, cutlass, nvjet, cublas). Everything else a kernel runs is elementwise/other.
KernelClass classify(const Activity& a);
KernelClass classify_kernel_name(const std::string& name);

}  // namespace zb::profiler
