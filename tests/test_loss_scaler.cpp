// fp16 loss scaling (issue 24): backends/common/loss_scaler against the frameworks' own code on
// planted overflow sequences — DeepSpeed's DynamicLossScaler / LossScaler driven from Python
// (scripts/crossval/loss_scaler_reference.py; DeepSpeed's fp16 does not run on a CPU, its scaler
// class does) and torch's GradScaler update kernel (at::_amp_update_scale_, what GradScaler.update
// and FSDP's ShardedGradScaler call) in-process. Every step's scale and skipped flag must be equal;
// a scaler with other options than the reference's must be seen to differ (the check can fail).
#include <gtest/gtest.h>

#include <fstream>

#include <ATen/ATen.h>

#include "backends/common/loss_scaler.hpp"
#include "tests/run_binary.hpp"

using zb::backends::common::DeepSpeedLossScaleOptions;
using zb::backends::common::GradScalerOptions;
using zb::backends::common::LossScaler;
using nlohmann::json;

namespace {
struct Sequence {
  std::vector<double> scales;  // before each step
  std::vector<bool> skipped;
  double final_scale = 0;
  std::string error;
};

Sequence run_ours(LossScaler s, const std::vector<bool>& overflow) {
  Sequence q;
  for (bool o : overflow) {
    q.scales.push_back(s.scale());
    q.skipped.push_back(o && s.dynamic());
    try {
      s.update(o);
    } catch (const std::exception& e) {
      q.error = e.what();
      break;
    }
  }
  q.final_scale = s.scale();
  return q;
}

json fp16_section(const DeepSpeedLossScaleOptions& o) { return zb::backends::common::to_json(o); }

Sequence run_deepspeed(const json& fp16, const std::vector<bool>& overflow) {
  const auto in = zb::test_support::temp_path("loss_scaler_in.json");
  std::ofstream(in) << json{{"fp16", fp16}, {"overflow", overflow}}.dump();
  const auto r = zb::test_support::run_command(std::string(ZEROBENCH_PYTHON_EXE) + " " + zb::bench::source_dir() +
                                               "/scripts/crossval/loss_scaler_reference.py < " + in + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // DeepSpeed's import prints its accelerator warning on stdout: the answer is the last line.
  auto out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const json j = json::parse(out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1));
  Sequence q;
  for (const auto& v : j["scales"]) q.scales.push_back(v.get<double>());
  for (const auto& v : j["skipped"]) q.skipped.push_back(v.get<bool>());
  q.final_scale = j["final_scale"];
  q.error = j["error"].is_null() ? "" : j["error"].get<std::string>();
  return q;
}

// A sequence that exercises hysteresis, the window's growth, repeated backoff and the floor.
std::vector<bool> planted() {
  std::vector<bool> o = {false, true, true, false, false, false, false, true, false, true, true, false};
  for (int i = 0; i < 7; ++i) o.push_back(false);
  for (int i = 0; i < 6; ++i) o.push_back(true);
  return o;
}
}  // namespace

TEST(LossScaler, DeepSpeedDynamicScalerEqualsDeepSpeedsOwnClassStepByStep) {
  std::vector<DeepSpeedLossScaleOptions> cases(4);
  cases[0].initial_scale_power = 4, cases[0].loss_scale_window = 3;                      // hysteresis 2
  cases[1] = cases[0], cases[1].consecutive_hysteresis = true;                          // refilled each good step
  cases[2] = cases[0], cases[2].hysteresis = 1, cases[2].min_loss_scale = 4;            // floor reached: DeepSpeed raises
  cases[3].loss_scale = 128;                                                            // static: never skips
  for (const auto& c : cases) {
    const auto ours = run_ours(LossScaler::deepspeed(c), planted());
    const auto ref = run_deepspeed(fp16_section(c), planted());
    EXPECT_EQ(ours.scales, ref.scales) << fp16_section(c).dump();
    EXPECT_EQ(ours.skipped, ref.skipped) << fp16_section(c).dump();
    EXPECT_EQ(ours.final_scale, ref.final_scale);
    EXPECT_EQ(ours.error.empty(), ref.error.empty()) << ours.error << " | " << ref.error;
  }
  // The DeepSpeed JSON defaults (DeepSpeedFP16Config): 2**16, window 1000, hysteresis 2, min 1.
  EXPECT_EQ(LossScaler::deepspeed({}).scale(), 65536.0);
  // The comparison can fail: a scaler built with hysteresis 1 against DeepSpeed's with 2.
  auto wrong = cases[0];
  wrong.hysteresis = 1;
  EXPECT_NE(run_ours(LossScaler::deepspeed(wrong), planted()).scales,
            run_deepspeed(fp16_section(cases[0]), planted()).scales);
}

TEST(LossScaler, GradScalerEqualsTorchsUpdateKernelStepByStep) {
  for (const GradScalerOptions& o : {GradScalerOptions{8.0, 2.0, 0.5, 3}, GradScalerOptions{65536.0, 2.0, 0.5, 2000},
                                     GradScalerOptions{3.0e38, 2.0, 0.25, 2}}) {  // growth past fp32 max is refused
    auto scale = at::full({1}, o.init_scale, at::kFloat);
    auto tracker = at::zeros({1}, at::kInt);
    LossScaler ours = LossScaler::grad_scaler(o);
    auto seq = planted();
    for (int i = 0; i < 10; ++i) seq.push_back(false);
    for (bool overflow : seq) {
      ASSERT_EQ(ours.scale(), double(scale.item<float>())) << o.init_scale;
      at::_amp_update_scale_(scale, tracker, at::full({1}, overflow ? 1.0 : 0.0, at::kFloat), o.growth_factor,
                             o.backoff_factor, o.growth_interval);
      ours.update(overflow);
      EXPECT_EQ(ours.state()["growth_tracker"].get<int64_t>(), int64_t(tracker.item<int>()));
    }
    EXPECT_EQ(ours.scale(), double(scale.item<float>()));
  }
  EXPECT_EQ(LossScaler::grad_scaler({}).scale(), 65536.0);  // torch.amp.GradScaler(init_scale=2.0**16)
}
