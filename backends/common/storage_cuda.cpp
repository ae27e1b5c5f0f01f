// storage_cuda.cpp — the CUDA half of storage.hpp (compiled only with the CUDA path).
#include <ATen/native/cuda/Resize.h>

namespace zb::backends::common {

void resize_cuda_storage(c10::StorageImpl* storage, size_t nbytes) { at::native::resize_bytes_cuda(storage, nbytes); }

}  // namespace zb::backends::common
