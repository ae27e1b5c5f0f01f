// FSDP1 / FSDP2 fp16 under accelerate's `mixed_precision: fp16` (issue 24): the ShardedGradScaler
// path (backends/fsdp_family/sharded_grad_scaler.*) end to end against real FSDP + ShardedGradScaler on
// CPU (`zerobench crossval --precision fp16`, scripts/crossval/run_fsdp1.py / run_fsdp2.py): losses
// and grad norms within the low-precision bound (bitwise here), the scale / overflow / skipped
// sequence exactly equal (FSDP2's fp16 loss overflows GradScaler's first scale: a skipped step on
// both sides), the collectives equal. The loss-scale comparison must be able to fail: a planted
// difference in the reference's sequence is reported (bench/crossval/crossval_loss_scale.cpp).
#include <gtest/gtest.h>

#include <fstream>

#include "bench/crossval/crossval_loss_scale.hpp"
#include "tests/run_binary.hpp"

using nlohmann::json;

namespace {
json read(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}
}  // namespace

TEST(FsdpFp16, CrossvalAgainstRealFsdpAndShardedGradScaler) {
  for (const std::string backend : {"fsdp", "fsdp2"}) {
    SCOPED_TRACE(backend);
    const auto out = zb::test_support::temp_path(backend + "_fp16_crossval.json");
    const auto r = zb::test_support::run_zerobench("crossval --backend " + backend +
                                                   " --precision fp16 --nproc 2 --model tiny --layers 2 --steps 4 "
                                                   "--warmup 1 --micro-batch 2 --seq-len 32 --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto doc = read(out);
    const auto& mode = doc["modes"][0];
    EXPECT_EQ(mode["precision"], "fp16");
    EXPECT_LE(mode["max_loss_rel_diff"].get<double>(), mode["tolerance"]["loss_rel"].get<double>());
    EXPECT_LE(mode["max_grad_norm_rel_diff"].get<double>(), mode["tolerance"]["grad_norm_rel"].get<double>());
    ASSERT_TRUE(mode.contains("loss_scale")) << mode.dump();
    EXPECT_TRUE(mode["loss_scale"]["equal"].get<bool>()) << mode["loss_scale"].dump();
    for (const auto& s : mode["loss_scale"]["steps"]) EXPECT_EQ(s["zerobench"]["kind"], "grad_scaler");
    // FSDP2 casts the loss to fp16 (output_dtype): 2**16's gradient into it is inf, step 0 skipped.
    EXPECT_EQ(mode["loss_scale"]["skipped_steps"].get<int>(), backend == "fsdp2" ? 1 : 0);
    EXPECT_EQ(mode["loss_scale"]["steps"][0]["zerobench"]["scale"], 65536.0);
  }
}

TEST(FsdpFp16, LossScaleComparisonFailsOnAPlantedDifference) {
  const json step = {{"kind", "grad_scaler"}, {"scale", 65536.0}, {"overflow", true}, {"skipped", true},
                     {"next_scale", 32768.0}};
  const json report = {{"steps", json::array({{{"loss_scale", step}}})}};
  const auto typed = zb::reports::run_report_from_json(report);  // zerobench's side, as the record reads it
  std::vector<std::string> reasons;
  auto same = zb::bench::compare_loss_scale(typed, {report}, reasons);
  EXPECT_TRUE(same.doc["equal"].get<bool>());
  EXPECT_TRUE(reasons.empty());
  EXPECT_EQ(same.skipped_by_both.count(0), 1u);
  for (const char* field : {"scale", "overflow", "skipped", "next_scale"}) {
    json planted = report;
    auto& v = planted["steps"][0]["loss_scale"][field];
    v = v.is_boolean() ? json(!v.get<bool>()) : json(v.get<double>() * 2);
    reasons.clear();
    const auto differ = zb::bench::compare_loss_scale(typed, {planted}, reasons);
    EXPECT_FALSE(differ.doc["equal"].get<bool>()) << field;
    EXPECT_EQ(reasons.size(), 1u) << field;
  }
  // A side without any loss scale where the other has one is a difference too.
  reasons.clear();
  const json none = {{"steps", json::array({json::object()})}};
  EXPECT_FALSE(zb::bench::compare_loss_scale(typed, {none}, reasons).doc["equal"].get<bool>());
}
