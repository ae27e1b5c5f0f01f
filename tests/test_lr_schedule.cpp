// test_lr_schedule.cpp — a DeepSpeed config's `scheduler` section (issue 35): every type DeepSpeed
// 0.19.8 has (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest) gives, step by step,
// the lr DeepSpeed's own class gives — built by DeepSpeedEngine._scheduler_from_config from the
// same section and stepped as the engine steps it (scripts/crossval/lr_schedule_reference.py) —
// equal to the bit; what DeepSpeed refuses, zerobench refuses with DeepSpeed's reason; "auto" is
// filled as transformers' HfTrainerDeepSpeedConfig fills it; a run reports the lr each step's
// optimizer update used. A schedule with another warm-up shape than the reference's must be seen
// to differ (the comparison can fail). OneCycle with cycle_momentum (its default) also sets AdamW's
// betas every step: those are compared to the bit too, and a run uses and reports them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "backends/common/optim.hpp"
#include "config/deepspeed_scheduler.hpp"
#include "config/hf_scheduler.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

using json = nlohmann::json;
using zb::config::DeepSpeedScheduler;
using zb::config::SchedulerFill;

namespace {

struct Case {
  std::string name;
  json section;
  double optimizer_lr = 3e-3;
  int steps = 12;
};

struct Result {
  std::vector<double> lrs;
  std::vector<std::pair<double, double>> betas;  // AdamW's (beta1, beta2) each step
  std::string error;  // "" when accepted
};

// The betas of the reference's torch.optim.AdamW when no scheduler sets them: its defaults.
constexpr std::pair<double, double> kAdamWDefaultBetas = {0.9, 0.999};

SchedulerFill fill(double lr = 3e-3, int64_t warmup = 4, int64_t steps = 10) {
  SchedulerFill f;
  f.learning_rate = lr;
  f.warmup_steps = warmup;
  f.warmup_flag_value = std::to_string(warmup);
  f.num_training_steps = steps;
  return f;
}

DeepSpeedScheduler read(const json& section, double optimizer_lr, const SchedulerFill& f = fill()) {
  zb::config::ConfigNotes notes;
  return zb::config::read_deepspeed_scheduler(section, optimizer_lr, f, [](auto&&...) {}, notes);
}

// zerobench's side: the section read (its "auto"s filled from `f`), every step's lr.
Result ours(const Case& c, const SchedulerFill& f = fill()) {
  Result r;
  try {
    const auto s = read(c.section, c.optimizer_lr, f);
    for (int k = 0; k < c.steps; ++k) {
      r.lrs.push_back(s.lr(c.optimizer_lr, k));
      const auto b = s.cycles_momentum() ? s.betas(k) : DeepSpeedScheduler::Betas{kAdamWDefaultBetas.first, kAdamWDefaultBetas.second};
      r.betas.emplace_back(b.beta1, b.beta2);
    }
  } catch (const zb::UsageError& e) {
    r.error = e.what();
  }
  return r;
}

// Runs scripts/crossval/SCRIPT on `in` (one Python process for every case) and returns its answer:
// the last line of stdout (DeepSpeed's import prints its accelerator warning there first).
json run_reference(const std::string& script, const json& in) {
  const auto path = zb::test_support::temp_path(script + ".in.json");
  std::ofstream(path) << in.dump();
  const auto r = zb::test_support::run_command(std::string(ZEROBENCH_PYTHON_EXE) + " " + zb::bench::source_dir() +
                                               "/scripts/crossval/" + script + " < " + path + " 2>/dev/null");
  std::remove(path.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return json::parse(out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1));
}

// One case's answer from a reference script: every step's lr, or the error it raised.
Result result_of(const json& x) {
  Result q;
  for (const auto& v : x["lrs"]) q.lrs.push_back(v.get<double>());
  q.error = x["error"].is_null() ? "" : x["error"].get<std::string>();
  if (q.error.empty() && x.contains("betas"))  // a refused case may have set a string
    for (const auto& b : x["betas"]) q.betas.emplace_back(b[0].get<double>(), b[1].get<double>());
  return q;
}

// DeepSpeed's side, every case in one Python process (DeepSpeed's import takes seconds).
std::vector<Result> deepspeed(const std::vector<Case>& cases) {
  json in = {{"cases", json::array()}};
  for (const auto& c : cases)
    in["cases"].push_back({{"optimizer_lr", c.optimizer_lr}, {"scheduler", c.section}, {"steps", c.steps}});
  const json j = run_reference("lr_schedule_reference.py", in);
  std::vector<Result> results;
  for (const auto& x : j["results"]) results.push_back(result_of(x));
  EXPECT_EQ(results.size(), cases.size());
  return results;
}

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Bitwise equal, step by step; false (with the first differing step traced) otherwise.
bool same_lrs(const std::vector<double>& a, const std::vector<double>& b, std::string* why) {
  if (a.size() != b.size()) {
    *why = std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " steps";
    return false;
  }
  for (size_t k = 0; k < a.size(); ++k)
    if (!(a[k] == b[k])) {
      *why = "step " + std::to_string(k) + ": " + exact(a[k]) + " vs DeepSpeed " + exact(b[k]);
      return false;
    }
  return true;
}

// Bitwise equal betas, step by step; false (with the first differing step traced) otherwise.
bool same_betas(const std::vector<std::pair<double, double>>& a, const std::vector<std::pair<double, double>>& b,
                std::string* why) {
  if (a.size() != b.size()) {
    *why = std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " steps";
    return false;
  }
  for (size_t k = 0; k < a.size(); ++k)
    if (!(a[k].first == b[k].first && a[k].second == b[k].second)) {
      *why = "step " + std::to_string(k) + ": betas (" + exact(a[k].first) + ", " + exact(a[k].second) + ") vs DeepSpeed (" +
             exact(b[k].first) + ", " + exact(b[k].second) + ")";
      return false;
    }
  return true;
}

// Sections DeepSpeed runs, covering every parameter of every class (already filled: no "auto").
std::vector<Case> accepted_cases() {
  std::vector<Case> c = {
      {"WarmupLR log", {{"type", "WarmupLR"}, {"params", {{"warmup_min_lr", 1e-5}, {"warmup_max_lr", 3e-3}, {"warmup_num_steps", 5}}}}},
      {"WarmupLR linear",
       {{"type", "WarmupLR"}, {"params", {{"warmup_min_lr", 0}, {"warmup_max_lr", 2e-4}, {"warmup_num_steps", 7}, {"warmup_type", "linear"}}}}},
      {"WarmupLR warmup 1 runs as 2", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 1e-3}, {"warmup_num_steps", 1}}}}},
      {"WarmupLR max from the optimizer", {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 3}}}}, 7e-4},
      {"WarmupLR max null", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", nullptr}, {"warmup_num_steps", 4}}}}, 5e-4},
      {"WarmupLR unknown warmup_type is log",
       {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 1e-3}, {"warmup_num_steps", 6}, {"warmup_type", "cosine"}}}}},
      {"WarmupLR defaults", {{"type", "WarmupLR"}, {"params", json::object()}}, 1e-3, 4},
      {"WarmupDecayLR log",
       {{"type", "WarmupDecayLR"},
        {"params", {{"warmup_min_lr", 0}, {"warmup_max_lr", 3e-3}, {"warmup_num_steps", 4}, {"total_num_steps", 10}}}},
       3e-3, 14},
      {"WarmupDecayLR linear, float total",
       {{"type", "WarmupDecayLR"},
        {"params", {{"warmup_min_lr", 1e-6}, {"warmup_max_lr", 1e-3}, {"warmup_num_steps", 3}, {"total_num_steps", 9.5},
                    {"warmup_type", "linear"}}}},
       3e-3, 12},
      {"WarmupDecayLR default max, total below warmup",
       {{"type", "WarmupDecayLR"}, {"params", {{"warmup_num_steps", 5}, {"total_num_steps", 3}}}}, 3e-3, 8},
      {"WarmupCosineLR log",
       {{"type", "WarmupCosineLR"},
        {"params", {{"total_num_steps", 10}, {"warmup_num_steps", 3}, {"warmup_min_ratio", 0.1}, {"cos_min_ratio", 0.05}}}},
       2e-3, 14},
      {"WarmupCosineLR linear",
       {{"type", "WarmupCosineLR"},
        {"params", {{"total_num_steps", 8}, {"warmup_num_steps", 2}, {"warmup_type", "linear"}}}},
       1e-3, 10},
      {"OneCycle with decay",
       {{"type", "OneCycle"},
        {"params", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}, {"cycle_first_step_size", 4}, {"cycle_second_step_size", 6},
                    {"decay_lr_rate", 0.5}, {"decay_step_size", 2}, {"cycle_momentum", false}}}},
       3e-3, 20},
      {"OneCycle staircase",
       {{"type", "OneCycle"},
        {"params", {{"cycle_min_lr", 2e-4}, {"cycle_max_lr", 2e-3}, {"cycle_first_step_size", 6}, {"cycle_second_step_size", 5},
                    {"cycle_first_stair_count", 3}, {"cycle_second_stair_count", 2}, {"cycle_momentum", false},
                    {"cycle_min_mom", 0.85}, {"cycle_max_mom", 0.95}}}},
       3e-3, 16},
      {"OneCycle symmetric, same stairs, no decay",
       {{"type", "OneCycle"},
        {"params", {{"cycle_min_lr", 1e-5}, {"cycle_max_lr", 1e-4}, {"cycle_first_step_size", 5},
                    {"cycle_first_stair_count", 2}, {"decay_lr_rate", 0.1}, {"cycle_momentum", false}}}},
       3e-3, 14},
      // cycle_momentum (DeepSpeed's default): betas (cycle_min_mom, 0.99) at construction, then
      // cycle_max_mom - (max - min) x the lr's scale factor; after the cycle cycle_max_mom (no
      // decay_mom_rate), or cycle_max_mom x (1 + rate x interval).
      {"OneCycle momentum by default, decay of the lr only",
       {{"type", "OneCycle"},
        {"params", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}, {"cycle_first_step_size", 4}, {"cycle_second_step_size", 6},
                    {"decay_lr_rate", 0.5}, {"decay_step_size", 2}}}},
       3e-3, 16},
      {"OneCycle momentum staircase with momentum decay",
       {{"type", "OneCycle"},
        {"params", {{"cycle_min_lr", 2e-4}, {"cycle_max_lr", 2e-3}, {"cycle_first_step_size", 6}, {"cycle_second_step_size", 5},
                    {"cycle_first_stair_count", 3}, {"cycle_second_stair_count", 2}, {"cycle_momentum", true},
                    {"cycle_min_mom", 0.85}, {"cycle_max_mom", 0.95}, {"decay_mom_rate", 0.01}, {"decay_lr_rate", 0.1},
                    {"decay_step_size", 3}}}},
       3e-3, 18},
      {"OneCycle momentum rate without a decay step size: no decay",
       {{"type", "OneCycle"},
        {"params", {{"cycle_min_lr", 1e-5}, {"cycle_max_lr", 1e-4}, {"cycle_first_step_size", 3}, {"cycle_min_mom", 0.7},
                    {"cycle_max_mom", 0.93}, {"decay_mom_rate", 0.2}, {"cycle_momentum", 1}}}},
       3e-3, 10},
      {"LRRangeTest continuous",
       {{"type", "LRRangeTest"},
        {"params", {{"lr_range_test_min_lr", 1e-4}, {"lr_range_test_step_size", 3}, {"lr_range_test_step_rate", 2.0}}}}},
      {"LRRangeTest staircase",
       {{"type", "LRRangeTest"},
        {"params", {{"lr_range_test_min_lr", 3e-5}, {"lr_range_test_step_size", 2}, {"lr_range_test_step_rate", 0.5},
                    {"lr_range_test_staircase", true}}}}},
      {"no type: no scheduler", {{"params", {{"warmup_num_steps", 3}}}}, 3e-3, 3},
  };
  return c;
}

}  // namespace

TEST(LrSchedule, EveryDeepSpeedTypeEqualsDeepSpeedsOwnClassStepByStep) {
  const auto cases = accepted_cases();
  const auto ref = deepspeed(cases);
  ASSERT_EQ(ref.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const auto mine = ours(cases[i]);
    ASSERT_EQ(mine.error, "");
    ASSERT_EQ(ref[i].error, "") << "DeepSpeed refused a case meant to run";
    std::string why;
    EXPECT_TRUE(same_lrs(mine.lrs, ref[i].lrs, &why)) << why;
    EXPECT_TRUE(same_betas(mine.betas, ref[i].betas, &why)) << why;
  }
  // The trainer's lr_at follows the scheduler of the TrainConfig (skipped fp16 steps aside, step k
  // is the k-th scheduler step); a section without a type leaves the optimizer's lr.
  zb::backends::TrainConfig t;
  t.lr = 7e-4;
  t.lr_warmup_steps = 5;  // zerobench's own warm-up never applies under a DeepSpeed section
  t.deepspeed_scheduler = read(cases[3].section, t.lr);
  for (int k = 0; k < cases[3].steps; ++k) EXPECT_EQ(zb::backends::common::lr_at(t, k), ref[3].lrs[size_t(k)]);
  t.deepspeed_scheduler = read(cases.back().section, t.lr);
  t.lr_schedule = "none";
  for (int k = 0; k < 3; ++k) EXPECT_EQ(zb::backends::common::lr_at(t, k), 7e-4);
  // hyper_at (what the trainer hands Engine::optimizer_step): OneCycle's lr and betas with
  // cycle_momentum; the configured betas under any other schedule.
  const size_t mom = size_t(std::find_if(cases.begin(), cases.end(), [](const Case& c) {
                              return c.name == "OneCycle momentum staircase with momentum decay";
                            }) - cases.begin());
  ASSERT_LT(mom, cases.size());
  zb::backends::TrainConfig one_cycle;
  one_cycle.beta1 = 0.8;
  one_cycle.beta2 = 0.95;
  one_cycle.deepspeed_scheduler = read(cases[mom].section, one_cycle.lr);
  ASSERT_TRUE(one_cycle.deepspeed_scheduler.cycles_momentum());
  for (int k = 0; k < cases[mom].steps; ++k) {
    const auto h = zb::backends::common::hyper_at(one_cycle, k);
    EXPECT_EQ(h.lr, ref[mom].lrs[size_t(k)]) << "step " << k;
    EXPECT_EQ(h.beta1, ref[mom].betas[size_t(k)].first) << "step " << k;
    EXPECT_EQ(h.beta2, 0.99) << "step " << k;  // not the configured 0.95
  }
  const auto plain = zb::backends::common::hyper_at(t, 1);
  EXPECT_EQ(plain.beta1, t.beta1);
  EXPECT_EQ(plain.beta2, t.beta2);
  // The betas comparison can fail: momentum cycling off (the betas fixed) differs from step 0.
  Case fixed = cases[mom];
  fixed.section["params"]["cycle_momentum"] = false;
  std::string why_betas;
  EXPECT_FALSE(same_betas(ours(fixed).betas, ref[mom].betas, &why_betas));
  EXPECT_NE(why_betas.find("step 0: "), std::string::npos) << why_betas;
  // The check can fail: a warm-up of another shape than DeepSpeed's (linear where the section says
  // log) differs in the warm-up steps; so does the optimizer's lr standing in for warmup_max_lr.
  Case planted = cases[0];
  planted.section["params"]["warmup_type"] = "linear";
  std::string why;
  EXPECT_FALSE(same_lrs(ours(planted).lrs, ref[0].lrs, &why));
  EXPECT_NE(why.find("step 2: "), std::string::npos) << why;  // step 1 is it 0: min_lr for both shapes
}

// What DeepSpeed refuses (its constructors' ValueError / TypeError, the engine's assertion),
// zerobench refuses naming the key, with DeepSpeed's reason; what DeepSpeed runs but zerobench
// does not implement is refused as such.
TEST(LrSchedule, RefusalsAreDeepSpeedsOwnOrNamedAsNotImplemented) {
  struct Refusal {
    json section;
    std::string ours;       // in zerobench's message
    std::string deepspeed;  // in DeepSpeed's exception ("" when DeepSpeed runs it)
  };
  const std::vector<Refusal> refusals = {
      {{{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 0}}}},
       "scheduler.params.warmup_num_steps 0: DeepSpeed's WarmupLR raises ValueError (warmup_num_steps must be a "
       "positive integer, got 0)",
       "ValueError: warmup_num_steps must be a positive integer, got 0"},
      {{{"type", "WarmupDecayLR"}, {"params", {{"warmup_num_steps", 100.0}, {"total_num_steps", 1000}}}},
       "scheduler.params.warmup_num_steps 100.0: DeepSpeed's WarmupDecayLR raises ValueError",
       "ValueError: warmup_num_steps must be a positive integer, got 100.0"},
      {{{"type", "WarmupCosineLR"}, {"params", {{"warmup_num_steps", -3}, {"total_num_steps", 10}}}},
       "warmup_num_steps -3", "ValueError: warmup_num_steps must be a positive integer, got -3"},
      {{{"type", "WarmupDecayLR"}, {"params", {{"warmup_num_steps", 10}}}},
       "scheduler.params.total_num_steps is missing", "TypeError"},
      {{{"type", "WarmupLR"}}, "scheduler.params is missing: DeepSpeed calls WarmupLR(optimizer, **None)",
       "TypeError: deepspeed.runtime.lr_schedules.WarmupLR() argument after ** must be a mapping"},
      {{{"type", "WarmupCosineLR"}, {"params", {{"total_num_steps", 10}, {"warmup_max_lr", 1e-3}}}},
       "scheduler.params.warmup_max_lr 0.001: not a parameter of DeepSpeed's WarmupCosineLR", "TypeError"},
      {{{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", "1e-3"}}}}, "scheduler.params.warmup_max_lr 1e-3 is not a number",
       "TypeError"},
      {{{"type", "OneCycle"}, {"params", {{"cycle_min_lr", 1e-4}, {"cycle_momentum", false}}}},
       "scheduler.params.cycle_max_lr is missing", "TypeError"},
      {{{"type", "OneCycle"},
        {"params", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}, {"cycle_first_step_size", 0}, {"cycle_momentum", false}}}},
       "cycle_first_step_size must be positive", "ValueError: cycle_first_step_size must be positive"},
      {{{"type", "LRRangeTest"}, {"params", {{"lr_range_test_step_size", 0}}}},
       "lr_range_test_step_size must be a positive integer", "ValueError: lr_range_test_step_size must be a positive integer"},
      {{{"type", "CosineWithRestarts"}, {"params", json::object()}},
       "scheduler.type CosineWithRestarts: DeepSpeed does not recognize LR scheduler CosineWithRestarts",
       "AssertionError: DeepSpeed does not recognize LR scheduler CosineWithRestarts"},
      {{{"type", "WarmupLR"}, {"params", {{"last_batch_iteration", 5}}}}, "resuming a schedule is not implemented", ""},
      // With cycle_momentum the momentum keys reach the arithmetic: a string fails there
      // (decay_mom_rate in the constructor's math.isclose, cycle_min_mom at the first step).
      {{{"type", "OneCycle"}, {"params", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}, {"cycle_min_mom", "auto"}}}},
       "scheduler.params.cycle_min_mom \"auto\": transformers fills only", "TypeError"},
      {{{"type", "OneCycle"}, {"params", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}, {"decay_mom_rate", "0.1"}}}},
       "scheduler.params.decay_mom_rate 0.1 is not a number", "TypeError"},
      // DeepSpeed runs these; zerobench does not implement them.
      {{{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", json::array({1e-3})}}}}, "per-parameter-group values are not implemented", ""},
      {{{"type", "StepLR"}, {"params", {{"step_size", 2}}}}, "DeepSpeed builds torch.optim.lr_scheduler.StepLR", ""},
  };
  std::vector<Case> cases;
  for (const auto& r : refusals) cases.push_back({r.section.dump(), r.section, 3e-3, 3});
  const auto ref = deepspeed(cases);
  for (size_t i = 0; i < refusals.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const auto mine = ours(cases[i]);
    EXPECT_NE(mine.error.find(refusals[i].ours), std::string::npos) << mine.error;
    EXPECT_EQ(mine.error.find('\n'), std::string::npos) << "one line: " << mine.error;
    if (!refusals[i].deepspeed.empty()) {
      EXPECT_NE(ref[i].error.find(refusals[i].deepspeed), std::string::npos) << "DeepSpeed: " << ref[i].error;
    } else {
      EXPECT_EQ(ref[i].error, "") << "DeepSpeed runs it";
    }
  }
}

// transformers' HfTrainerDeepSpeedConfig: trainer_config_process fills warmup_min_lr with 0 and
// warmup_max_lr with args.learning_rate; trainer_config_finalize fills total_num_steps with
// num_training_steps and warmup_num_steps with args.get_warmup_steps(num_training_steps)
// (int(warmup_steps) if >= 1, else ceil(num_training_steps * warmup_steps)). Other "auto"s reach
// DeepSpeed as strings.
TEST(LrSchedule, AutoIsFilledAsTransformersFillsIt) {
  const json section = {{"type", "WarmupDecayLR"},
                        {"params", {{"warmup_min_lr", "auto"}, {"warmup_max_lr", "auto"}, {"warmup_num_steps", "auto"},
                                    {"total_num_steps", "auto"}}}};
  const auto f = fill(2e-4, 3, 12);
  const auto s = read(section, 1e-3, f);
  EXPECT_EQ(s.warmup_min_lr, 0.0);
  EXPECT_EQ(s.warmup_max_lr, 2e-4);  // --lr, not the optimizer section's lr
  EXPECT_EQ(s.warmup_num_steps, 3);
  EXPECT_EQ(s.total_num_steps, 12.0);
  const json filled = zb::config::filled_scheduler_section(section, s);
  EXPECT_EQ(filled, json({{"type", "WarmupDecayLR"},
                          {"params", {{"warmup_min_lr", 0.0}, {"warmup_max_lr", 2e-4}, {"warmup_num_steps", 3},
                                      {"total_num_steps", 12}}}}));
  EXPECT_TRUE(filled["params"]["warmup_num_steps"].is_number_integer());  // an int, as DeepSpeed requires
  // The filled section is what DeepSpeed builds: same lrs.
  const auto ref = deepspeed({{"filled", filled, 1e-3, 14}});
  std::string why;
  EXPECT_TRUE(same_lrs(ours({"auto", section, 1e-3, 14}, f).lrs, ref[0].lrs, &why)) << why;

  // get_warmup_steps = 0 (HF's default warmup_steps 0): DeepSpeed 0.19.8 refuses the filled 0.
  const auto zero = ours({"auto warmup 0", section, 1e-3, 3}, fill(2e-4, 0, 12));
  EXPECT_NE(zero.error.find("scheduler.params.warmup_num_steps \"auto\": transformers fills it with get_warmup_steps = 0"),
            std::string::npos)
      << zero.error;
  EXPECT_NE(zero.error.find("warmup_num_steps must be a positive integer, got 0"), std::string::npos) << zero.error;
  // An "auto" transformers does not fill reaches DeepSpeed as a string.
  const auto unfilled = ours({"cos auto", {{"type", "WarmupCosineLR"}, {"params", {{"total_num_steps", 5}, {"cos_min_ratio", "auto"}}}}});
  EXPECT_NE(unfilled.error.find("scheduler.params.cos_min_ratio \"auto\": transformers fills only"), std::string::npos)
      << unfilled.error;
}

namespace {
json run_report(const std::string& args, int expected_exit, std::string* output = nullptr) {
  static int n = 0;
  const auto out = zb::test_support::temp_path("lr_run_" + std::to_string(n++) + ".json");
  std::remove(out.c_str());
  const auto r = zb::test_support::run_zerobench("run --model tiny --nproc 2 --seq-len 16 --micro-batch 1 --threads 1 "
                                                 "--quiet --out " + out + " " + args);
  EXPECT_EQ(r.exit_code, expected_exit) << args << "\n" << r.output;
  if (output) *output = r.output;
  if (expected_exit != 0) return json();
  auto report = zb::reports::read_report(out);
  std::remove(out.c_str());
  return report;
}

std::string write_file(const std::string& name, const std::string& text) {
  const auto p = zb::test_support::temp_path(name);
  std::ofstream(p) << text;
  return p;
}
}  // namespace

// A run with a real DeepSpeed file: every step's lr in the report is the lr DeepSpeed's class gives
// that step (the one the optimizer update used); the file's "auto" warm-up follows --lr-warmup-steps
// or --lr-warmup-ratio (ceil(steps x ratio)); without either DeepSpeed would refuse the filled 0.
TEST(LrSchedule, ARunReportsTheLrDeepSpeedGivesEachStep) {
  const std::string qwen = std::string(zb::bench::source_dir()) + "/tests/configs/real/qwen_ds_config_zero2.json";  // WarmupLR auto
  const auto report = run_report("--config " + qwen + " --steps 4 --warmup 1 --lr 2e-3 --lr-warmup-steps 3", 0);
  const json warmup_lr = {{"type", "WarmupLR"},
                          {"params", {{"warmup_min_lr", 0}, {"warmup_max_lr", 2e-3}, {"warmup_num_steps", 3}}}};
  auto ref = deepspeed({{"qwen", warmup_lr, 2e-3, 4}});
  ASSERT_EQ(report["steps"].size(), 4u);
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(report["steps"][k]["lr"].get<double>(), ref[0].lrs[size_t(k)]) << "step " << k;
  EXPECT_EQ(report["config"]["train"]["lr_schedule"], "WarmupLR");
  EXPECT_EQ(report["config"]["train"]["lr_schedule_params"]["warmup_num_steps"], 3);

  // A WarmupDecayLR "auto" file (ZeRO-2): --lr-warmup-ratio 0.25 of 5 steps is ceil(1.25) = 2.
  const auto decay = write_file("decay.json", R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                    "warmup_num_steps": "auto", "total_num_steps": "auto"}},
      "zero_optimization": {"stage": 2}})");
  const auto d = run_report("--config " + decay + " --steps 5 --warmup 1 --lr 3e-3 --lr-warmup-ratio 0.25", 0);
  ref = deepspeed({{"decay", {{"type", "WarmupDecayLR"},
                              {"params", {{"warmup_min_lr", 0}, {"warmup_max_lr", 3e-3}, {"warmup_num_steps", 2},
                                          {"total_num_steps", 5}}}},
                    3e-3, 5}});
  ASSERT_EQ(d["steps"].size(), 5u);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(d["steps"][k]["lr"].get<double>(), ref[0].lrs[size_t(k)]) << "step " << k;
  EXPECT_EQ(ref[0].lrs, (std::vector<double>{0.0, 0.0, 3e-3, 3e-3, 3e-3 * 2.0 / 3.0}));

  // Without a warm-up flag transformers fills 0, which DeepSpeed 0.19.8 refuses: exit 2, one line.
  std::string output;
  run_report("--config " + decay + " --steps 5 --warmup 1", 2, &output);
  EXPECT_NE(output.find("scheduler.params.warmup_num_steps \"auto\""), std::string::npos) << output;
  EXPECT_NE(output.find("got 0"), std::string::npos) << output;
  run_report("--config " + decay + " --steps 5 --warmup 1 --lr-warmup-ratio 0.2 --lr-warmup-steps 2", 2, &output);
  run_report("--config " + decay + " --steps 5 --warmup 1 --lr-warmup-ratio 1", 2, &output);
  // --lr-schedule beside a scheduler section: transformers never builds its own then.
  run_report("--config " + decay + " --steps 5 --warmup 1 --lr-warmup-steps 2 --lr-schedule constant", 2, &output);
  EXPECT_NE(output.find("--lr-schedule constant conflicts with the DeepSpeed scheduler section"), std::string::npos) << output;
  std::remove(decay.c_str());
}

// OneCycle with cycle_momentum (DeepSpeed's default) runs: every step's lr and betas in the report
// are those DeepSpeed's class sets (the update used them: test_crossval compares the losses with
// DeepSpeed's own run), and the momentum keys are applied, not ignored. A run whose schedule sets
// no betas reports none.
TEST(LrSchedule, OneCycleWithMomentumRunsAndReportsEachStepsBetas) {
  const json section = {{"type", "OneCycle"},
                        {"params", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 2e-3}, {"cycle_first_step_size", 2},
                                    {"cycle_second_step_size", 1}, {"cycle_min_mom", 0.8}, {"cycle_max_mom", 0.9},
                                    {"decay_mom_rate", 0.05}, {"decay_lr_rate", 0.1}, {"decay_step_size", 1}}}};
  const auto file = write_file("one_cycle.json", json({{"train_micro_batch_size_per_gpu", "auto"},
                                                       {"gradient_accumulation_steps", 1},
                                                       {"scheduler", section},
                                                       {"zero_optimization", {{"stage", 2}}}})
                                                     .dump());
  const auto report = run_report("--config " + file + " --steps 5 --warmup 1", 0);
  const auto ref = deepspeed({{"one cycle", section, 3e-3, 5}});
  ASSERT_EQ(report["steps"].size(), 5u);
  for (int k = 0; k < 5; ++k) {
    const auto& st = report["steps"][k];
    EXPECT_EQ(st["lr"].get<double>(), ref[0].lrs[size_t(k)]) << "step " << k;
    EXPECT_EQ(st["beta1"].get<double>(), ref[0].betas[size_t(k)].first) << "step " << k;
    EXPECT_EQ(st["beta2"].get<double>(), 0.99) << "step " << k;
  }
  EXPECT_EQ(ref[0].betas.front(), std::make_pair(0.8, 0.99));  // the constructor's (cycle_min_mom, 0.99)
  EXPECT_GT(ref[0].betas.back().first, 0.9);                    // decayed up: cycle_max_mom x (1 + rate x n)
  const auto& params = report["config"]["train"]["lr_schedule_params"];
  EXPECT_EQ(params["cycle_momentum"], true);
  EXPECT_EQ(params["decay_mom_rate"], 0.05);
  std::set<std::string> applied, ignored;
  for (const auto& a : report["config"]["applied"]) applied.insert(a["key"].get<std::string>());
  for (const auto& a : report["config"]["ignored"]) ignored.insert(a["key"].get<std::string>());
  for (const char* k : {"cycle_momentum", "cycle_min_mom", "cycle_max_mom", "decay_mom_rate"}) {
    EXPECT_TRUE(applied.count(std::string("scheduler.params.") + k)) << k << " not applied";
    EXPECT_FALSE(ignored.count(std::string("scheduler.params.") + k)) << k << " ignored";
  }
  std::remove(file.c_str());
  // No momentum cycling: no betas per step (the configured ones throughout).
  const auto plain = run_report("--steps 2 --warmup 1", 0);
  for (const auto& st : plain["steps"]) EXPECT_FALSE(st.contains("beta1")) << st.dump();
}

// The real files with a scheduler section run once a warm-up is given (without one, see the corpus
// README: DeepSpeed refuses the filled 0), each step at the lr DeepSpeed gives it — a step the
// fp16 loss scaler skipped (accelerate's zero_stage3_config is fp16) does not advance the schedule.
TEST(LrSchedule, RealFilesWithAScheduleRunWithAWarmUp) {
  const std::string real = std::string(zb::bench::source_dir()) + "/tests/configs/real/";
  struct File {
    std::string name;
    json section;  // the file's section as transformers fills it for --lr 1e-3 --lr-warmup-steps 2 --steps 4
  };
  const json filled = {{"warmup_min_lr", 0}, {"warmup_max_lr", 1e-3}, {"warmup_num_steps", 2}};
  json decay = filled;
  decay["total_num_steps"] = 4;
  json decay_linear = decay;  // Open-Assistant's SFT file sets warmup_type "linear"
  decay_linear["warmup_type"] = "linear";
  const std::vector<File> files = {{"qwen_ds_config_zero2.json", {{"type", "WarmupLR"}, {"params", filled}}},
                                   {"accelerate_tests_ds_config_zero3.json", {{"type", "WarmupLR"}, {"params", filled}}},
                                   {"accelerate_zero_stage3_config.json", {{"type", "WarmupDecayLR"}, {"params", decay}}},
                                   {"accelerate_zero_stage1_config.json", {{"type", "WarmupDecayLR"}, {"params", decay}}},
                                   {"accelerate_zero_stage2_config.json", {{"type", "WarmupDecayLR"}, {"params", decay}}},
                                   {"accelerate_zero_stage2_offload_config.json", {{"type", "WarmupDecayLR"}, {"params", decay}}},
                                   {"accelerate_zero_stage3_offload_config.json", {{"type", "WarmupDecayLR"}, {"params", decay}}},
                                   {"openassistant_zero_config.json", {{"type", "WarmupDecayLR"}, {"params", decay}}},
                                   {"openassistant_zero3_config_sft.json", {{"type", "WarmupDecayLR"}, {"params", decay_linear}}},
                                   {"open-instruct_stage3_no_offloading.conf", {{"type", "WarmupDecayLR"}, {"params", decay}}}};
  std::vector<Case> cases;
  for (const auto& f : files) cases.push_back({f.name, f.section, 1e-3, 4});
  const auto ref = deepspeed(cases);
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(files[i].name);
    const auto report = run_report("--config " + real + files[i].name + " --steps 4 --warmup 1 --lr 1e-3 --lr-warmup-steps 2", 0);
    ASSERT_EQ(report["steps"].size(), 4u);
    int64_t skipped = 0;
    for (int k = 0; k < 4; ++k) {
      const auto& st = report["steps"][k];
      EXPECT_EQ(st["lr"].get<double>(), ref[i].lrs[size_t(k - skipped)]) << "step " << k << " (" << skipped << " skipped)";
      if (st.contains("loss_scale") && st["loss_scale"]["skipped"].get<bool>()) ++skipped;
    }
  }
}

// ---- transformers' get_scheduler (--lr-scheduler-type, config/hf_scheduler.cpp) ----------------
// Every implemented type, over warm-ups given in steps and as ratios, gives at every step the lr
// transformers' own LambdaLR gives as HF's Trainer steps it (scripts/crossval/hf_schedule_reference.py:
// get_last_lr() before each optimizer step, scheduler.step() after it), equal to the bit.

namespace {
struct HfCase {
  std::string type;
  double lr = 3e-3;
  int steps = 10;
  int64_t warmup_steps = 0;
  double warmup_ratio = -1;  // >= 0: the warm-up is ceil(steps x ratio) (TrainingArguments.get_warmup_steps)
};

bool takes_min_lr_rate(const std::string& type) { return type == "cosine_with_min_lr" || type == "cosine_warmup_with_min_lr"; }
constexpr double kMinLrRate = 0.1;

// transformers' side, every case in one Python process; `shift` > 0 plants an off-by-one.
std::vector<Result> transformers_lrs(const std::vector<HfCase>& cases, int shift, std::vector<int64_t>* warmups = nullptr) {
  json in = {{"cases", json::array()}};
  for (const auto& c : cases) {
    json j = {{"type", c.type}, {"lr", c.lr}, {"steps", c.steps}, {"shift", shift}};
    if (c.warmup_ratio >= 0) j["warmup_ratio"] = c.warmup_ratio;
    else j["warmup_steps"] = c.warmup_steps;
    if (takes_min_lr_rate(c.type)) j["min_lr_rate"] = kMinLrRate;
    in["cases"].push_back(j);
  }
  const json j = run_reference("hf_schedule_reference.py", in);
  std::vector<Result> results;
  for (const auto& x : j["results"]) {
    results.push_back(result_of(x));
    if (warmups) warmups->push_back(x["warmup_steps"].get<int64_t>());
  }
  EXPECT_EQ(results.size(), cases.size());
  return results;
}

// zerobench's side: lr_at of the TrainConfig an `--lr-scheduler-type T` run carries (the warm-up
// from a ratio as RunOptions::resolve computes it).
std::vector<double> zerobench_lrs(const HfCase& c) {
  zb::backends::TrainConfig t;
  t.lr = c.lr;
  t.steps = c.steps;
  t.lr_schedule = "hf:" + c.type;
  t.lr_warmup_steps = c.warmup_ratio >= 0 ? int64_t(std::ceil(double(c.steps) * c.warmup_ratio)) : c.warmup_steps;
  t.min_lr_ratio = takes_min_lr_rate(c.type) ? kMinLrRate : 0.37;  // the other types must not read it
  std::vector<double> lrs;
  for (int k = 0; k < c.steps; ++k) lrs.push_back(zb::backends::common::lr_at(t, k));
  return lrs;
}

std::vector<HfCase> hf_cases() {
  const std::vector<std::string> types = {"linear",       "cosine",     "constant",           "constant_with_warmup",
                                          "inverse_sqrt", "polynomial", "cosine_with_restarts", "cosine_with_min_lr",
                                          "cosine_warmup_with_min_lr"};
  std::vector<HfCase> cases;
  for (const auto& type : types) {
    cases.push_back({type, 3e-3, 10, 0});
    cases.push_back({type, 3e-3, 10, 3});
    cases.push_back({type, 7e-4, 7, 0, 0.3});    // ceil(2.1) = 3
    cases.push_back({type, 1e-4, 25, 0, 0.1});   // ceil(2.5) = 3
    cases.push_back({type, 2e-5, 13, 1});
    cases.push_back({type, 3e-3, 6, 6});         // all warm-up
    cases.push_back({type, 5e-4, 9, 12});        // warm-up longer than the run
  }
  return cases;
}
}  // namespace

TEST(HfSchedule, EveryTypeGivesTransformersGetSchedulerLrEveryStepBitwise) {
  const auto cases = hf_cases();
  std::vector<int64_t> warmups;
  const auto ref = transformers_lrs(cases, 0, &warmups);
  ASSERT_EQ(ref.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE(c.type + " lr " + exact(c.lr) + " steps " + std::to_string(c.steps) + " warmup " +
                 (c.warmup_ratio >= 0 ? "ratio " + exact(c.warmup_ratio) : std::to_string(c.warmup_steps)));
    if (c.type == "polynomial" && c.steps == c.warmup_steps) {  // transformers fails after the last step
      EXPECT_NE(ref[i].error.find("ZeroDivisionError"), std::string::npos) << ref[i].error;
      EXPECT_NE(zb::config::hf_schedule_error({c.type, c.lr, c.warmup_steps, c.steps, 0}).find("ZeroDivisionError"),
                std::string::npos);
      continue;
    }
    ASSERT_EQ(ref[i].error, "");
    if (c.warmup_ratio >= 0) {
      EXPECT_EQ(warmups[i], int64_t(std::ceil(double(c.steps) * c.warmup_ratio)));
    }
    std::string why;
    EXPECT_TRUE(same_lrs(zerobench_lrs(c), ref[i].lrs, &why)) << why;
  }
}

// The comparison sees a schedule one step off: the same cases against transformers' scheduler
// stepped once before the first optimizer step (a runner stepping before instead of after) differ
// in every case whose lr changes at all.
TEST(HfSchedule, AnOffByOneStepIsSeen) {
  const auto cases = hf_cases();
  const auto shifted = transformers_lrs(cases, 1);
  ASSERT_EQ(shifted.size(), cases.size());
  int seen = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ours = zerobench_lrs(cases[i]);
    if (std::all_of(ours.begin(), ours.end(), [&](double v) { return v == ours[0]; })) continue;  // constant
    std::string why;
    EXPECT_FALSE(same_lrs(ours, shifted[i].lrs, &why)) << cases[i].type << " case " << i;
    ++seen;
  }
  EXPECT_GE(seen, 50);
}

// A run: config.train names the schedule and its get_scheduler arguments, steps[].lr is the lr
// transformers gives each step (warm-up from --lr-warmup-ratio as get_warmup_steps computes it).
TEST(HfSchedule, ARunReportsTheLrTransformersGivesEachStep) {
  const auto report = run_report("--steps 7 --warmup 1 --lr 2e-3 --lr-scheduler-type cosine --lr-warmup-ratio 0.3", 0);
  const auto m = run_report("--steps 4 --warmup 1 --lr 1e-3 --lr-scheduler-type cosine_with_min_lr --min-lr-ratio 0.1", 0);
  const auto ref = transformers_lrs({{"cosine", 2e-3, 7, 0, 0.3}, {"cosine_with_min_lr", 1e-3, 4, 0}}, 0);
  ASSERT_EQ(ref.size(), 2u);
  ASSERT_EQ(report["steps"].size(), 7u);
  for (int k = 0; k < 7; ++k) EXPECT_EQ(report["steps"][k]["lr"].get<double>(), ref[0].lrs[size_t(k)]) << "step " << k;
  const auto& train = report["config"]["train"];
  EXPECT_EQ(train["lr_schedule"], "hf:cosine");
  EXPECT_EQ(train["lr_schedule_params"],
            json({{"lr_scheduler_type", "cosine"}, {"num_warmup_steps", 3}, {"num_training_steps", 7}, {"num_cycles", 0.5}}));
  ASSERT_EQ(m["steps"].size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(m["steps"][k]["lr"].get<double>(), ref[1].lrs[size_t(k)]) << "step " << k;
  EXPECT_EQ(m["config"]["train"]["lr_schedule_params"]["min_lr_rate"], 0.1);
}

// What transformers refuses, or what zerobench does not implement, exits 2 with one line naming it.
TEST(HfSchedule, BadTypesAndConflictsExit2WithOneLine) {
  const auto decay = write_file("hf_decay.json", R"({"train_micro_batch_size_per_gpu": "auto",
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 2, "total_num_steps": 5}},
      "zero_optimization": {"stage": 2}})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--lr-scheduler-type cosine_schedule", "'cosine_schedule' is not a valid SchedulerType of transformers"},
      {"--lr-scheduler-type reduce_lr_on_plateau", "reduce_lr_on_plateau adjusts the lr from evaluation metrics"},
      {"--lr-scheduler-type greedy", "greedy adjusts the lr from evaluation metrics"},
      {"--lr-scheduler-type warmup_stable_decay", "requires lr_scheduler_kwargs num_decay_steps"},
      {"--lr-scheduler-type linear --lr-schedule cosine", "--lr-schedule excludes --lr-scheduler-type"},
      {"--lr-scheduler-type cosine_with_min_lr", "--lr-scheduler-type cosine_with_min_lr needs --min-lr-ratio"},
      {"--lr-scheduler-type linear --min-lr-ratio 0.2", "--lr-scheduler-type linear: transformers' schedule takes no min_lr_rate"},
      {"--lr-scheduler-type polynomial --lr 1e-8", "lr_end (1e-07) must be smaller than initial lr"},
      {"--lr-scheduler-type polynomial --lr-warmup-steps 5", "polynomial with a warm-up of all 5 steps"},
      {"--config " + decay + " --lr-scheduler-type linear",
       "--lr-scheduler-type linear conflicts with the DeepSpeed scheduler section"},
  };
  for (const auto& [flags, expected] : cases) {
    std::string output;
    run_report("--steps 5 --warmup 1 " + flags, 2, &output);
    EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << flags << ": " << output;
    EXPECT_NE(output.find(expected), std::string::npos) << flags << ": " << output;
  }
  std::remove(decay.c_str());
}
