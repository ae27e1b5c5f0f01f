// crossval_reference.cpp — the explanation every backend's crossval rules share (see
// crossval_reference.hpp).
#include "backends/crossval_reference.hpp"

namespace zb::backends {

StateExplanation adamw_step_counters(int64_t tensors, const std::string& which) {
  // torch.optim.AdamW(fused=True) keeps `step` as a 0-dim fp32 tensor on the parameter's device
  // for each parameter it steps; zerobench's AdamW holds them too but, as for every backend,
  // does not count them in model_states_bytes (docs/metrics.md).
  return StateExplanation{4 * tensors, /*zerobench_reports=*/false,
                          "torch.optim.AdamW's per-parameter `step` counter (a 0-dim fp32 tensor for each of " +
                              std::to_string(tensors) + " " + which +
                              "); zerobench's FusedAdamW holds the same kind of tensor and does not count it",
                          "torch/optim/adam.py: Adam._init_group (AdamW subclasses Adam): state[\"step\"] = "
                          "torch.zeros((), dtype=_get_scalar_dtype(is_fused=True), device=p.device)"};
}

}  // namespace zb::backends
