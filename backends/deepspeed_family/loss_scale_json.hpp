// loss_scale_json.hpp — DeepSpeed's `fp16` loss-scaling keys read back from an engine's options
// JSON (the inverse of to_json(DeepSpeedLossScaleOptions) in loss_scaler.hpp), shared by the
// engines that run DeepSpeed's fp16 (zero3_options.cpp, zero12_options.cpp).
// Owns: the JSON -> options direction and its range checks (one line naming the section).
// Must not: read a config file (config/deepspeed_fp16.* does) or run a scaler.
// Belongs to the DeepSpeed family (backends/deepspeed_family/), used by zero0, zero12, zero3.
#pragma once
#include <nlohmann/json.hpp>

#include "backends/common/loss_scaler.hpp"

namespace zb::backends::deepspeed_family {

// Missing keys keep DeepSpeedFP16Config's defaults; throws UsageError for loss_scale < 0,
// hysteresis < 1, loss_scale_window <= 0 or min_loss_scale <= 0.
common::DeepSpeedLossScaleOptions deepspeed_loss_scale_from_json(const nlohmann::json& j);

}  // namespace zb::backends::deepspeed_family
