// emulated_backend.cpp — see emulated_backend.hpp.
#include "runtime/emulated_backend.hpp"

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace zb::runtime {

namespace {
// Work that is complete on creation (torch's FakeWork lives in a header that needs Python.h).
class DoneWork final : public c10d::Work {
 public:
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds = kNoTimeout) override { return true; }
};
c10::intrusive_ptr<c10d::Work> done() { return c10::make_intrusive<DoneWork>(); }
}  // namespace

c10::intrusive_ptr<c10d::Work> EmulatedBackend::_allgather_base(at::Tensor& out, at::Tensor& in,
                                                                const c10d::AllgatherOptions&) {
  for (auto& chunk : out.chunk(getSize())) chunk.copy_(in);
  return done();
}

c10::intrusive_ptr<c10d::Work> EmulatedBackend::_reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                                    const c10d::ReduceScatterOptions&) {
  out.copy_(in.chunk(getSize())[size_t(getRank())]);
  return done();
}

c10::intrusive_ptr<c10d::Work> EmulatedBackend::alltoall_base(at::Tensor& out, at::Tensor& in,
                                                              std::vector<int64_t>& out_splits,
                                                              std::vector<int64_t>& in_splits,
                                                              const c10d::AllToAllOptions&) {
  TORCH_CHECK(out_splits.empty() && in_splits.empty(), "emulated all_to_all: only equal splits are emulated");
  const auto mine = in.chunk(getSize())[size_t(getRank())];
  for (auto& chunk : out.chunk(getSize())) chunk.copy_(mine);
  return done();
}

c10::intrusive_ptr<c10d::Work> EmulatedBackend::allreduce(std::vector<at::Tensor>&, const c10d::AllreduceOptions&) {
  return done();
}

c10::intrusive_ptr<c10d::Work> EmulatedBackend::broadcast(std::vector<at::Tensor>&, const c10d::BroadcastOptions&) {
  return done();
}

c10::intrusive_ptr<c10d::Work> EmulatedBackend::barrier(const c10d::BarrierOptions&) { return done(); }

}  // namespace zb::runtime
