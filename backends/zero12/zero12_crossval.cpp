// zero12_crossval.cpp — see zero12_crossval.hpp (docs/crossval.md, docs/backends/zero12.md).
#include "backends/zero12/zero12_crossval.hpp"

#include "backends/deepspeed_family/deepspeed_crossval_json.hpp"
#include "backends/zero12/zero12_options.hpp"

namespace zb::backends::zero12 {

namespace {
using json = nlohmann::json;

// The DeepSpeed JSON both sides read: the user's file (if any) with every value zerobench resolved
// written in (as zero3_crossval.cpp builds it for stage 3), the stage-1/2 keys included.
json deepspeed_json(const EngineSpec& spec, int world, const json& user_file, std::vector<std::string>& notes,
                   int stage) {
  json ds = deepspeed_family::deepspeed_crossval_json(
      spec, world, user_file, notes,
      {"stage", "reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "contiguous_gradients", "reduce_scatter",
       "round_robin_gradients", "allgather_partitions", "use_multi_rank_bucket_allreduce"});
  // offload_optimizer cpu (zero12_offload.cpp), as zero3_crossval.cpp writes it: the section as
  // resolved, and DeepSpeed's own "optimizer" section so that it builds the host optimizer a
  // user's offload file gets (engine.py get_optimizer_configuration: DeepSpeedCPUAdam, or
  // torch.optim.AdamW with torch_adam); lr is crossval's schedule, written per step by the runner.
  const auto& o = zero12_options(spec.options, stage);
  json& z = ds["zero_optimization"];
  if (!o.offload()) {
    z.erase("offload_optimizer");
    // The host optimizer zerobench resolved (read only under offload) stays what the JSON says
    // without the user's optimizer section (config: zero_force_ds_cpu_optimizer).
    ds["zero_force_ds_cpu_optimizer"] = o.host_optimizer == kCpuAdam;
    return ds;
  }
  z["offload_optimizer"] = {{"device", o.offload_optimizer}, {"pin_memory", o.offload_pin_memory}};
  if (o.host_optimizer == kTorchAdamW && !(user_file.is_object() && user_file.contains("optimizer"))) {
    deepspeed_family::client_adamw_on_host(ds, notes);
    return ds;
  }
  const auto& t = spec.train;
  const bool torch_adam = o.host_optimizer == kTorchAdamW;
  ds["optimizer"] = deepspeed_family::deepspeed_adamw_section(t, torch_adam);
  notes.push_back(std::string("offload_optimizer: DeepSpeed's own optimizer from the JSON (") +
                  (torch_adam ? "torch_adam: " + config::adamw_description(t.adamw_impl, false) : "DeepSpeedCPUAdam") +
                  "), as zerobench runs it");
  return ds;
}

std::optional<StateExplanation> explain_state(const CrossvalCase& c, int stage, const std::string& category) {
  if (category != "optimizer_step_counters") return std::nullopt;
  const Zero12Options o = zero12_resolved_from_json(c.options, stage).options;  // as the engine ran it
  if (auto x = deepspeed_family::cpu_adam_step_counters(o.offload() && o.host_optimizer == kCpuAdam)) return x;
  // DeepSpeed steps the client AdamW on one fp32 flat partition per parameter group (one group).
  return adamw_step_counters(1, "the fp32 partition (single_partition_of_fp32_groups)");
}

// fp32 and bf16: bitwise (docs/crossval.md, "Tolerances"): DeepSpeedZeroOptimizer's arithmetic
// step for step, so every step's loss and grad norm were measured equal to the last bit at W=2
// and W=3, with accumulation, at the default buckets, below a layer, between a layer and the
// model and "auto", with overlap_comm, without reduce_scatter, with round_robin_gradients,
// communication_data_type fp32, and offload_optimizer cpu. (fp16 has no CPU crossval: DeepSpeed's
// fp16 does not run on a CPU.)
std::optional<CrossvalBound> measured_bound(const std::string& precision) {
  if (precision != "fp32" && precision != "bf16") return std::nullopt;
  return CrossvalBound{0.0, 0.0,
                       precision + ": bitwise, loss and grad norm (measured at W=2 and W=3, every bucket size, "
                                   "with and without offload_optimizer; docs/crossval.md)"};
}

}  // namespace

CrossvalReference crossval_reference(int stage) {
  CrossvalReference r = deepspeed_family::deepspeed_crossval_reference(
      "DeepSpeed ZeRO-" + std::to_string(stage),
      [stage](const EngineSpec& spec, int world, const json& user_file, std::vector<std::string>& notes) {
        return deepspeed_json(spec, world, user_file, notes, stage);
      });
  r.explain_state = [stage](const CrossvalCase& c, int /*rank*/, const std::string& category, const json& /*zb*/) {
    return explain_state(c, stage, category);
  };
  r.measured_bound = measured_bound;
  return r;
}

}  // namespace zb::backends::zero12
