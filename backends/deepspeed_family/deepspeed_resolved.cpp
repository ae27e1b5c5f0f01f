// deepspeed_resolved.cpp — see deepspeed_resolved.hpp.
#include "backends/deepspeed_family/deepspeed_resolved.hpp"

#include "backends/precision_plan.hpp"

namespace zb::backends::deepspeed_family {

void write_precision(const DeepSpeedPrecisionResolved& p, const common::DeepSpeedLossScaleOptions& fp16,
                     nlohmann::json& j) {
  j["model_dtype"] = dtype_long_name(p.model_dtype);
  j["communication_data_type"] = dtype_long_name(p.communication_data_type);
  j["grad_accum_dtype"] = dtype_long_name(p.grad_accum_dtype);
  if (p.loss_scaler) {  // the fp16 section's loss scaling in effect, defaults included
    j["fp16"] = common::to_json(fp16);
    j["fp16"]["scaler"] = *p.loss_scaler;
  }
}

DeepSpeedPrecisionResolved take_precision(nlohmann::json& j) {
  DeepSpeedPrecisionResolved p;
  if (!j.is_object()) return p;
  p.model_dtype = dtype_key(j, "model_dtype");
  p.communication_data_type = dtype_key(j, "communication_data_type");
  p.grad_accum_dtype = dtype_key(j, "grad_accum_dtype");
  for (const char* key : {"model_dtype", "communication_data_type", "grad_accum_dtype"}) j.erase(key);
  if (j.contains("fp16") && j["fp16"].is_object() && j["fp16"].contains("scaler")) {
    p.loss_scaler = j["fp16"]["scaler"].get<std::string>();
    j["fp16"].erase("scaler");
  }
  return p;
}

}  // namespace zb::backends::deepspeed_family
