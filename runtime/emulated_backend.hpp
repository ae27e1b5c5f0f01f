// emulated_backend.hpp — the process group behind `--emulate-world-size W`: one process plays
// rank r of a W-rank job. Collectives keep every shape and byte count of the real job but move
// no data across ranks (as PyTorch's FakeProcessGroup): all-gather copies this rank's input into
// every chunk, reduce-scatter copies this rank's chunk (FakeProcessGroup leaves it unwritten),
// all-to-all copies this rank's chunk of the input into every chunk of the output (as if every
// rank held this rank's data; FakeProcessGroup leaves it unwritten), all-reduce and broadcast
// leave tensors as they are.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace zb::runtime {

class EmulatedBackend final : public c10d::Backend {
 public:
  EmulatedBackend(int rank, int size) : c10d::Backend(rank, size) {}
  const std::string getBackendName() const override { return "emulated"; }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& = c10d::BarrierOptions()) override;
};

}  // namespace zb::runtime
