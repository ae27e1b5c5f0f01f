// forward_backward.hpp — one micro-batch through a model whose weights an engine provides:
// forward (NVTX "forward"), loss x loss_scale, backward (NVTX "backward"). Shared by every
// engine; what differs between engines happens inside their UnitParamSource hooks.
#pragma once
#include "models/data.hpp"
#include "models/llama.hpp"

namespace zb::backends::common {

// Returns the unscaled loss, detached. `amp_scale` (fp16 loss scaling) multiplies after
// loss_scale, in fp32: accelerate's scaler.scale(loss / gas) (an fp16 loss times GradScaler's fp32
// 0-dim scale promotes to fp32), DeepSpeed's scale_if_loss (loss / gas, then * cur_scale).
at::Tensor forward_backward(const models::ModelConfig& cfg, models::UnitParamSource& params,
                            const models::Batch& batch, const models::RopeCache& rope,
                            const models::ActivationCheckpointing& activation_checkpointing,
                            double loss_scale, double amp_scale = 1.0);

}  // namespace zb::backends::common
