// hf_scheduler.hpp — the LR schedules of transformers' get_scheduler (optimization.py,
// TYPE_TO_SCHEDULER_FUNCTION; HF TrainingArguments.lr_scheduler_type, default "linear"), as HF's
// Trainer builds and steps them: a LambdaLR over the optimizer's lr, stepped after every applied
// optimizer step, so optimizer step k (0-based) runs at lr x lambda(k). Owns: which type names
// exist, which are implemented, and every step's lr, computed as transformers computes it (Python
// floats, math.cos / math.sqrt, each operation rounded). A run selects one with
// `--lr-scheduler-type NAME`, carried in TrainConfig::lr_schedule as "hf:NAME".
#pragma once
#include <cstdint>
#include <string>

namespace zb::config {

// True for a TrainConfig::lr_schedule that names a transformers schedule ("hf:NAME").
bool is_hf_schedule(const std::string& lr_schedule);
// "linear" for "hf:linear".
std::string hf_schedule_type(const std::string& lr_schedule);
// "" when NAME is a type implemented here; otherwise the one-line reason (not a SchedulerType of
// transformers, or one that needs what a run does not have).
std::string hf_scheduler_type_error(const std::string& name);
// Types whose scheduler_specific_kwargs carry min_lr_rate (zerobench's --min-lr-ratio).
bool hf_schedule_takes_min_lr_rate(const std::string& name);

struct HfSchedule {
  std::string type;             // an implemented name, e.g. "linear"
  double lr = 0;                // the optimizer's lr (LambdaLR's base_lr, optimizer.defaults["lr"])
  int64_t warmup_steps = 0;     // num_warmup_steps (TrainingArguments.get_warmup_steps)
  int64_t training_steps = 0;   // num_training_steps (the run's --steps)
  double min_lr_rate = 0;       // cosine_with_min_lr / cosine_warmup_with_min_lr
};

// "" when transformers builds `s`; otherwise its refusal (polynomial: lr_end 1e-7 must be below the lr).
std::string hf_schedule_error(const HfSchedule& s);

// base_lr x lambda(step): the lr optimizer step `step` runs with.
double hf_schedule_lr(const HfSchedule& s, int64_t step);

}  // namespace zb::config
