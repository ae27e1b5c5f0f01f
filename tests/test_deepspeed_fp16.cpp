// DeepSpeed's fp16 loss scaling in the ZeRO engines (issue 24): ZeRO-3 (backends/zero3/zero3_fp16.cpp,
// stage3.py) and ZeRO-1/2 (backends/zero12/zero12_fp16.cpp, stage_1_and_2.py) — the same scaler and
// the same skipped-step contract, each checked by the same tests.
// DeepSpeed's fp16 does not run on a CPU ("Type fp16 is not supported on your device"), so there
// is no end-to-end crossval: runs whose overflows happen (2**20, a large initial_scale_power, overflows
// fp16 in the first steps; an inf planted into one rank's gradient partitions at a chosen step
// through ZEROBENCH_TEST_FP16_PLANT_INF) must give the scale / overflow / skipped sequence of
// LossScaler::deepspeed fed the run's overflow flags AND of DeepSpeed's own DynamicLossScaler fed
// the same flags (scripts/crossval/loss_scaler_reference.py); a skipped step must leave the
// partitions, fp32 masters and AdamW states (step counter included) bitwise unchanged on every
// rank; the report must carry steps[i].loss_scale and summary.skipped_steps. Also the `fp16`
// section's keys as DeepSpeedFP16Config reads them.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <mutex>

#include "backends/backend_info.hpp"
#include "backends/common/loss_scaler.hpp"
#include "backends/zero12/zero12_options.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "config/deepspeed_config.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::common::DeepSpeedLossScaleOptions;
using backends::common::LossScaler;
using nlohmann::json;

namespace {

struct StepSeen {
  backends::LossScaleStep ls;
  double grad_norm = 0;
  bool state_unchanged = false;  // every state tensor bitwise equal before and after the step
};

// The options JSON of `backend` (zero1 | zero2 | zero3) with this fp16 section.
json fp16_options(const std::string& backend, const DeepSpeedLossScaleOptions& fp16) {
  if (backend == "zero3") {
    backends::zero3::Zero3Options o;
    o.fp16 = fp16;
    o.stage3_param_persistence_threshold = 100;  // some persistent parameters (not re-gathered after a skip)
    return backends::zero3::to_json(o);
  }
  backends::zero12::Zero12Options o;
  o.stage = backend == "zero1" ? 1 : 2;
  o.fp16 = fp16;
  o.reduce_bucket_size = 5000;  // several IPG buckets per backward
  return backends::zero12::to_json(o);
}

// Drives a `backend` fp16 engine on W thread-ranks for `steps` optimizer steps (grad_accum 2); the
// per-rank sequence of what each step did.
std::vector<std::vector<StepSeen>> drive(const std::string& backend, const DeepSpeedLossScaleOptions& fp16, int w,
                                         int steps, const std::string& plant) {
  auto spec = test_support::small_spec(2);
  spec.precision = "fp16";
  spec.options = fp16_options(backend, fp16);
  if (plant.empty()) unsetenv("ZEROBENCH_TEST_FP16_PLANT_INF");
  else setenv("ZEROBENCH_TEST_FP16_PLANT_INF", plant.c_str(), 1);
  std::vector<std::vector<StepSeen>> out(static_cast<size_t>(w));
  std::mutex m;
  test_support::run_ranks(w, [&](runtime::World& world) {
    auto engine = backends::create_engine(backend, spec, world);
    auto data = models::make_data_source("markov", spec.model.vocab, 1);
    std::vector<StepSeen> seen;
    for (int step = 0; step < steps; ++step) {
      for (int a = 0; a < 2; ++a) {
        auto b = data->samples(models::first_sample_index(step, a, 2, world.rank, w, spec.train.micro_batch),
                               spec.train.micro_batch, spec.train.seq_len);
        engine->forward_backward({b.tokens, b.targets, {}, {}}, 0.5, a == 1);
      }
      std::vector<at::Tensor> before;
      for (const auto& [name, t] : engine->state_tensors()) before.push_back(t.clone());
      StepSeen s;
      s.grad_norm = engine->optimizer_step(backends::common::configured_hyper(spec.train, 1e-3));
      s.ls = engine->loss_scale_step();
      s.state_unchanged = true;
      size_t i = 0;
      for (const auto& [name, t] : engine->state_tensors()) s.state_unchanged = s.state_unchanged && at::equal(before[i++], t);
      seen.push_back(s);
    }
    std::lock_guard<std::mutex> lock(m);
    out[size_t(world.rank)] = std::move(seen);
  });
  unsetenv("ZEROBENCH_TEST_FP16_PLANT_INF");
  return out;
}

json fp16_section(const DeepSpeedLossScaleOptions& o) { return zb::backends::common::to_json(o); }

// DeepSpeed's own class fed `overflow`: the scale before each step, and the skipped flags.
std::pair<std::vector<double>, std::vector<bool>> deepspeed_reference(const DeepSpeedLossScaleOptions& o,
                                                                      const std::vector<bool>& overflow) {
  const auto in = test_support::temp_path("ds_fp16_scaler_in.json");
  std::ofstream(in) << json{{"fp16", fp16_section(o)}, {"overflow", overflow}}.dump();
  const auto r = test_support::run_command(std::string(ZEROBENCH_PYTHON_EXE) + " " + zb::bench::source_dir() +
                                           "/scripts/crossval/loss_scaler_reference.py < " + in + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto text = r.output;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const json j = json::parse(text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1));
  std::pair<std::vector<double>, std::vector<bool>> q;
  for (const auto& v : j["scales"]) q.first.push_back(v.get<double>());
  for (const auto& v : j["skipped"]) q.second.push_back(v.get<bool>());
  return q;
}

// The run's sequence against LossScaler::deepspeed and DeepSpeed's DynamicLossScaler fed its flags.
void check_sequence(const DeepSpeedLossScaleOptions& o, const std::vector<std::vector<StepSeen>>& ranks) {
  const auto& r0 = ranks[0];
  std::vector<bool> flags;
  std::vector<double> scales;
  std::vector<bool> skipped;
  for (const auto& s : r0) {
    flags.push_back(s.ls.overflow);
    scales.push_back(s.ls.scale);
    skipped.push_back(s.ls.skipped);
  }
  // Every rank saw the same thing (the overflow flag is all-reduced with MAX).
  for (size_t r = 1; r < ranks.size(); ++r)
    for (size_t i = 0; i < r0.size(); ++i) {
      EXPECT_EQ(ranks[r][i].ls.overflow, r0[i].ls.overflow) << "rank " << r << " step " << i;
      EXPECT_EQ(ranks[r][i].ls.scale, r0[i].ls.scale) << "rank " << r << " step " << i;
    }
  auto ours = LossScaler::deepspeed(o);
  for (size_t i = 0; i < r0.size(); ++i) {
    EXPECT_TRUE(r0[i].ls.enabled);
    EXPECT_EQ(r0[i].ls.kind, "dynamic");
    EXPECT_EQ(r0[i].ls.scale, ours.scale()) << "step " << i;
    ours.update(flags[i]);
    EXPECT_EQ(r0[i].ls.next_scale, ours.scale()) << "step " << i;
    EXPECT_EQ(r0[i].ls.skipped, flags[i]) << "step " << i;
  }
  const auto ref = deepspeed_reference(o, flags);
  EXPECT_EQ(scales, ref.first);
  EXPECT_EQ(skipped, ref.second);
  // The comparison can fail: DeepSpeed's class with hysteresis 1 instead gives another sequence.
  auto other = o;
  other.hysteresis = o.hysteresis == 1 ? 2 : 1;
  EXPECT_NE(scales, deepspeed_reference(other, flags).first) << "the flags do not tell the two scalers apart";
  for (const auto& rank : ranks)
    for (size_t i = 0; i < rank.size(); ++i) {
      const auto& s = rank[i];
      if (s.ls.skipped) {
        EXPECT_TRUE(s.state_unchanged) << "a skipped step changed the partitions, masters or AdamW states";
        EXPECT_TRUE(std::isinf(s.grad_norm));  // stage3.py / stage_1_and_2.py: _global_grad_norm = inf
      } else {
        EXPECT_FALSE(s.state_unchanged) << "step " << i << " was not skipped but changed nothing";
        EXPECT_TRUE(std::isfinite(s.grad_norm)) << "step " << i;
      }
    }
}

config::DeepSpeedConfig read_ds(const json& root, const std::string& precision) {
  config::TrainerArgs args;
  args.precision = precision;
  if (!precision.empty()) args.given.insert("--precision");
  args.world_size = 1;
  args.hidden = 64;
  return config::read_deepspeed_json(root, args, config::AutoFill::kHfTrainer, [](const config::DeepSpeedStage&) {});
}

}  // namespace

class DeepSpeedFp16 : public ::testing::TestWithParam<std::string> {};

// An inf planted into rank 1's gradient partitions at step 2 only (a scale small enough that fp16
// never overflows by itself): every rank skips step 2, the scale sequence is DeepSpeed's.
TEST_P(DeepSpeedFp16, PlantedOverflowOnOneRankSkipsTheStepOnEveryRank) {
  DeepSpeedLossScaleOptions o;
  o.initial_scale_power = 8;
  o.loss_scale_window = 2;  // the scale grows within the run
  o.hysteresis = 1;
  const auto ranks = drive(GetParam(), o, 2, 6, "2@1");
  std::vector<bool> flags;
  for (const auto& s : ranks[0]) flags.push_back(s.ls.overflow);
  EXPECT_EQ(flags, (std::vector<bool>{false, false, true, false, false, false}));
  check_sequence(o, ranks);
}

// 2**20 overflows fp16 gradients in the first steps (the tiny model's fit below 2**18);
// hysteresis 2 delays the first backoff.
TEST_P(DeepSpeedFp16, LargeInitialScaleOverflowsUntilTheScaleComesDown) {
  DeepSpeedLossScaleOptions o;
  o.initial_scale_power = 20;
  o.hysteresis = 2;
  const auto ranks = drive(GetParam(), o, 2, 8, "");
  int overflows = 0, applied = 0;
  for (const auto& s : ranks[0]) (s.ls.overflow ? overflows : applied) += 1;
  EXPECT_GE(overflows, 2) << "2**20 did not overflow fp16: the test no longer exercises the skip";
  EXPECT_GE(applied, 1) << "the scale never came down far enough for a step";
  EXPECT_TRUE(ranks[0][0].ls.overflow);
  check_sequence(o, ranks);
}

INSTANTIATE_TEST_SUITE_P(Engines, DeepSpeedFp16, ::testing::Values("zero3", "zero2", "zero1"));

TEST(DeepSpeedFp16Config, SectionAsDeepSpeedFP16ConfigReadsIt) {
  const json base = {{"zero_optimization", {{"stage", 3}}}, {"train_micro_batch_size_per_gpu", "auto"}};
  auto with = [&](json fp16) {
    auto j = base;
    j["fp16"] = std::move(fp16);
    return j;
  };
  // "auto" is HF's args.fp16: --precision fp16 turns it on, with the section's scaler keys.
  auto c = read_ds(with({{"enabled", "auto"}, {"loss_scale", 0}, {"initial_scale_power", 12}, {"hysteresis", 3},
                         {"loss_scale_window", 50}, {"min_loss_scale", 2}, {"consecutive_hysteresis", true}}),
                   "fp16");
  EXPECT_EQ(c.precision, "fp16");
  EXPECT_EQ(c.fp16.initial_scale_power, 12);
  EXPECT_EQ(c.fp16.hysteresis, 3);
  EXPECT_EQ(c.fp16.loss_scale_window, 50);
  EXPECT_EQ(c.fp16.min_loss_scale, 2);
  EXPECT_TRUE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(read_ds(with({{"enabled", "auto"}}), "").precision, "fp32");      // args.fp16 false
  EXPECT_EQ(read_ds(with({{"enabled", true}, {"loss_scale", 128}}), "").precision, "fp16");
  EXPECT_EQ(read_ds(with({{"enabled", true}, {"loss_scale", 128}}), "").fp16.loss_scale, 128);
  // Refused, one line naming the key: extra keys (extra="forbid"), bad values, fp16 with bf16.
  for (const auto& bad : {with({{"enabled", true}, {"opt_level", "O2"}}),
                          with({{"enabled", true}, {"loss_scale", -1}}),
                          with({{"enabled", true}, {"loss_scale", true}}),
                          with({{"enabled", true}, {"loss_scale_window", 0}}),
                          with({{"enabled", true}, {"min_loss_scale", 0}}),
                          with({{"enabled", true}, {"hysteresis", 1.5}}),
                          with({{"enabled", true}, {"fp16_master_weights_and_grads", true}})}) {
    EXPECT_THROW(read_ds(bad, ""), UsageError) << bad.dump();
  }
  auto both = with({{"enabled", true}});
  both["bf16"] = {{"enabled", true}};
  EXPECT_THROW(read_ds(both, ""), UsageError);
  // An explicit enabled that the flag contradicts: transformers' fill_match refuses it.
  EXPECT_THROW(read_ds(with({{"enabled", false}}), "fp16"), UsageError);
  EXPECT_THROW(read_ds(with({{"enabled", true}}), "fp32"), UsageError);
  // No fp16 section under HF's Trainer with --precision fp16: accelerate's set_mixed_precision adds
  // {"enabled": true, "auto_cast": true}, so the run is fp16 at DeepSpeed's default loss scaling
  // (it was refused as "DeepSpeed would not train in fp16"); a section without "enabled" is still
  // refused (accelerate adds only a missing section, and DeepSpeed's default is off).
  const auto added = read_ds(base, "fp16");
  EXPECT_EQ(added.precision, "fp16");
  EXPECT_EQ(added.fp16.initial_scale_power, 16);
  EXPECT_EQ(added.fp16.loss_scale_window, 1000);
  EXPECT_EQ(added.fp16.hysteresis, 2);
  EXPECT_EQ(added.fp16.min_loss_scale, 1);
  bool noted = false;
  for (const auto& k : added.notes.applied) noted = noted || (k.key == "fp16" && k.note.find("set_mixed_precision") != std::string::npos);
  EXPECT_TRUE(noted);
  EXPECT_THROW(read_ds(with({{"loss_scale", 0}}), "fp16"), UsageError);
  // fp16 communication / accumulation dtypes are DeepSpeed's to choose: accepted.
  auto comm = with({{"enabled", "auto"}});
  comm["communication_data_type"] = "fp16";
  comm["data_types"] = {{"grad_accum_dtype", "fp16"}};
  const auto cc = read_ds(comm, "fp16");
  EXPECT_EQ(cc.communication_data_type, "fp16");
  EXPECT_EQ(cc.grad_accum_dtype, "fp16");
}

// The whole path through the binary: a DeepSpeed file of stage N with fp16 "auto", --precision
// fp16, an overflow planted at step 1: the report's steps carry the scale and the skip, the
// summary counts it, and the schedule does not advance on the skipped step.
class DeepSpeedFp16Report : public ::testing::TestWithParam<int> {};

TEST_P(DeepSpeedFp16Report, ReportCarriesTheLossScaleAndTheSkippedStep) {
  const int stage = GetParam();
  const auto ds = test_support::temp_path("ds_fp16_ds.json");
  std::ofstream(ds) << json{{"zero_optimization", {{"stage", stage}}},
                            {"train_micro_batch_size_per_gpu", "auto"},
                            {"gradient_accumulation_steps", "auto"},
                            {"gradient_clipping", "auto"},
                            {"fp16", {{"enabled", "auto"}, {"initial_scale_power", 8}, {"hysteresis", 1}}}}
                           .dump();
  const auto out = test_support::temp_path("ds_fp16_report.json");
  const auto r = test_support::run_command("ZEROBENCH_TEST_FP16_PLANT_INF=1 " + std::string(zb::test_support::zerobench_bin()) +
                                           " run --nproc 2 --model tiny --layers 2 --seq-len 32 --micro-batch 2 "
                                           "--steps 4 --warmup 1 --precision fp16 --config " + ds + " --out " + out +
                                           " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(out);
  const auto report = json::parse(f);
  const auto& steps = report["steps"];
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(report["config"]["backend"]["name"], "zero" + std::to_string(stage)) << report["config"].dump();
  EXPECT_EQ(report["summary"]["skipped_steps"], 1);
  EXPECT_EQ(report["config"]["backend"]["precision"], "fp16") << report["config"].dump();
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& l = steps[i]["loss_scale"];
    EXPECT_EQ(l["kind"], "dynamic");
    EXPECT_EQ(l["skipped"].get<bool>(), i == 1) << i;
    EXPECT_EQ(l["overflow"].get<bool>(), i == 1) << i;
    EXPECT_EQ(steps[i]["grad_norm"].is_null(), i == 1) << i;
  }
  EXPECT_EQ(steps[0]["loss_scale"]["scale"], 256.0);
  EXPECT_EQ(steps[1]["loss_scale"]["next_scale"], 128.0);  // hysteresis 1: halved at once
  // The skipped step did not advance the schedule: step 2 runs at step 1's learning rate.
  EXPECT_EQ(steps[2]["lr"], steps[1]["lr"]);
  std::remove(ds.c_str());
  std::remove(out.c_str());
}

INSTANTIATE_TEST_SUITE_P(Stages, DeepSpeedFp16Report, ::testing::Values(3, 2, 1));

// bf16 with ZeRO-1/2: check_grad_overflow (the bf16 config's default true) finds an inf, and
// stage_1_and_2.py's step returns without stepping, as for fp16, with DeepSpeed's static scale of
// 1 (CreateLossScaler for bf16): the run goes on, the step is reported skipped and the LR schedule
// does not advance; the steps without overflow carry no loss-scale record.
TEST(DeepSpeedBf16, Zero2SkipsAStepWhoseGradientsOverflow) {
  const auto out = test_support::temp_path("ds_bf16_skip_report.json");
  const auto r = test_support::run_command("ZEROBENCH_TEST_FP16_PLANT_INF=1@1 " + std::string(zb::test_support::zerobench_bin()) +
                                           " run --backend zero2 --precision bf16 --nproc 2 --model tiny --layers 2 "
                                           "--seq-len 32 --micro-batch 2 --steps 4 --warmup 1 --out " + out + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(out);
  const auto report = json::parse(f);
  const auto& steps = report["steps"];
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(report["status"]["state"], "ok");
  EXPECT_EQ(report["summary"]["skipped_steps"], 1);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].contains("loss_scale"), i == 1) << i;
    EXPECT_EQ(steps[i]["grad_norm"].is_null(), i == 1) << i;
  }
  const auto& l = steps[1]["loss_scale"];
  EXPECT_EQ(l["kind"], "static");
  EXPECT_EQ(l["scale"], 1.0);
  EXPECT_TRUE(l["overflow"].get<bool>());
  EXPECT_TRUE(l["skipped"].get<bool>());
  EXPECT_EQ(steps[2]["lr"], steps[1]["lr"]);
  std::remove(out.c_str());
}
