// zero3_crossval.cpp — ZeRO3-mode's crossval reference (DeepSpeed ZeRO-3,
// scripts/crossval/run_deepspeed.py), the DeepSpeed JSON both sides read, and the known
// differences (docs/crossval.md).
#include "backends/zero3/zero3_crossval.hpp"

#include "backends/deepspeed_family/deepspeed_crossval_json.hpp"
#include "backends/zero3/zero3_options.hpp"

namespace zb::backends::zero3 {

namespace {
using json = nlohmann::json;

// The DeepSpeed JSON both sides read for one mode: the user's DeepSpeed file (if any: the one the
// config resolution read, given directly or as an accelerate config's deepspeed_config_file) with
// every value zerobench resolved written in, plus what running the reference needs. Keys
// zerobench does not read stay as the user wrote them (DeepSpeed honours them; a difference would
// show).
json deepspeed_json(const EngineSpec& spec, int world, const json& user_file, std::vector<std::string>& notes) {
  json ds = deepspeed_family::deepspeed_crossval_json(
      spec, world, user_file, notes,
      {"stage", "reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
       "stage3_max_live_parameters", "stage3_max_reuse_distance", "sub_group_size", "overlap_comm",
       "contiguous_gradients"});
  const auto& t = spec.train;
  const auto& o = zero3_options(spec.options);
  json& z = ds["zero_optimization"];
  // ZeRO++ (zero3_zeropp.hpp): hpZ runs in DeepSpeed on the CPU accelerator; qwZ needs its CUDA
  // quantizer (QuantizerBuilder), which a CPU run refuses to build.
  if (o.zero_hpz_partition_size > 1) z["zero_hpz_partition_size"] = o.zero_hpz_partition_size;
  if (o.zero_quantized_weights) z["zero_quantized_weights"] = true;
  // Offload (zero3_offload.cpp): the sections as zerobench resolved them. With offload_optimizer
  // DeepSpeed builds its own optimizer from an "optimizer" section, as a user's offload file has
  // it: DeepSpeedCPUAdam, or torch.optim.AdamW with torch_adam (engine.py
  // get_optimizer_configuration); lr is crossval's schedule, written per step by the runner.
  const auto& oo = o.offload_optimizer;
  const auto& op = o.offload_param;
  if (oo.device != "none") z["offload_optimizer"] = {{"device", oo.device}, {"pin_memory", oo.pin_memory}};
  if (op.device != "none") z["offload_param"] = {{"device", op.device}, {"pin_memory", op.pin_memory}};
  if (oo.device == "none") {
    // The host optimizer zerobench resolved (read only under offload) stays what the JSON says
    // without the user's optimizer section (config: zero_force_ds_cpu_optimizer).
    ds["zero_force_ds_cpu_optimizer"] = o.host_optimizer == kCpuAdam;
  } else if (o.host_optimizer == kTorchAdamW && !(user_file.is_object() && user_file.contains("optimizer"))) {
    deepspeed_family::client_adamw_on_host(ds, notes);
  } else {
    const bool torch_adam = o.host_optimizer == kTorchAdamW;
    ds["optimizer"] = deepspeed_family::deepspeed_adamw_section(t, torch_adam);
    notes.push_back(std::string("offload_optimizer: DeepSpeed's own optimizer from the JSON (") +
                    (torch_adam ? "torch_adam: " + config::adamw_description(t.adamw_impl, false) : "DeepSpeedCPUAdam") +
                    "), as zerobench runs it");
  }
  return ds;
}

std::optional<StateExplanation> explain_state(const CrossvalCase& c, int /*rank*/, const std::string& category,
                                              const json& /*zb*/) {
  if (category != "optimizer_step_counters") return std::nullopt;
  const Zero3Resolved r = zero3_resolved_from_json(c.options);  // as the engine ran it
  const Zero3Options& o = r.options;
  if (auto x = deepspeed_family::cpu_adam_step_counters(o.offload_optimizer.enabled() && o.host_optimizer == kCpuAdam))
    return x;
  // DeepSpeed steps the client AdamW on one fp32 flat per sub-group: zerobench's fp32 sub-groups
  // (stage3.py _create_fp16_sub_groups, as the engine resolved them from sub_group_size and the
  // partition sizes), -1 when the report's resolved options do not carry them.
  const int64_t tensors = r.sub_groups;
  if (tensors < 0) return std::nullopt;
  return adamw_step_counters(tensors, "fp32 sub-group partitions (zerobench's resolved sub_groups)");
}

std::optional<CommExplanation> explain_comm(const CrossvalCase& c, int /*rank*/, int64_t step, const std::string& kind,
                                            int64_t zb_count, int64_t /*zb_bytes*/) {
  // The trace check runs on every rank alike (rank 0 sends, the others receive).
  if (kind != "broadcast" || zb_count != 0) return std::nullopt;
  // Each forward starts with PartitionedParameterCoordinator.reset_step(). The first one (empty
  // module trace) and the second (trace just recorded) check that every rank saw the same trace
  // with assert_ints_same_as_other_ranks: a broadcast of the list length (one int64) and one of the
  // list (zero/utils.py, get_lst_from_rank0) — once for the module order at the first reset; for
  // the module order, the parameter order and the parameters' last-use steps at the second. Trace
  // lengths of scripts/crossval/model.py, one micro-batch: modules M = 2 (5 + 12 L) (forward and
  // backward hooks), parameters P = 2 (3 + 9 L); each of the C checkpointed blocks' recompute
  // records its 9 parameter modules (one parameter each) once more: + 9 C to both (measured with
  // DeepSpeed 0.19.8 at L = 2 and 3, C = 1, 2 and 3: full and selective-layer:2).
  const auto& t = c.spec.train;
  const int64_t L = c.spec.model.layers, C = t.activation_checkpointing.checkpointed_blocks(L);
  const int64_t M = 2 * (5 + 12 * L) + 9 * C, P = 2 * (3 + 9 * L) + 9 * C;
  CommExplanation e;
  for (int64_t a = 0; a < t.grad_accum; ++a) {
    const int64_t micro = step * t.grad_accum + a;
    if (micro == 0) {
      e.count += 2;
      e.bytes += 8;
    } else if (micro == 1) {
      e.count += 6;
      e.bytes += 3 * 8 + 8 * (M + 2 * P);
    }
  }
  if (e.count == 0) return std::nullopt;
  e.reason = "DeepSpeed checks the recorded trace across ranks with blocking broadcasts in the first two "
             "reset_step() calls (trace length and contents); zerobench records the same trace without checking it";
  e.upstream = "deepspeed/runtime/zero/partitioned_param_coordinator.py: reset_step -> "
               "deepspeed/runtime/zero/utils.py: assert_ints_same_as_other_ranks";
  return e;
}

// bf16: bitwise (docs/crossval.md, "Tolerances"): every step's loss and fp64 grad norm equal to
// the last bit at W=2 and W=3 with the default buckets, reduce_bucket_size below a layer, between
// a layer and the model and "auto", offload_optimizer and offload_param, with accumulation. fp32 keeps the
// generic 1e-5: DeepSpeed's module hooks reorder a three-term fp32 gradient sum (different
// arithmetic; measured up to 9.7e-8 in the loss and 5.0e-6 in the grad norm over 5 steps).
std::optional<CrossvalBound> measured_bound(const std::string& precision) {
  if (precision != "bf16") return std::nullopt;
  return CrossvalBound{0.0, 0.0,
                       "zero3 bf16: bitwise, loss and grad norm (measured at every bucket size and offload choice; "
                       "docs/crossval.md)"};
}

}  // namespace

CrossvalReference crossval_reference() {
  CrossvalReference r = deepspeed_family::deepspeed_crossval_reference(
      "DeepSpeed ZeRO-3", deepspeed_json, [](const EngineSpec& spec) {
        const Zero3Options& o = zero3_options(spec.options);
        std::vector<std::string> keys;
        if (o.zero_quantized_weights) keys.push_back("zero_quantized_weights");
        if (o.zero_quantized_gradients) keys.push_back("zero_quantized_gradients");
        return keys;
      });
  r.explain_state = explain_state;
  r.explain_comm = explain_comm;
  r.measured_bound = measured_bound;
  return r;
}

}  // namespace zb::backends::zero3
