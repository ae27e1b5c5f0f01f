// activity.cpp — kernel classification (see activity.hpp).
#include "profiler/activity.hpp"

#include <algorithm>
#include <cctype>

namespace zb::profiler {

namespace {
bool contains(const std::string& haystack, const char* needle) { return haystack.find(needle) != std::string::npos; }
}  // namespace

const char* activity_kind_name(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::kKernel: return "kernel";
    case ActivityKind::kMemcpy: return "memcpy";
    case ActivityKind::kMemset: return "memset";
    case ActivityKind::kRuntime: return "cuda_runtime";
    case ActivityKind::kCollective: return "collective";
    case ActivityKind::kHostCompute: return "host_compute";
    case ActivityKind::kRange: return "nvtx";
  }
  return "unknown";
}

const char* kernel_class_name(KernelClass c) {
  switch (c) {
    case KernelClass::kCommunication: return "communication";
    case KernelClass::kGemm: return "gemm";
    case KernelClass::kAttention: return "attention";
    case KernelClass::kElementwiseOther: return "elementwise_other";
    case KernelClass::kMemory: return "memory";
    case KernelClass::kHostCompute: return "host_compute";
    case KernelClass::kNotKernel: return "not_kernel";
  }
  return "unknown";
}

bool is_compute(KernelClass c) {
  return c == KernelClass::kGemm || c == KernelClass::kAttention || c == KernelClass::kElementwiseOther ||
         c == KernelClass::kHostCompute;
}

KernelClass classify_kernel_name(const std::string& name) {
  if (name.rfind("nccl", 0) == 0) return KernelClass::kCommunication;
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  // Attention before GEMM: fused attention kernels may name their inner GEMMs.
  for (const char* k : {"flash", "fmha", "sdpa", "attention", "attn"})
    if (contains(lower, k)) return KernelClass::kAttention;
  for (const char* k : {"gemm", "xmma", "cutlass", "nvjet", "cublas", "gemv"})
    if (contains(lower, k)) return KernelClass::kGemm;
  return KernelClass::kElementwiseOther;
}

KernelClass classify(const Activity& a) {
  switch (a.kind) {
    case ActivityKind::kKernel: return classify_kernel_name(a.name);
    case ActivityKind::kMemcpy:
    case ActivityKind::kMemset: return KernelClass::kMemory;
    case ActivityKind::kCollective: return KernelClass::kCommunication;
    case ActivityKind::kHostCompute: return KernelClass::kHostCompute;
    default: return KernelClass::kNotKernel;
  }
}

}  // namespace zb::profiler
