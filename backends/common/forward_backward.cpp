// forward_backward.cpp — see forward_backward.hpp.
#include "backends/common/forward_backward.hpp"

#include "runtime/nvtx.hpp"

namespace zb::backends::common {

at::Tensor forward_backward(const models::ModelConfig& cfg, models::UnitParamSource& params,
                            const models::Batch& batch, const models::RopeCache& rope,
                            const models::ActivationCheckpointing& activation_checkpointing,
                            double loss_scale, double amp_scale) {
  models::ForwardOptions fo;
  fo.activation_checkpointing = activation_checkpointing;
  // Per-document batches (--batching pad|pack): positions and the block-diagonal mask from the
  // batch; the loss is summed over labels and loss_scale holds 1 / the step's label count.
  const bool per_document = batch.document_ids.defined();
  fo.sum_loss = per_document;
  at::Tensor loss;
  {
    runtime::nvtx::Range range("forward");
    const auto r = per_document ? models::document_attention(rope, batch.position_ids, batch.document_ids) : rope;
    loss = models::forward_loss(cfg, params, batch.tokens, batch.targets, r, fo);
  }
  {
    runtime::nvtx::Range range("backward");
    auto scaled = loss * loss_scale;
    if (amp_scale != 1.0) scaled = scaled.to(at::kFloat) * amp_scale;
    scaled.backward();
  }
  return loss.detach();
}

}  // namespace zb::backends::common
