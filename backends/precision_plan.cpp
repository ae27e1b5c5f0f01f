// precision_plan.cpp — PrecisionPlan's JSON form (see precision_plan.hpp).
#include "backends/precision_plan.hpp"

#include "runtime/errors.hpp"

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

std::string dtype_long_name(const std::optional<at::ScalarType>& t, const char* if_none) {
  return t ? std::string(c10::toString(*t)) : std::string(if_none);
}

std::optional<at::ScalarType> dtype_named(const std::string& n, const std::string& what) {
  if (n.empty() || n == "None") return std::nullopt;
  if (n == "fp32" || n == "Float") return at::kFloat;
  if (n == "bf16" || n == "BFloat16") return at::kBFloat16;
  if (n == "fp16" || n == "Half") return at::kHalf;
  if (n == "fp64" || n == "Double") return at::kDouble;
  throw UsageError(what + ": unknown dtype '" + n + "' (fp32, bf16, fp16 or their c10 names)");
}

std::optional<at::ScalarType> dtype_key(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return std::nullopt;
  return dtype_named(j[key].get<std::string>(), std::string("backend option ") + key);
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
