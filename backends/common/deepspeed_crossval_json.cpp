// deepspeed_crossval_json.cpp — see deepspeed_crossval_json.hpp.
#include "backends/common/deepspeed_crossval_json.hpp"

namespace zb::backends::common {

using json = nlohmann::json;

json deepspeed_crossval_json(const EngineSpec& spec, int world, const json& user_file, std::vector<std::string>& notes,
                             std::initializer_list<const char*> zero_keys) {
  json ds = user_file.is_object() ? user_file : json::object();
  if (ds.contains("optimizer")) {
    ds.erase("optimizer");
    notes.push_back("DeepSpeed JSON 'optimizer' removed: both sides step crossval's AdamW (the client "
                    "torch.optim.AdamW, or DeepSpeed's own under offload_optimizer) with the resolved lr, betas, eps "
                    "and weight decay");
  }
  const auto& t = spec.train;
  // The scheduler section stays: DeepSpeed builds it itself (engine.py _scheduler_from_config) and
  // both sides' lr of every step are compared. Its "auto"s are filled as transformers fills them.
  if (ds.contains("scheduler") && !ds["scheduler"].is_null()) {
    ds["scheduler"] = config::filled_scheduler_section(ds["scheduler"], t.deepspeed_scheduler);
    notes.push_back("DeepSpeed JSON 'scheduler' " + ds["scheduler"].dump() +
                    " (\"auto\" filled as transformers' HfTrainerDeepSpeedConfig fills it): DeepSpeed builds it");
  }
  const auto& o = spec.options;
  ds["train_micro_batch_size_per_gpu"] = t.micro_batch;
  ds["gradient_accumulation_steps"] = t.grad_accum;
  ds["train_batch_size"] = t.micro_batch * t.grad_accum * world;
  ds["gradient_clipping"] = t.grad_clip;
  ds["bf16"] = {{"enabled", spec.precision == "bf16"}};
  json& z = ds["zero_optimization"];
  if (!z.is_object()) z = json::object();
  for (const char* key : zero_keys) z[key] = o.at(key);
  if (!o.value("communication_data_type", std::string()).empty())
    ds["communication_data_type"] = o["communication_data_type"];
  if (!o.value("grad_accum_dtype", std::string()).empty()) ds["data_types"]["grad_accum_dtype"] = o["grad_accum_dtype"];
  ds["zero_allow_untested_optimizer"] = true;  // torch.optim.AdamW: FusedAdam/CPUAdam need compiled ops
  ds["steps_per_print"] = 1 << 30;
  ds["wall_clock_breakdown"] = false;
  return ds;
}

std::optional<StateExplanation> cpu_adam_step_counters(const CrossvalCase& c) {
  const auto& opts = c.report.value("config", nlohmann::json::object())
                         .value("backend", nlohmann::json::object())
                         .value("options", nlohmann::json::object());
  // "DeepSpeedCPUAdam": kCpuAdam of zero3_options.hpp and zero12_options.hpp.
  if (opts.value("offload", nlohmann::json::object()).value("optimizer", std::string("none")) != "cpu" ||
      opts.value("host_optimizer", std::string()) != "DeepSpeedCPUAdam")
    return std::nullopt;
  StateExplanation x;
  x.expected = 0;
  x.zerobench_reports = false;
  x.reason = "DeepSpeedCPUAdam keeps its step count as a Python int (state['step']), no tensor";
  x.upstream = "deepspeed/ops/adam/cpu_adam.py: DeepSpeedCPUAdam.step";
  return x;
}

}  // namespace zb::backends::common
