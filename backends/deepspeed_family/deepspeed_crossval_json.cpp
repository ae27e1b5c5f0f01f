// deepspeed_crossval_json.cpp — see deepspeed_crossval_json.hpp.
#include "backends/deepspeed_family/deepspeed_crossval_json.hpp"

#include <utility>

#include "config/deepspeed_scheduler.hpp"
#include "config/deepspeed_zero_config.hpp"

namespace zb::backends::deepspeed_family {

using json = nlohmann::json;

json deepspeed_crossval_json(const EngineSpec& spec, int world, const json& user_file, std::vector<std::string>& notes,
                             std::initializer_list<const char*> zero_keys) {
  json ds = user_file.is_object() ? user_file : json::object();
  const auto& t = spec.train;
  // The user's "optimizer" stays: zerobench reads its hyper-parameters from it, and DeepSpeed
  // ignores it beside the client optimizer both sides step (engine.py _configure_optimizer).
  if (ds.contains("optimizer"))
    notes.push_back("DeepSpeed JSON 'optimizer' kept for zerobench's reading of it; DeepSpeed steps the client "
                    "optimizer instead (torch.optim.AdamW, or DeepSpeedCPUAdam under offload_optimizer: a client "
                    "optimizer replaces the section)");
  // The scheduler section stays: DeepSpeed builds it itself (engine.py _scheduler_from_config) and
  // both sides' lr of every step are compared. Its "auto"s are filled as transformers fills them.
  if (ds.contains("scheduler") && !ds["scheduler"].is_null()) {
    ds["scheduler"] = config::filled_scheduler_section(ds["scheduler"], t.deepspeed_scheduler);
    notes.push_back("DeepSpeed JSON 'scheduler' " + ds["scheduler"].dump() +
                    " (\"auto\" filled as transformers' HfTrainerDeepSpeedConfig fills it): DeepSpeed builds it");
  }
  const json o = spec.options.json();  // the resolved options as the report shows them
  ds["train_micro_batch_size_per_gpu"] = t.micro_batch;
  ds["gradient_accumulation_steps"] = t.grad_accum;
  ds["train_batch_size"] = t.micro_batch * t.grad_accum * world;
  ds["gradient_clipping"] = t.grad_clip;
  ds["bf16"] = {{"enabled", spec.precision == "bf16"}};
  if (ds.contains("bfloat16")) {  // the old name of "bf16" (get_bfloat16_config reads "bf16" first)
    ds.erase("bfloat16");
    notes.push_back("DeepSpeed JSON 'bfloat16' (the old name of 'bf16') removed: 'bf16' carries the mode");
  }
  if (ds.contains("fp16") && ds["fp16"].is_object()) ds["fp16"]["enabled"] = spec.precision == "fp16";
  json& z = ds["zero_optimization"];
  if (!z.is_object()) z = json::object();
  // One spelling per setting, the canonical one: DeepSpeedZeroConfig reads the field name and its
  // alias alike (max_live_parameters / stage3_max_live_parameters), so the user's field-name
  // spelling beside the canonical key written below would be the same setting given twice, which
  // DeepSpeed and zerobench both refuse.
  json canonical = json::object();
  for (const auto& [key, value] : z.items()) {
    const std::string name = config::canonical_zero_key(key);
    if (name != key)
      notes.push_back("zero_optimization." + key + " written as " + name + " (the same DeepSpeedZeroConfig field)");
    canonical[name] = value;
  }
  z = std::move(canonical);
  // The deprecated cpu_offload / cpu_offload_param (config.py: new_param offload_optimizer /
  // offload_param): the callers write those sections from the resolved options.
  for (const char* key : {"cpu_offload", "cpu_offload_param"})
    if (z.contains(key)) {
      z.erase(key);
      notes.push_back(std::string("zero_optimization.") + key +
                      " (deprecated) removed: the offload sections are written as resolved");
    }
  for (const char* key : zero_keys) z[key] = o.at(key);
  if (!o.value("communication_data_type", std::string()).empty())
    ds["communication_data_type"] = o["communication_data_type"];
  if (!o.value("grad_accum_dtype", std::string()).empty()) ds["data_types"]["grad_accum_dtype"] = o["grad_accum_dtype"];
  ds["zero_allow_untested_optimizer"] = true;  // torch.optim.AdamW: FusedAdam/CPUAdam need compiled ops
  ds["steps_per_print"] = 1 << 30;
  ds["wall_clock_breakdown"] = false;
  return ds;
}

CrossvalReference deepspeed_crossval_reference(const std::string& framework, decltype(CrossvalReference::config_file) config_file,
                                               QuantizedKeys quantized) {
  CrossvalReference r;
  r.script = "run_deepspeed.py";
  r.framework = framework;
  r.config_format = "deepspeed";
  r.config_file_name = "ds_config.json";
  r.config_flag = "--deepspeed-config";
  r.config_file = std::move(config_file);
  r.reference_setup = [framework, quantized](const EngineSpec& spec, const std::string& device, ReferenceSetup& s) {
    s.refusal = deepspeed_reference_refusal(spec, device, framework, quantized ? quantized(spec) : std::vector<std::string>{});
  };
  return r;
}

std::string deepspeed_reference_refusal(const EngineSpec& spec, const std::string& device, const std::string& framework,
                                        const std::vector<std::string>& quantized) {
  if (spec.precision == "fp16")
    return framework + " fp16 is not cross-validated: " +
           (device == "cpu" ? std::string("DeepSpeed's CPU accelerator refuses fp16 without oneDNN fp16 (engine.py: "
                                          "\"Type fp16 is not supported on your device\") and ")
                            : std::string()) +
           "scripts/crossval/run_deepspeed.py does not set up DeepSpeed's loss scaler; crossval the file in bf16 or "
           "fp32 (--precision bf16 with a copy whose fp16.enabled is \"auto\" or false; zerobench's fp16 loss "
           "scaler is checked against DeepSpeed's DynamicLossScaler in tests/test_loss_scaler.cpp)";
  if (spec.train.activation_checkpointing.kind == models::ActivationCheckpointing::Kind::SelectiveOp)
    return framework + " with --activation-checkpointing selective-op is not cross-validated: a DeepSpeed user "
                       "checkpoints whole decoder layers (HF's gradient checkpointing, what "
                       "scripts/crossval/run_deepspeed.py sets up: full, selective-layer:N); torchtitan's op-level "
                       "policy is cross-validated on PyTorch FSDP1 (crossval --backend fsdp)";
  if (!quantized.empty()) {  // every key the options turn on, so that one edited copy gets past this
    std::string keys, bare;
    for (size_t i = 0; i < quantized.size(); ++i) {
      keys += (i ? " and zero_optimization." : "zero_optimization.") + quantized[i];
      bare += (i ? " and " : "") + quantized[i];
    }
    return framework + " with " + keys + (quantized.size() > 1 ? " true are" : " true is") +
           " not cross-validated: DeepSpeed quantizes with its compiled quantizer op (QuantizerBuilder), which "
           "scripts/crossval/run_deepspeed.py never builds; crossval a copy of the file without " + bare +
           " (zerobench's ZeRO++ quantization is checked against DeepSpeed's arithmetic in tests/test_zeropp.cpp "
           "and tests/test_qgz.cpp)";
  }
  return "";
}

void client_adamw_on_host(json& ds, std::vector<std::string>& notes) {
  ds.erase("optimizer");
  ds["zero_force_ds_cpu_optimizer"] = false;
  notes.push_back("offload_optimizer with zero_force_ds_cpu_optimizer false and no optimizer section: the client "
                  "torch.optim.AdamW(fused=True) steps the host fp32 partitions, as HF's Trainer passes it");
}

nlohmann::json deepspeed_adamw_section(const TrainConfig& t, bool torch_adam) {
  nlohmann::json params = {{"lr", t.lr},
                           {"betas", {t.beta1, t.beta2}},
                           {"eps", t.eps},
                           {"weight_decay", t.weight_decay},
                           {"torch_adam", torch_adam}};
  if (torch_adam) {
    if (t.adamw_impl == config::AdamWImpl::kFused) params["fused"] = true;
    if (t.adamw_impl == config::AdamWImpl::kForeach) params["foreach"] = true;
    if (t.adamw_impl == config::AdamWImpl::kForLoop) params["foreach"] = false;
  }
  return {{"type", "AdamW"}, {"params", params}};
}

std::optional<StateExplanation> cpu_adam_step_counters(bool steps_with_cpu_adam) {
  if (!steps_with_cpu_adam) return std::nullopt;
  StateExplanation x;
  x.expected = 0;
  x.zerobench_reports = false;
  x.reason = "DeepSpeedCPUAdam keeps its step count as a Python int (state['step']), no tensor";
  x.upstream = "deepspeed/ops/adam/cpu_adam.py: DeepSpeedCPUAdam.step";
  return x;
}

}  // namespace zb::backends::deepspeed_family
