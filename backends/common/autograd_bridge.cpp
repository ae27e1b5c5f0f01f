// autograd_bridge.cpp — see autograd_bridge.hpp.
#include "backends/common/autograd_bridge.hpp"

#include <torch/csrc/autograd/custom_function.h>

namespace zb::backends::common {

namespace {
struct GatherFunction : public torch::autograd::Function<GatherFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& /*anchor*/, GatherOwner* owner,
                            int64_t id) {
    ctx->saved_data["owner"] = reinterpret_cast<int64_t>(owner);
    ctx->saved_data["id"] = id;
    return owner->gathered_alias(int(id));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* owner = reinterpret_cast<GatherOwner*>(ctx->saved_data["owner"].toInt());
    owner->post_backward(int(ctx->saved_data["id"].toInt()), grads[0]);
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor gather_edge(const at::Tensor& anchor, GatherOwner* owner, int id) {
  return GatherFunction::apply(anchor, owner, int64_t(id));
}

}  // namespace zb::backends::common
