// host_offload.cpp — see host_offload.hpp.
#include "backends/common/host_offload.hpp"

namespace zb::backends::common {

at::Tensor host_empty(at::IntArrayRef sizes, at::ScalarType dtype, bool pin, at::Device device) {
  const auto opts = at::TensorOptions().dtype(dtype).device(at::kCPU);
  return at::empty(sizes, pin && device.is_cuda() ? opts.pinned_memory(true) : opts);
}

namespace {
int64_t nbytes(const at::Tensor& t) { return t.numel() * int64_t(t.element_size()); }
}  // namespace

void HostCopies::to_device(const at::Tensor& device_dst, const at::Tensor& host_src) {
  TORCH_CHECK(host_src.device().is_cpu(), "HostCopies::to_device: the source is not a host tensor");
  // is_pinned() is asked only with a CUDA destination (on CPU nothing is pinned).
  device_dst.copy_(host_src, /*non_blocking=*/!device_dst.is_cpu() && host_src.is_pinned());
  traffic_.h2d_bytes += nbytes(host_src);
  ++traffic_.h2d_copies;
}

void HostCopies::to_host(const at::Tensor& host_dst, const at::Tensor& device_src) {
  TORCH_CHECK(host_dst.device().is_cpu(), "HostCopies::to_host: the destination is not a host tensor");
  host_dst.copy_(device_src, /*non_blocking=*/!device_src.is_cpu() && host_dst.is_pinned());
  traffic_.d2h_bytes += nbytes(device_src);
  ++traffic_.d2h_copies;
}

}  // namespace zb::backends::common
