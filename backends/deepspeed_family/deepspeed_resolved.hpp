// deepspeed_resolved.hpp — what every DeepSpeed-family engine (zero0, zero12, zero3) writes alike
// into its resolved options (the report's config.backend.options): the dtypes it resolved
// (model_dtype, communication_data_type, grad_accum_dtype, as c10 names) and, under fp16, the loss
// scaling in effect with the scaler's name (fp16.scaler). Owns: those keys, both ways, as one part of
// each stage's <X>Resolved record. Must not: know a stage's other keys (its <x>_options.cpp does).
// Belongs to the DeepSpeed family (backends/deepspeed_family/), used by zero0, zero12, zero3.
#pragma once
#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "backends/common/loss_scaler.hpp"

namespace zb::backends::deepspeed_family {

struct DeepSpeedPrecisionResolved {
  // The dtypes the engine runs in (absent from a report: not known). The report writes them over
  // the options' own communication_data_type and grad_accum_dtype (bf16 | fp16 | fp32 | "").
  std::optional<at::ScalarType> model_dtype, communication_data_type, grad_accum_dtype;
  // fp16: the scaler in effect (DynamicLossScaler | static | FP16_UnfusedOptimizer: its kind_name).
  std::optional<std::string> loss_scaler;
};

// Writes p into j (a stage's options already written by their to_json): the three dtypes by their
// c10 names ("" when not known) and, with a loss scaler, j["fp16"] = `fp16` (defaults included)
// with "scaler". Without one, j's fp16 key is left as the options wrote it.
void write_precision(const DeepSpeedPrecisionResolved& p, const common::DeepSpeedLossScaleOptions& fp16,
                     nlohmann::json& j);
// Reads p from a report's options object and takes its keys out of `j` (the three dtype keys and
// fp16.scaler), leaving the stage's options for its <x>_options_from_json. UsageError naming the
// key for a dtype name no engine writes.
DeepSpeedPrecisionResolved take_precision(nlohmann::json& j);

}  // namespace zb::backends::deepspeed_family
