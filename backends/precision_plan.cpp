// precision_plan.cpp — PrecisionPlan's JSON form (see precision_plan.hpp).
#include "backends/precision_plan.hpp"

namespace zb::backends {

std::string dtype_short_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "fp32";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    case at::kDouble: return "fp64";
    default: return c10::toString(t);
  }
}

nlohmann::json to_json(const PrecisionPlan& p) {
  return {{"load", dtype_short_name(p.load)},
          {"params", dtype_short_name(p.params)},
          {"compute", dtype_short_name(p.compute)},
          {"reduce", dtype_short_name(p.reduce)},
          {"grads", dtype_short_name(p.grads)},
          {"master", p.master ? nlohmann::json(dtype_short_name(*p.master)) : nlohmann::json(nullptr)},
          {"optimizer_states", dtype_short_name(p.optimizer_states)},
          {"notes", p.notes}};
}

}  // namespace zb::backends
