// storage.hpp — freeing and refilling a tensor's storage in place, the C++ equivalent of
// FSDP's `tensor.untyped_storage().resize_(0 | nbytes)`: every view of the storage (parameter
// views, tensors autograd saved) sees the refilled bytes. CPU here; CUDA in storage_cuda.cpp.
#pragma once
#include <ATen/ATen.h>

namespace zb::backends::common {

void free_storage(const at::Tensor& t);                   // storage nbytes -> 0
void allocate_storage(const at::Tensor& t, int64_t nbytes);  // storage nbytes -> nbytes (contents undefined)
int64_t storage_bytes(const at::Tensor& t);

// A new tensor [numel] (default: t's numel) over t's storage (from t's offset) with its own
// autograd identity and version counter (FSDP1's FlatParameter vs _full_param_padded): writes
// into t do not bump its version.
at::Tensor storage_alias(const at::Tensor& t, int64_t numel = -1);

}  // namespace zb::backends::common
