// test_crossval.cpp — `zerobench crossval`: the comparison logic on synthetic results (fast),
// the Python model's logits against the C++ model's, one small case per framework (W=2, tiny,
// 3 steps, grad-accum 1) against the real PyTorch FSDP1 / FSDP2 / DeepSpeed ZeRO-3, a planted
// 1% lr difference that must be reported as a disagreement, and bad input.
#include <gtest/gtest.h>

#include <fstream>

#include "backends/engine.hpp"
#include "bench/crossval_compare.hpp"
#include "reports/table.hpp"
#include "tests/run_binary.hpp"

using json = nlohmann::json;
using zb::test_support::run_zerobench;
using zb::test_support::temp_path;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

bool backend_registered(const std::string& name) {
  for (const auto& b : zb::backends::registered_backends())
    if (b.name == name) return true;
  return false;
}

// ---- synthetic results for compare_mode ----

json comm_json(int64_t ag, int64_t rs) {
  return {{"all_gather", {{"count", ag}, {"bytes", ag * 1000}}},
          {"reduce_scatter", {{"count", rs}, {"bytes", rs * 500}}},
          {"all_reduce", {{"count", 1}, {"bytes", 4}}},
          {"broadcast", {{"count", 0}, {"bytes", 0}}}};
}

struct Synthetic {
  zb::bench::CrossvalContext ctx;
  json report;
  std::vector<json> upstream;
};

Synthetic synthetic(const std::string& backend = "fsdp", const std::string& precision = "fp32") {
  Synthetic s;
  s.ctx.backend = backend;
  s.ctx.world_size = 2;
  s.ctx.spec.model = zb::models::preset("tiny");
  s.ctx.spec.precision = precision;
  s.ctx.spec.train.steps = 3;
  s.ctx.spec.train.warmup = 1;
  s.ctx.spec.options = {{"reduce_bucket_size", 1000}, {"contiguous_gradients", true}};
  const json states = {{"params", 100}, {"master_params", 0}, {"grads", 100}, {"optimizer", 200}};
  s.report = {{"steps", json::array()},
              {"summary", {{"tokens_per_gpu_per_s", {{"median", 1000.0}}}}},
              {"ranks", json::array()}};
  for (int r = 0; r < 2; ++r) {
    s.report["ranks"].push_back({{"memory", {{"model_states_bytes", states}, {"peak_rss_bytes", 1 << 20},
                                             {"peak_tracked_bytes", 1 << 19}}}});
    json up = {{"steps", json::array()},
               {"model_states_bytes", states},
               {"peak_rss_bytes", 1 << 21},
               {"upstream", {{"name", "x"}, {"version", "1"}}}};
    for (int j = 0; j < 3; ++j)
      up["steps"].push_back({{"step", j}, {"loss", 7.0 - 0.1 * j}, {"grad_norm", 0.5}, {"lr", 1e-3}, {"time_s", 0.5},
                             {"comm", {{"kinds", comm_json(5, 3)}, {"other", json::object()}}}});
    s.upstream.push_back(up);
  }
  for (int j = 0; j < 3; ++j)
    s.report["steps"].push_back({{"step", j}, {"loss", 7.0 - 0.1 * j}, {"grad_norm", 0.5}, {"lr", 1e-3}, {"time_s", 0.25},
                                 {"comm", comm_json(5, 3)}});
  return s;
}

}  // namespace

TEST(CrossvalCompare, IdenticalResultsAgreeAndReportRatios) {
  auto s = synthetic();
  const auto m = zb::bench::compare_mode(s.ctx, s.report, s.upstream);
  EXPECT_TRUE(m["verdict"]["agree"].get<bool>()) << m["verdict"].dump();
  EXPECT_TRUE(m["model_states_equal"].get<bool>());
  EXPECT_TRUE(m["comm_equal"].get<bool>());
  EXPECT_EQ(m["steps"].size(), 3u);
  EXPECT_DOUBLE_EQ(m["perf"]["throughput_ratio"].get<double>(), 1000.0 / (double(4 * 128) / 0.5));
  EXPECT_DOUBLE_EQ(m["perf"]["peak_rss_ratio"].get<double>(), 0.5);
}

TEST(CrossvalCompare, LossBeyondToleranceDisagreesAndNamesTheStep) {
  auto s = synthetic();
  s.upstream[0]["steps"][2]["loss"] = 6.8 * (1 + 4e-5);  // mean over ranks: 2e-5 relative > 1e-5
  const auto m = zb::bench::compare_mode(s.ctx, s.report, s.upstream);
  EXPECT_FALSE(m["verdict"]["agree"].get<bool>());
  ASSERT_EQ(m["verdict"]["reasons"].size(), 1u);
  EXPECT_NE(m["verdict"]["reasons"][0].get<std::string>().find("step 2: loss"), std::string::npos);
  EXPECT_TRUE(m["steps"][1]["within_tolerance"].get<bool>());
  EXPECT_FALSE(m["steps"][2]["within_tolerance"].get<bool>());
  // Within 1e-5 passes.
  s.upstream[0]["steps"][2]["loss"] = 6.8 * (1 + 1e-5);
  EXPECT_TRUE(zb::bench::compare_mode(s.ctx, s.report, s.upstream)["verdict"]["agree"].get<bool>());
}

TEST(CrossvalCompare, ModelStateDifferencesNeedAnExactExplanation) {
  auto s = synthetic("fsdp");
  // AdamW's `step` scalars (use_orig_params=True): 4 bytes per original parameter with a piece
  // in the rank's shard. tiny at W=2: the root's shard 0 holds the embedding and half the final
  // norm, shard 1 the other half and the LM head (2 each); a block's 184,576 elements split at
  // 92,288, inside w_gate: shard 0 holds attn_norm, q, k, v, o, mlp_norm, gate (7), shard 1
  // gate, up, down (3). Rank 0: 2 + 2 x 7 = 16 tensors, rank 1: 2 + 2 x 3 = 8.
  s.upstream[0]["model_states_bytes"]["optimizer_step_counters"] = 64;
  s.upstream[1]["model_states_bytes"]["optimizer_step_counters"] = 32;
  auto m = zb::bench::compare_mode(s.ctx, s.report, s.upstream);
  EXPECT_TRUE(m["verdict"]["agree"].get<bool>()) << m["verdict"].dump();
  EXPECT_FALSE(m["model_states_equal"].get<bool>());
  EXPECT_TRUE(m["model_states_differences_explained"].get<bool>());
  // A wrong amount is not explained by the same rule (one FlatParameter per unit: 12 bytes).
  for (auto& u : s.upstream) u["model_states_bytes"]["optimizer_step_counters"] = 12;
  m = zb::bench::compare_mode(s.ctx, s.report, s.upstream);
  EXPECT_FALSE(m["verdict"]["agree"].get<bool>());
  // Nor is any difference in a category zerobench reports.
  s = synthetic("fsdp");
  s.upstream[1]["model_states_bytes"]["grads"] = 104;
  m = zb::bench::compare_mode(s.ctx, s.report, s.upstream);
  EXPECT_FALSE(m["verdict"]["agree"].get<bool>());
  EXPECT_NE(m["verdict"]["reasons"][0].get<std::string>().find("rank 1 grads"), std::string::npos);
}

TEST(CrossvalCompare, UnexplainedCollectiveDifferenceDisagrees) {
  auto s = synthetic();
  s.upstream[0]["steps"][1]["comm"]["kinds"]["all_gather"]["count"] = 6;
  const auto m = zb::bench::compare_mode(s.ctx, s.report, s.upstream);
  EXPECT_FALSE(m["verdict"]["agree"].get<bool>());
  EXPECT_FALSE(m["comm_equal"].get<bool>());
  ASSERT_EQ(m["comm_differences"].size(), 1u);
  EXPECT_EQ(m["comm_differences"][0]["step"], 1);
  EXPECT_EQ(m["comm_differences"][0]["kind"], "all_gather");
  EXPECT_TRUE(m["comm_differences"][0]["explanation"].is_null());
}

TEST(CrossvalCompare, RendersMarkdownAndHtml) {
  auto s = synthetic();
  json doc = {{"backend", "fsdp"}, {"upstream", {{"name", "PyTorch FSDP1"}, {"version", "2.11.0"}}}, {"world_size", 2},
              {"model", {{"preset", "tiny"}, {"layers", 2}, {"hidden", 128}}},
              {"modes", {zb::bench::compare_mode(s.ctx, s.report, s.upstream)}},
              {"verdict", {{"agree", true}, {"reasons", json::array()}}}};
  const auto md = zb::reports::render_crossval(doc, "md");
  EXPECT_NE(md.find("crossval: zerobench fsdp vs PyTorch FSDP1 2.11.0"), std::string::npos) << md;
  EXPECT_NE(md.find("| fp32 | agree |"), std::string::npos) << md;
  EXPECT_NE(md.find("5 / 5"), std::string::npos) << md;
  const auto html = zb::reports::render_crossval(doc, "html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("AGREE"), std::string::npos);
}

// ---- against the real models and frameworks ----

TEST(Crossval, PythonModelGivesZerobenchsLogits) {
  const auto out = temp_path("logits.json");
  const auto r = run_zerobench("crossval --logits --model tiny --micro-batch 2 --seq-len 64 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto doc = read_json(out);
  ASSERT_EQ(doc["results"].size(), 2u);
  for (const auto& res : doc["results"]) {
    EXPECT_TRUE(res["agree"].get<bool>()) << res.dump();
    EXPECT_LE(res["max_abs_diff"].get<double>(), res["tolerance_abs"].get<double>());
    EXPECT_EQ(res["shape"], json({2, 64, 2048}));
  }
}

namespace {
// One framework case: W=2, tiny, 3 steps, grad-accum 1; returns the crossval document.
json run_case(const std::string& backend, const std::string& precision, const std::string& extra = "",
              int expected_exit = 0) {
  const auto out = temp_path(backend + "_" + precision + ".json");
  const auto r = run_zerobench("crossval --backend " + backend + " --precision " + precision +
                               " --nproc 2 --model tiny --steps 3 --grad-accum 1 --out " + out + " " + extra);
  EXPECT_EQ(r.exit_code, expected_exit) << r.output;
  return read_json(out);
}

void expect_agreement(const json& doc, const std::string& upstream_name) {
  EXPECT_TRUE(doc["verdict"]["agree"].get<bool>()) << doc["verdict"].dump(2);
  EXPECT_NE(doc["upstream"]["name"].get<std::string>().find(upstream_name), std::string::npos) << doc["upstream"];
  for (const auto& mode : doc["modes"]) {
    ASSERT_EQ(mode["steps"].size(), 3u);
    const double tol = mode["tolerance"]["loss_rel"].get<double>();
    for (const auto& s : mode["steps"]) {
      EXPECT_LE(s["loss_rel_diff"].get<double>(), tol) << s.dump();
      EXPECT_LE(s["grad_norm_rel_diff"].get<double>(), mode["tolerance"]["grad_norm_rel"].get<double>()) << s.dump();
    }
    EXPECT_TRUE(mode["model_states_differences_explained"].get<bool>()) << mode["model_states"].dump(1);
    EXPECT_TRUE(mode["comm_differences_explained"].get<bool>()) << mode["comm_differences"].dump(1);
    EXPECT_GT(mode["perf"]["upstream_tokens_per_gpu_per_s"].get<double>(), 0);
  }
}
}  // namespace

TEST(Crossval, FsdpAgreesWithPyTorchFsdp1) {
  const auto doc = run_case("fsdp", "fp32");
  expect_agreement(doc, "FSDP1");
  for (const auto& s : doc["modes"][0]["steps"]) EXPECT_LE(s["loss_rel_diff"].get<double>(), 1e-5);
}

TEST(Crossval, Zero3AgreesWithDeepSpeed) {
  const auto doc = run_case("zero3", "fp32");
  expect_agreement(doc, "DeepSpeed");
  EXPECT_EQ(doc["upstream"]["version"], "0.19.8");
}

TEST(Crossval, Fsdp2AgreesWithPyTorchFsdp2) {
  ASSERT_TRUE(backend_registered("fsdp2"));
  const auto doc = run_case("fsdp2", "fp32");
  expect_agreement(doc, "FSDP2");
  EXPECT_EQ(doc["backend"], "fsdp2");
}

TEST(Crossval, PlantedLrDifferenceIsReportedAsADisagreement) {
  const auto doc = run_case("fsdp", "fp32", "--plant-lr-scale 1.01", /*expected_exit=*/1);
  EXPECT_FALSE(doc["verdict"]["agree"].get<bool>());
  const auto& steps = doc["modes"][0]["steps"];
  EXPECT_LE(steps[0]["loss_rel_diff"].get<double>(), 1e-5);  // the lr acts from the first update on
  EXPECT_GT(steps[2]["loss_rel_diff"].get<double>(), 1e-5);
  EXPECT_NEAR(steps[1]["lr"].get<double>() / steps[1]["upstream_lr"].get<double>(), 1.01, 1e-12);
  bool loss_reason = false;
  for (const auto& r : doc["verdict"]["reasons"]) loss_reason = loss_reason || r.get<std::string>().find("loss") != std::string::npos;
  EXPECT_TRUE(loss_reason) << doc["verdict"].dump();
}

TEST(Crossval, BadInputExitsTwoWithOneClearLine) {
  const auto out = temp_path("bad.json");
  auto r = run_zerobench("crossval --backend nope --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'nope'"), std::string::npos) << r.output;
  r = run_zerobench("crossval --backend ddp --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_zerobench("crossval --backend fsdp --precision bf16 --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bf16"), std::string::npos) << r.output;
  r = run_zerobench("crossval --backend fsdp --python /nonexistent/python --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/python"), std::string::npos) << r.output;
  r = run_zerobench("crossval --backend fsdp2 --precision bf16 --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bf16"), std::string::npos) << r.output;
}
