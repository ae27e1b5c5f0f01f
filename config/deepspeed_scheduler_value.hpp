// deepspeed_scheduler_value.hpp — the resolved DeepSpeed `scheduler` section a run carries
// (backends::TrainConfig::deepspeed_scheduler): its type and parameters and the lr each optimizer
// step gets. A value type alone, so that engine.hpp carries it without the section's reader
// (deepspeed_scheduler.hpp reads the section and fills it; deepspeed_scheduler.cpp defines lr() and
// betas()).
// Owns: the resolved parameters. Must not: read a config file or know the optimizer or a backend.
#pragma once
#include <cstdint>
#include <string>

namespace zb::config {

struct DeepSpeedScheduler {
  // "" = DeepSpeed builds no scheduler (no section, or one without "type"): every step runs with
  // the optimizer's lr.
  std::string type;
  // WarmupLR, WarmupDecayLR: from warmup_min_lr to warmup_max_lr over warmup_num_steps (the class
  // keeps max(2, it)), "log" or "linear"; WarmupDecayLR then decays linearly to 0 at total_num_steps.
  double warmup_min_lr = 0, warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;  // as given (DeepSpeed 0.19.8 refuses < 1)
  std::string warmup_type = "log";  // an unknown name is "log", as the classes fall back to it
  double total_num_steps = 0;       // WarmupDecayLR, WarmupCosineLR (a Python number: int or float)
  // WarmupCosineLR: the optimizer's lr times a ratio that warms up from warmup_min_ratio to 1,
  // then follows a cosine down to cos_min_ratio.
  double warmup_min_ratio = 0, cos_min_ratio = 1e-4;
  // OneCycle.
  double cycle_min_lr = 0, cycle_max_lr = 0, decay_lr_rate = 0;
  double cycle_first_step_size = 2000, cycle_second_step_size = 2000;  // second: the first's when absent
  double cycle_first_stair_count = 0, cycle_second_stair_count = 0;    // second: the first's when absent
  double decay_step_size = 0;
  // OneCycle's momentum (_initialize_momentum: zerobench's optimizer is an AdamW, which has "betas"
  // in its defaults): with cycle_momentum (DeepSpeed's default) the scheduler sets AdamW's betas to
  // (momentum, 0.99) at construction and at every step — beta2 0.99, not the configured beta2;
  // momentum cycles inversely to the lr between cycle_max_mom and cycle_min_mom, then decays.
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9, decay_mom_rate = 0;
  // LRRangeTest
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;

  bool active() const { return !type.empty(); }
  // The lr of the optimizer step that follows `scheduler_steps` scheduler.step() calls (the engine
  // steps the scheduler after each applied optimizer step; the constructor sets step 0's lr).
  // `optimizer_lr`: the optimizer's lr at construction (WarmupCosineLR scales it).
  double lr(double optimizer_lr, int64_t scheduler_steps) const;
  // Whether the schedule sets AdamW's betas every step (OneCycle with cycle_momentum).
  bool cycles_momentum() const { return type == "OneCycle" && cycle_momentum; }
  // AdamW's (beta1, beta2) for the optimizer step that follows `scheduler_steps` scheduler.step()
  // calls, as OneCycle sets param_groups' betas (get_mom; the constructor sets step 0's). Only
  // when cycles_momentum().
  struct Betas {
    double beta1 = 0, beta2 = 0;
  };
  Betas betas(int64_t scheduler_steps) const;
  // Every absolute lr parameter times `f` (crossval's planted lr difference).
  void scale_lrs(double f);
};

}  // namespace zb::config
