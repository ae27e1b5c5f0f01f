// fsdp2_crossval.cpp — FSDP2-mode's crossval reference (PyTorch fully_shard,
// scripts/crossval/run_fsdp2.py) and its known differences (docs/crossval.md).
#include "backends/fsdp2/fsdp2_crossval.hpp"

#include "models/model_config.hpp"

namespace zb::backends::fsdp2 {

CrossvalReference crossval_reference() {
  CrossvalReference r;
  r.script = "run_fsdp2.py";
  r.framework = "PyTorch FSDP2";
  r.explain_state = [](const CrossvalCase& c, int /*rank*/, const std::string& category,
                       const nlohmann::json& /*zb*/) -> std::optional<StateExplanation> {
    if (category != "optimizer_step_counters") return std::nullopt;
    int64_t tensors = 0;  // every DTensor parameter
    for (const auto& unit : models::unit_param_specs(c.spec.model)) tensors += int64_t(unit.size());
    return adamw_step_counters(tensors, "DTensor parameters");
  };
  return r;
}

}  // namespace zb::backends::fsdp2
