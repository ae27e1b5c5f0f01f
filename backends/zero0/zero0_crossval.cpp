// zero0_crossval.cpp — see zero0_crossval.hpp (docs/crossval.md).
#include "backends/zero0/zero0_crossval.hpp"

#include "backends/deepspeed_family/deepspeed_crossval_json.hpp"
#include "models/llama.hpp"

namespace zb::backends::zero0 {

namespace {
using json = nlohmann::json;

// The user's file (if any) with every value zerobench resolved written in, stage 0, and no
// optimizer offload (zero0 refuses it).
json deepspeed_json(const EngineSpec& spec, int world, const json& user_file, std::vector<std::string>& notes) {
  json ds = deepspeed_family::deepspeed_crossval_json(spec, world, user_file, notes, {});
  ds["zero_optimization"]["stage"] = 0;
  ds["zero_optimization"].erase("offload_optimizer");
  return ds;
}

std::optional<StateExplanation> explain_state(const CrossvalCase& c, int /*rank*/, const std::string& category,
                                              const json& /*zb*/) {
  if (category != "optimizer_step_counters") return std::nullopt;
  // DeepSpeed steps the client AdamW on every parameter (fp32) or every fp32 master (bf16): one each.
  int64_t tensors = 0;
  for (const auto& unit : models::unit_param_specs(c.spec.model)) tensors += int64_t(unit.size());
  return adamw_step_counters(tensors, c.spec.precision == "fp32" ? "parameters" : "fp32 masters (fp32_groups)");
}

// fp32 and bf16: bitwise, loss and grad norm (measured at W=2 on the real stage-0 files; docs/crossval.md).
std::optional<CrossvalBound> measured_bound(const std::string& precision) {
  if (precision != "fp32" && precision != "bf16") return std::nullopt;
  return CrossvalBound{0.0, 0.0, precision + ": bitwise, loss and grad norm (measured at W=2; docs/crossval.md)"};
}

}  // namespace

CrossvalReference crossval_reference() {
  CrossvalReference r = deepspeed_family::deepspeed_crossval_reference("DeepSpeed ZeRO-0", deepspeed_json);
  r.explain_state = explain_state;
  r.measured_bound = measured_bound;
  return r;
}

}  // namespace zb::backends::zero0
