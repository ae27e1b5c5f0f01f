// storage.cpp — storage resize helpers (see storage.hpp).
#include "backends/common/storage.hpp"

#include <ATen/native/Resize.h>

namespace zb::backends::common {

#ifdef ZEROBENCH_WITH_CUDA
void resize_cuda_storage(c10::StorageImpl* storage, size_t nbytes);  // storage_cuda.cpp
#endif

namespace {
void resize(const at::Tensor& t, size_t nbytes) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == nbytes) return;
  if (t.is_cuda()) {
#ifdef ZEROBENCH_WITH_CUDA
    resize_cuda_storage(impl, nbytes);
    return;
#else
    TORCH_CHECK(false, "CUDA storage resize needs a CUDA build");
#endif
  }
  at::native::resize_bytes_cpu(impl, nbytes);
}
}  // namespace

void free_storage(const at::Tensor& t) {
  TORCH_CHECK(t.storage_offset() == 0, "free_storage needs storage_offset 0 (FSDP1 requires the same)");
  resize(t, 0);
}

void allocate_storage(const at::Tensor& t, int64_t nbytes) { resize(t, size_t(nbytes)); }

int64_t storage_bytes(const at::Tensor& t) { return int64_t(t.storage().nbytes()); }

at::Tensor storage_alias(const at::Tensor& t, int64_t numel) {
  at::NoGradGuard no_grad;
  auto alias = at::empty({0}, t.options());
  alias.set_(t.storage(), t.storage_offset(), {numel < 0 ? t.numel() : numel}, {1});
  return alias;
}

}  // namespace zb::backends::common
