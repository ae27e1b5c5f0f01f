// autograd_bridge.hpp — the autograd edge between an engine's sharded storage and the gathered
// parameters it hands the model: forward returns the engine's alias of a gathered buffer, backward
// gives the engine that buffer's whole gradient (the post-backward hook point: FSDP1's
// _post_backward_hook on a unit's FlatParameter, DeepSpeed ZeRO-3's per-parameter
// reduce_partition_and_remove_grads). The engine travels through the autograd context as an
// int64_t (what AutogradContext::saved_data can hold). Owns: that Function, once (it was written
// out in fsdp_engine.cpp and zero3_engine.cpp). Must not: know what an id means to the engine.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace zb::backends::common {

class GatherOwner {
 public:
  virtual ~GatherOwner() = default;
  // The tensor the model uses for `id` (a view of its gathered buffer).
  virtual at::Tensor gathered_alias(int id) = 0;
  // The summed gradient of that tensor, once autograd has it.
  virtual void post_backward(int id, const at::Tensor& grad) = 0;
};

// owner->gathered_alias(id) as a differentiable function of `anchor` (a 0-d leaf that requires
// grad: it puts the edge into the graph); its backward calls owner->post_backward(id, grad).
at::Tensor gather_edge(const at::Tensor& anchor, GatherOwner* owner, int id);

}  // namespace zb::backends::common
