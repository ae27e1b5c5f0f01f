// autograd_bridge.cpp — see autograd_bridge.hpp.
#include "backends/common/autograd_bridge.hpp"
#include "backends/common/autograd_pointer.hpp"

#include <torch/csrc/autograd/custom_function.h>

namespace zb::backends::common {

void save_pointer(torch::autograd::AutogradContext* ctx, const std::string& key, const void* p) {
  ctx->saved_data[key] = reinterpret_cast<int64_t>(p);
}

void* load_pointer(torch::autograd::AutogradContext* ctx, const std::string& key) {
  return reinterpret_cast<void*>(ctx->saved_data[key].toInt());
}

namespace {
struct GatherFunction : public torch::autograd::Function<GatherFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& /*anchor*/, GatherOwner* owner,
                            int64_t id) {
    save_pointer(ctx, "owner", owner);
    ctx->saved_data["id"] = id;
    return owner->gathered_alias(int(id));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* owner = static_cast<GatherOwner*>(load_pointer(ctx, "owner"));
    owner->post_backward(int(ctx->saved_data["id"].toInt()), grads[0]);
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor gather_edge(const at::Tensor& anchor, GatherOwner* owner, int id) {
  return GatherFunction::apply(anchor, owner, int64_t(id));
}

}  // namespace zb::backends::common
