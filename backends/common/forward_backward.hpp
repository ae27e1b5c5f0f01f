// forward_backward.hpp — one micro-batch through a model whose weights an engine provides:
// forward (NVTX "forward"), loss x loss_scale, backward (NVTX "backward"). Shared by every
// engine; what differs between engines happens inside their UnitParamSource hooks.
#pragma once
#include "models/data.hpp"
#include "models/llama.hpp"

namespace zb::backends::common {

// Returns the unscaled loss, detached.
at::Tensor forward_backward(const models::ModelConfig& cfg, models::UnitParamSource& params,
                            const models::Batch& batch, const models::RopeCache& rope, bool activation_checkpointing,
                            double loss_scale);

}  // namespace zb::backends::common
