// fsdp2_param.cpp — see fsdp2_param.hpp (torch 2.11 _fully_shard/_fsdp_param.py FSDPParam).
#include "backends/fsdp2/fsdp2_param.hpp"

#include <utility>

#include "backends/common/storage.hpp"

namespace zb::backends::fsdp2 {

namespace {

at::Tensor alias_leaf(const at::Tensor& storage_owner, const std::vector<int64_t>& shape) {
  at::NoGradGuard no_grad;
  auto t = at::empty({0}, storage_owner.options());
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i) strides[size_t(i)] = strides[size_t(i) + 1] * shape[size_t(i) + 1];
  t.set_(storage_owner.storage(), 0, shape, strides);
  return t.requires_grad_(true);
}

}  // namespace

void init_sharded_param(Param& p, int shard_rank, const at::TensorOptions& orig_opts, const at::Tensor& full,
                        const std::function<at::Tensor(int64_t row_lo)>& load_rows) {
  // Pre-pad the sharded parameter: new_zeros(padded chunk), this rank's rows copied in.
  p.sharded_data = at::zeros({p.l.padded_shard_numel()}, orig_opts);
  const int64_t row_lo = int64_t(shard_rank) * p.l.chunk_rows * p.l.row;
  if (p.l.local_rows > 0 && load_rows) {
    p.sharded_data.narrow(0, 0, p.l.local_numel()).copy_(load_rows(row_lo));
  } else if (p.l.local_rows > 0) {
    p.sharded_data.narrow(0, 0, p.l.local_numel()).copy_(full.reshape({-1}).narrow(0, row_lo, p.l.local_numel()));
  }
  p.local = p.sharded_data.narrow(0, 0, p.l.local_numel());
}

void init_unsharded_param(Param& p, const at::TensorOptions& param_opts, int shard_size) {
  p.all_gather_output = at::empty({p.l.chunk_rows * shard_size * p.l.row}, param_opts);
  p.unsharded = alias_leaf(p.all_gather_output, p.l.shape);
  common::free_storage(p.all_gather_output);
}

const at::Tensor& all_gather_input(const Param& p, ShardedState state) {
  return state == ShardedState::kShardedPostForward ? p.post_forward_data : p.sharded_data;
}

void alloc_all_gather_output(Param& p) {
  common::allocate_storage(p.all_gather_output, p.all_gather_output.numel() * p.all_gather_output.element_size());
}

void free_unsharded_param(Param& p) {
  common::free_storage(p.all_gather_output);
  p.post_forward_data = at::Tensor();
}

void to_sharded_post_forward(Param& p, int n_ranks, int rank) {
  const int64_t n = p.all_gather_output.numel() / n_ranks;
  p.post_forward_data = p.all_gather_output.narrow(0, n * rank, n).clone();
  common::free_storage(p.all_gather_output);
}

void accumulate_unsharded_grad_if_needed(Param& p) {
  if (p.accumulated_grad.defined() && p.unsharded.grad().defined()) {
    p.accumulated_grad.add_(p.unsharded.grad());
    p.unsharded.mutable_grad() = at::Tensor();
  }
}

void to_accumulated_grad_if_needed(Param& p, std::optional<at::ScalarType> reduce_dtype) {
  const auto& grad = p.unsharded.grad();
  if (reduce_dtype && grad.defined() && grad.scalar_type() != *reduce_dtype) {
    p.accumulated_grad = grad.to(*reduce_dtype);
    p.unsharded.mutable_grad() = at::Tensor();
  }
}

at::Tensor take_unsharded_grad(Param& p) {
  if (p.accumulated_grad.defined()) return std::exchange(p.accumulated_grad, at::Tensor());
  if (!p.unsharded.grad().defined()) return at::Tensor();
  auto grad = p.unsharded.grad();
  p.unsharded.mutable_grad() = at::Tensor();
  return grad;
}

}  // namespace zb::backends::fsdp2
