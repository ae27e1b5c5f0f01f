// deepspeed_crossval_json.hpp — the part of the DeepSpeed JSON that both ZeRO backends' crossval
// references (zero12_crossval.cpp, zero3_crossval.cpp) build alike: the user's DeepSpeed file
// (if any) with the batch, clipping, bf16/fp16, dtype and reporting keys zerobench resolved written
// in, `zero_keys` copied from the resolved options into zero_optimization, every key in its one
// canonical spelling (a field-name spelling such as max_live_parameters becomes its alias
// stage3_max_live_parameters, deprecated cpu_offload* and "bfloat16" go: DeepSpeed refuses one
// setting given twice), the optimizer section kept (the client optimizer replaces it) and the
// scheduler section kept with its "auto"s filled (each noted); and the optimizer-state difference both share under
// offload_optimizer (DeepSpeedCPUAdam's step count). Must not: write stage-specific keys (the callers do).
// Belongs to the DeepSpeed family (backends/deepspeed_family/), used by zero0, zero12, zero3.
#pragma once
#include <nlohmann/json.hpp>

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "backends/crossval_reference.hpp"
#include <functional>
#include <string>
#include <vector>

#include "backends/engine.hpp"

namespace zb::backends::deepspeed_family {

nlohmann::json deepspeed_crossval_json(const EngineSpec& spec, int world, const nlohmann::json& user_file,
                                       std::vector<std::string>& notes, std::initializer_list<const char*> zero_keys);

// The zero_optimization keys of ZeRO++ quantization a backend's typed options turn on
// ("zero_quantized_weights", "zero_quantized_gradients"); the backend reads its own struct.
using QuantizedKeys = std::function<std::vector<std::string>(const EngineSpec& spec)>;

// What DeepSpeed cannot run in a crossval on `device` (CrossvalReference::reference_setup, for
// every ZeRO backend): fp16 (DeepSpeed's CPU accelerator refuses it where oneDNN has no fp16, and
// the runner does not set up DeepSpeed's loss scaler), selective-op, and ZeRO++ quantized weights
// or gradients (`quantized`: DeepSpeed's quantizer op, which the runner never compiles).
// `framework` names the reference in the line; "" when the mode runs.
std::string deepspeed_reference_refusal(const EngineSpec& spec, const std::string& device, const std::string& framework,
                                        const std::vector<std::string>& quantized);

// The part every DeepSpeed stage's CrossvalReference shares: scripts/crossval/run_deepspeed.py
// reading ds_config.json (--deepspeed-config), `config_file` writing it, and the refusals above
// named after `framework` ("DeepSpeed ZeRO-N"), `quantized` empty for a backend without ZeRO++.
// The caller adds its explain_* rules and bounds.
CrossvalReference deepspeed_crossval_reference(const std::string& framework, decltype(CrossvalReference::config_file) config_file,
                                               QuantizedKeys quantized = {});

// The report's resolved options ran offload_optimizer cpu stepped by DeepSpeedCPUAdam: its step
// counter is a Python int, not a tensor (the explanation of `optimizer_step_counters`); else nullopt.
// offload_optimizer with zero_force_ds_cpu_optimizer false and no "optimizer" section in the
// user's file: the host optimizer is the client's, HF's torch.optim.AdamW(fused=True) (the
// Trainer passes it, accelerate keeps it, DeepSpeed steps it on the host fp32 partitions), not
// one DeepSpeed builds: `ds` gets no "optimizer" section and zero_force_ds_cpu_optimizer false, so
// the reference runner passes its client AdamW(fused=True) — zerobench's host optimizer.
void client_adamw_on_host(nlohmann::json& ds, std::vector<std::string>& notes);

// The "optimizer" section DeepSpeed builds zerobench's host optimizer from under offload_optimizer:
// AdamW with the run's lr, betas, eps and weight decay, and torch_adam — then with the foreach /
// fused that gave train.adamw_impl (engine.py get_optimizer_configuration pops foreach, passes
// fused on), so DeepSpeed builds the same torch.optim.AdamW implementation.
nlohmann::json deepspeed_adamw_section(const TrainConfig& t, bool torch_adam);

// The optimizer step counters' explanation when the engine stepped its host partitions with
// DeepSpeedCPUAdam (offload_optimizer, read by the backend from its resolved options): nullopt otherwise.
std::optional<StateExplanation> cpu_adam_step_counters(bool steps_with_cpu_adam);

}  // namespace zb::backends::deepspeed_family
