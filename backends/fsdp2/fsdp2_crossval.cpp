// fsdp2_crossval.cpp — FSDP2-mode's crossval reference (PyTorch fully_shard,
// scripts/crossval/run_fsdp2.py) and its known differences (docs/crossval.md).
#include "backends/fsdp2/fsdp2_crossval.hpp"

#include "backends/fsdp2/fsdp2_layout.hpp"
#include "backends/fsdp2/fsdp2_offload.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "models/model_config.hpp"

namespace zb::backends::fsdp2 {

CrossvalReference crossval_reference() {
  CrossvalReference r;
  r.script = "run_fsdp2.py";
  r.framework = "PyTorch FSDP2";
  r.explain_state = [](const CrossvalCase& c, int rank, const std::string& category,
                       const nlohmann::json& /*zb*/) -> std::optional<StateExplanation> {
    if (category == "host.grads") {
      // CPUOffloadPolicy on a CPU-only run: the "device" is the CPU, so foreach_reduce's
      // `new_sharded_grad.to(torch.device("cpu"))` returns the view itself (Tensor.to on the same
      // device copies nothing) and the gradients stay views into the padded reduce-scatter output:
      // a padded shard per parameter, as without offload. On CUDA it copies the `sharded_size`
      // rows, which zerobench counts (the bytes where they live on a GPU).
      const auto o = fsdp2_options_from_json(c.spec.options);
      const auto env = c.report.value("env", nlohmann::json::object());
      if (!o.offloads() || env.value("pg_backend", "") != "gloo") return std::nullopt;
      StateExplanation x;
      x.expected = closed_form_bytes(c.spec, Topology(c.world_size), rank).host.params;
      x.reason = "on a CPU-only run upstream's device->host copy of a reduced gradient is Tensor.to(cpu) of a CPU "
                 "tensor: no copy, the gradients stay views into the padded reduce-scatter output (its padded "
                 "shards); zerobench copies the unpadded rows as FSDP2 does on a GPU";
      x.upstream = "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce "
                   "(new_sharded_grad.to(torch.device(\"cpu\"), non_blocking=...))";
      return x;
    }
    if (category != "optimizer_step_counters") return std::nullopt;
    int64_t tensors = 0;  // every DTensor parameter
    for (const auto& unit : models::unit_param_specs(c.spec.model)) tensors += int64_t(unit.size());
    return adamw_step_counters(tensors, "DTensor parameters");
  };
  return r;
}

}  // namespace zb::backends::fsdp2
