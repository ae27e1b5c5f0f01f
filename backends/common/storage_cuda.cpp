// storage_cuda.cpp — the CUDA half of storage.hpp (compiled only with the CUDA path).
// The guard makes the storage's own device current: the caching allocator allocates, and the
// refill's cudaMemcpyAsync runs, on the current device and its current stream. torch 2.x's
// resize_bytes_cuda (aten/src/ATen/native/cuda/Resize.cpp) guards itself on storage->device();
// older ones used at::cuda::current_device(), so the guard here holds whichever torch is linked.
#include <ATen/native/cuda/Resize.h>
#include <c10/cuda/CUDAGuard.h>

namespace zb::backends::common {

void resize_cuda_storage(c10::StorageImpl* storage, size_t nbytes) {
  const c10::cuda::CUDAGuard guard{storage->device()};
  at::native::resize_bytes_cuda(storage, nbytes);
}

}  // namespace zb::backends::common
