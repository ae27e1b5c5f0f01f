// host_offload.hpp — host memory for offloaded model states and the copies between host and
// device, shared by every engine that offloads (FSDP1 CPUOffload, FSDP2 CPUOffloadPolicy,
// DeepSpeed offload_optimizer / offload_param). Owns: allocating a host buffer (pinned on CUDA
// when asked, as upstream's `pin_memory()` / `get_accelerator().pin_memory(...)`), the copies in
// each direction and the count of bytes each moved (Engine::offload_traffic, reported per step).
// Must not: decide what is offloaded or when (the engines do, following their upstream), or pick
// streams (the caller's current stream runs the copy, as `tensor.copy_(src, non_blocking=True)`
// does upstream).
//
// On a CPU-only run the device is the CPU: a host buffer is still a separate CPU tensor and every
// copy still runs (the offload data path is exercised), and the bytes are accounted where they
// would live on a GPU (ModelStateBytes::host). Pinning needs a CUDA driver: on CPU a buffer asked
// to be pinned is an ordinary one and reported as `pinned` (where it would live) all the same.
#pragma once
#include <ATen/ATen.h>

#include "backends/common/offload_traffic.hpp"

namespace zb::backends::common {

// A host tensor [sizes] of `dtype` for an offloaded state of a run on `device`: page-locked
// (at::empty(..., pin_memory=true), the CUDA host allocator) when `pin` and `device` is CUDA,
// else an ordinary CPU tensor. Contents undefined.
at::Tensor host_empty(at::IntArrayRef sizes, at::ScalarType dtype, bool pin, at::Device device);

// Copies between host buffers and device tensors, counting bytes. A copy runs on the caller's
// current stream; from or to pinned memory on CUDA it is asynchronous (non_blocking=True, as
// upstream), so the caller synchronises before the host reads what a device->host copy wrote.
// On CPU both tensors are CPU tensors and copy_ runs at once.
class HostCopies {
 public:
  void to_device(const at::Tensor& device_dst, const at::Tensor& host_src);
  void to_host(const at::Tensor& host_dst, const at::Tensor& device_src);
  const OffloadTraffic& traffic() const { return traffic_; }

 private:
  OffloadTraffic traffic_;
};

}  // namespace zb::backends::common
