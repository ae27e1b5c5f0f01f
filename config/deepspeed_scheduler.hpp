// deepspeed_scheduler.hpp — a DeepSpeed config's `scheduler` section as DeepSpeed 0.19.8 builds it
// (runtime/engine.py _scheduler_from_config: getattr(lr_schedules, type)(optimizer, **params)),
// with "auto" filled as transformers' HfTrainerDeepSpeedConfig fills it, and the lr each of
// DeepSpeed's classes (runtime/lr_schedules.py WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle,
// LRRangeTest) gives every optimizer step, and the AdamW betas OneCycle sets every step
// (cycle_momentum).
// Owns: the section's keys (honoured, refused with the reason DeepSpeed or transformers would fail,
// or noted), the resolved parameters, the per-step lr and betas in DeepSpeed's own operation order (Python
// floats: IEEE double, each operation rounded; this file's .cpp is compiled without FP
// contraction), and the section with "auto" filled (what crossval hands DeepSpeed). Must not: know
// the optimizer, the trainer or a backend. The resolved value (DeepSpeedScheduler, the per-step lr
// and betas) is declared in deepspeed_scheduler_value.hpp, what a run's TrainConfig carries.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "config/config_notes.hpp"
#include "config/deepspeed_scheduler_value.hpp"

namespace zb::config {

// What transformers fills a scheduler "auto" with (integrations/deepspeed.py
// HfTrainerDeepSpeedConfig.trainer_config_process: warmup_min_lr 0 and warmup_max_lr
// args.learning_rate; trainer_config_finalize: total_num_steps num_training_steps and
// warmup_num_steps args.get_warmup_steps(num_training_steps)).
struct SchedulerFill {
  double learning_rate = 3e-3;      // --lr
  int64_t warmup_steps = 0;         // get_warmup_steps: --lr-warmup-steps, or ceil(--steps x --lr-warmup-ratio)
  std::string warmup_flag = "--lr-warmup-steps";  // the flag that gave it, and its value, for messages
  std::string warmup_flag_value = "0";
  int64_t num_training_steps = 10;  // --steps
};

// An explicit value beside a flag given on the command line (the caller decides: HF's fill_match
// refuses a mismatch, accelerate keeps the file's value).
using SchedulerFlagCheck = std::function<void(const std::string& key, const std::string& file_value,
                                              const std::string& flag, const std::string& flag_value, bool equal)>;

// `section` is root["scheduler"] (not null). `optimizer_lr`: the optimizer's lr (its section's, else
// --lr). Throws UsageError naming the key and why DeepSpeed or transformers would not run it, or
// what zerobench does not implement; notes every key.
DeepSpeedScheduler read_deepspeed_scheduler(const nlohmann::json& section, double optimizer_lr, const SchedulerFill& fill,
                                            const SchedulerFlagCheck& check, ConfigNotes& notes);

// The resolved parameters of `s` by DeepSpeed's names (the report's lr_schedule_params).
nlohmann::json scheduler_params_json(const DeepSpeedScheduler& s);

// `section` (a user's scheduler section, as read_deepspeed_scheduler accepted it) with every "auto"
// replaced by the value transformers fills it with (`s`, its resolution): the section DeepSpeed
// itself receives from HF's Trainer.
nlohmann::json filled_scheduler_section(const nlohmann::json& section, const DeepSpeedScheduler& s);

}  // namespace zb::config
