// test_crossval_compare.cpp — `zerobench crossval`'s comparison on synthetic results (fast, no
// framework runs): agreement needs exactly W ranks and T steps on each side, finite losses and
// grad norms, every model-state category on both sides (or a rule that predicts the one-sided
// value exactly, from zerobench's resolved options), and every rank's collectives of every kind.
// Each test plants one fault and checks the verdict names it. Also: the README / docs crossval
// table regenerates byte for byte from the committed documents.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "bench/crossval/crossval_compare.hpp"
#include "reports/crossval_table.hpp"
#include "reports/table.hpp"
#include "tests/run_binary.hpp"

using json = nlohmann::json;

namespace {

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

// Two ranks, three steps, both sides identical: the baseline every test plants one fault in.
Synthetic synthetic(const std::string& backend = "fsdp", const std::string& precision = "fp32") {
  Synthetic s;
  s.ctx.backend = backend;
  s.ctx.world_size = 2;
  s.ctx.spec.model = zb::models::preset("tiny");
  s.ctx.spec.precision = precision;
  s.ctx.spec.train.steps = 3;
  s.ctx.spec.train.warmup = 1;
  s.ctx.spec.options = {{"reduce_bucket_size", 1000}, {"contiguous_gradients", true}};
  const json states = {{"params", 100}, {"master_params", 0}, {"grads", 100}, {"optimizer", 200}, {"buffers", 0}};
  s.report = {{"steps", json::array()},
              {"summary", {{"tokens_per_gpu_per_s", {{"median", 1000.0}}}}},
              {"config", {{"backend", {{"name", backend}, {"options", {{"sub_groups", 1}}}}}}},
              {"ranks", json::array()}};
  for (int r = 0; r < 2; ++r) {
    json comm_steps = json::array();
    for (int j = 0; j < 3; ++j) comm_steps.push_back(comm_json(5, 3));
    json hashes = json::array();
    for (int j = 0; j < 3; ++j) hashes.push_back("sha" + std::to_string(10 * r + j));
    s.report["ranks"].push_back({{"rank", r},
                                 {"memory", {{"model_states_bytes", states}, {"peak_rss_bytes", 1 << 20},
                                             {"peak_tracked_bytes", 1 << 19}}},
                                 {"comm_steps", comm_steps},
                                 {"batch_sha256", hashes}});
    json up = {{"rank", r},
               {"world_size", 2},
               {"steps", json::array()},
               {"model_states_bytes", states},
               {"peak_rss_bytes", 1 << 21},
               {"upstream", {{"name", "x"}, {"version", "1"}}}};
    for (int j = 0; j < 3; ++j)
      up["steps"].push_back({{"step", j}, {"loss", 7.0 - 0.1 * j}, {"grad_norm", 0.5}, {"lr", 1e-3}, {"time_s", 0.5},
                             {"batch_sha256", "sha" + std::to_string(10 * r + j)},
                             {"comm", {{"kinds", comm_json(5, 3)}, {"other", json::object()}}}});
    s.upstream.push_back(up);
  }
  for (int j = 0; j < 3; ++j)
    s.report["steps"].push_back({{"step", j}, {"loss", 7.0 - 0.1 * j}, {"grad_norm", 0.5}, {"lr", 1e-3}, {"time_s", 0.25},
                                 {"comm", comm_json(5, 3)}});
  return s;
}

json compare(const Synthetic& s) {
  return zb::bench::compare_mode(s.ctx, zb::reports::run_report_from_json(s.report), s.upstream);
}

// The verdict disagrees and one of its reasons contains `needle`.
void expect_disagreement(const json& m, const std::string& needle) {
  EXPECT_FALSE(m["verdict"]["agree"].get<bool>()) << "planted: " << needle;
  bool found = false;
  for (const auto& r : m["verdict"]["reasons"]) found = found || r.get<std::string>().find(needle) != std::string::npos;
  EXPECT_TRUE(found) << "no reason names '" << needle << "': " << m["verdict"].dump(1);
}

}  // namespace

TEST(CrossvalCompare, IdenticalResultsAgreeAndReportRatios) {
  const auto m = compare(synthetic());
  EXPECT_TRUE(m["verdict"]["agree"].get<bool>()) << m["verdict"].dump();
  EXPECT_TRUE(m["model_states_equal"].get<bool>());
  EXPECT_TRUE(m["comm_equal"].get<bool>());
  EXPECT_EQ(m["comm_ranks_compared"], 2);
  EXPECT_EQ(m["steps"].size(), 3u);
  EXPECT_DOUBLE_EQ(m["perf"]["throughput_ratio"].get<double>(), 1000.0 / (double(4 * 128) / 0.5));
  EXPECT_DOUBLE_EQ(m["perf"]["peak_rss_ratio"].get<double>(), 0.5);
}

TEST(CrossvalCompare, LossBeyondToleranceDisagreesAndNamesTheStep) {
  auto s = synthetic();
  s.upstream[0]["steps"][2]["loss"] = 6.8 * (1 + 4e-5);  // mean over ranks: 2e-5 relative > 1e-5
  auto m = compare(s);
  expect_disagreement(m, "step 2: loss");
  EXPECT_EQ(m["verdict"]["reasons"].size(), 1u);
  EXPECT_TRUE(m["steps"][1]["within_tolerance"].get<bool>());
  EXPECT_FALSE(m["steps"][2]["within_tolerance"].get<bool>());
  s.upstream[0]["steps"][2]["loss"] = 6.8 * (1 + 1e-5);  // within 1e-5 passes
  EXPECT_TRUE(compare(s)["verdict"]["agree"].get<bool>());
}

// A backend that measured its crossvals bitwise declares it (CrossvalReference::measured_bound,
// docs/crossval.md "Tolerances"): one ulp of grad norm is then a disagreement that the generic
// bf16 bound (2^-4) lets through. Generic everywhere else, and on CUDA.
TEST(CrossvalCompare, MeasuredBoundsHoldBitwiseBackendsToTheLastBit) {
  using zb::bench::tolerance_for;
  for (const char* backend : {"zero1", "zero2"})
    for (const char* precision : {"fp32", "bf16"}) {
      const auto t = tolerance_for(backend, precision, 5, "cpu");
      EXPECT_EQ(t.loss_rel, 0.0) << backend << " " << precision;
      EXPECT_EQ(t.grad_norm_rel, 0.0) << backend << " " << precision;
      EXPECT_NE(t.basis.find("bitwise"), std::string::npos) << t.basis;
    }
  EXPECT_EQ(tolerance_for("zero3", "bf16", 5, "cpu").grad_norm_rel, 0.0);
  EXPECT_EQ(tolerance_for("zero3", "fp32", 5, "cpu").grad_norm_rel, 1e-5);  // not the same arithmetic
  EXPECT_EQ(tolerance_for("fsdp", "mixed", 5, "cpu").grad_norm_rel, std::ldexp(1.0, -4));
  const auto cuda = tolerance_for("zero2", "bf16", 5, "cuda");
  EXPECT_EQ(cuda.grad_norm_rel, std::ldexp(1.0, -4));
  EXPECT_FALSE(cuda.measured_on_device);

  auto s = synthetic("zero2", "bf16");
  EXPECT_TRUE(compare(s)["verdict"]["agree"].get<bool>()) << compare(s)["verdict"].dump();
  s.upstream[0]["steps"][1]["grad_norm"] = std::nextafter(0.5, 1.0);
  expect_disagreement(compare(s), "step 1: grad norm");
  auto generic = synthetic("fsdp", "mixed");
  generic.upstream[0]["steps"][1]["grad_norm"] = std::nextafter(0.5, 1.0);
  EXPECT_TRUE(compare(generic)["verdict"]["agree"].get<bool>());
}

// A NaN compares false against every bound (`d > tol` is false): it must be caught before.
TEST(CrossvalCompare, NonFiniteLossOrGradNormAnywhereDisagrees) {
  auto s = synthetic();
  s.upstream[1]["steps"][1]["loss"] = "nan";  // how the Python runners write NaN
  auto m = compare(s);
  expect_disagreement(m, "step 1: upstream rank 1 loss nan (not finite)");
  EXPECT_FALSE(m["steps"][1]["within_tolerance"].get<bool>());
  EXPECT_FALSE(m["all_finite"].get<bool>());

  s = synthetic();
  s.upstream[0]["steps"][0]["grad_norm"] = "inf";
  expect_disagreement(compare(s), "step 0: upstream rank 0 grad norm inf (not finite)");

  s = synthetic();
  s.report["steps"][2]["loss"] = nullptr;  // nlohmann writes NaN and Inf as null
  expect_disagreement(compare(s), "step 2: zerobench loss nan (not finite)");

  s = synthetic();  // NaN on both sides is still a disagreement
  s.report["steps"][1]["grad_norm"] = nullptr;
  for (auto& u : s.upstream) u["steps"][1]["grad_norm"] = "nan";
  expect_disagreement(compare(s), "step 1: zerobench grad norm nan (not finite)");

  s = synthetic();
  s.upstream[1]["steps"][2].erase("loss");  // a missing value is not a pass either
  expect_disagreement(compare(s), "step 2: upstream rank 1 loss nan (not finite)");
}

// Issue 35: the lr of every step is compared to the bit on every rank (both sides compute the
// schedule in double); one step's difference, however small, is a disagreement naming the step
// and both values, even when the losses and grad norms agree.
TEST(CrossvalCompare, AnLrThatDiffersInOneStepDisagreesNamingTheStepAndBothValues) {
  auto s = synthetic();
  EXPECT_TRUE(compare(s)["lr_equal"].get<bool>());
  s.upstream[1]["steps"][1]["lr"] = std::nextafter(1e-3, 1.0);  // one ulp, one rank, one step
  auto m = compare(s);
  expect_disagreement(m, "step 1: lr 0.001 vs upstream rank 1 0.0010000000000000002");
  EXPECT_EQ(m["verdict"]["reasons"].size(), 1u) << m["verdict"].dump(1);
  EXPECT_FALSE(m["lr_equal"].get<bool>());
  EXPECT_TRUE(m["steps"][0]["lr_equal"].get<bool>());
  EXPECT_FALSE(m["steps"][1]["lr_equal"].get<bool>());
  EXPECT_TRUE(m["steps"][2]["lr_equal"].get<bool>());

  s = synthetic();  // the lr zerobench reports for a step, planted 0.165 x (the 0.00165 vs 0.003)
  s.report["steps"][2]["lr"] = 0.00165;
  for (auto& u : s.upstream) u["steps"][2]["lr"] = 0.003;
  m = compare(s);
  expect_disagreement(m, "step 2: lr 0.00165 vs upstream rank 0 0.003");
  expect_disagreement(m, "step 2: lr 0.00165 vs upstream rank 1 0.003");

  s = synthetic();  // a side that does not report its lr cannot agree
  s.upstream[0]["steps"][0].erase("lr");
  expect_disagreement(compare(s), "step 0: lr 0.001 vs upstream rank 0 nan");
}

// Every rank's step input (the SHA-256 of its batches) must be the reference's: a batch that
// differs on one rank in one step, or a side that does not report it, is a disagreement.
TEST(CrossvalCompare, ABatchThatDiffersOnOneRankInOneStepDisagrees) {
  auto s = synthetic();
  EXPECT_TRUE(compare(s)["batches_equal"].get<bool>());
  s.upstream[1]["steps"][2]["batch_sha256"] = "sha99";
  auto m = compare(s);
  expect_disagreement(m, "rank 1 step 2: batch sha256 sha12 vs upstream sha99 (the two sides trained on different data)");
  EXPECT_EQ(m["verdict"]["reasons"].size(), 1u) << m["verdict"].dump(1);
  EXPECT_FALSE(m["batches_equal"].get<bool>());
  s = synthetic();
  s.report["ranks"][0].erase("batch_sha256");
  expect_disagreement(compare(s), "rank 0 step 0: batch sha256 missing vs upstream sha0");
}

TEST(CrossvalCompare, EachSideMustReportExactlyWRanksAndTSteps) {
  auto s = synthetic();
  s.upstream.pop_back();  // a missing rank
  auto m = compare(s);
  expect_disagreement(m, "upstream reports 1 ranks, expected 2");
  EXPECT_FALSE(m["model_states_equal"].get<bool>());

  s = synthetic();
  s.report["ranks"].erase(1);
  expect_disagreement(compare(s), "zerobench reports 1 ranks, expected 2");

  s = synthetic();
  s.upstream.push_back(s.upstream.back());  // an extra rank
  expect_disagreement(compare(s), "upstream reports 3 ranks, expected 2");

  s = synthetic();
  std::swap(s.upstream[0], s.upstream[1]);  // rank files out of order
  expect_disagreement(compare(s), "upstream rank file 0 says rank 1 of 2");

  s = synthetic();
  s.upstream[1]["steps"].erase(2);
  expect_disagreement(compare(s), "upstream rank 1 reports 2 steps, expected 3");

  s = synthetic();
  s.report["steps"].erase(2);
  expect_disagreement(compare(s), "zerobench reports 2 steps, expected 3");

  s = synthetic();
  s.upstream.clear();
  expect_disagreement(compare(s), "upstream reports 0 ranks, expected 2");
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
  auto m = compare(s);
  EXPECT_TRUE(m["verdict"]["agree"].get<bool>()) << m["verdict"].dump();
  EXPECT_FALSE(m["model_states_equal"].get<bool>());
  EXPECT_TRUE(m["model_states_differences_explained"].get<bool>());
  // A wrong amount is not explained by the same rule (one FlatParameter per unit: 12 bytes).
  for (auto& u : s.upstream) u["model_states_bytes"]["optimizer_step_counters"] = 12;
  expect_disagreement(compare(s), "rank 0 optimizer_step_counters: zerobench does not report it vs upstream 12 bytes");
  // Nor is any difference in a category zerobench reports.
  s = synthetic("fsdp");
  s.upstream[1]["model_states_bytes"]["grads"] = 104;
  expect_disagreement(compare(s), "rank 1 grads: zerobench 100 bytes vs upstream 104 bytes (unexplained)");
}

TEST(CrossvalCompare, CategoryOnOneSideOnlyDisagreesUnlessARulePredictsIt) {
  auto s = synthetic();
  s.upstream[0]["model_states_bytes"].erase("buffers");  // zerobench says 0, upstream says nothing
  expect_disagreement(compare(s), "rank 0 buffers: zerobench 0 bytes vs upstream does not report it");

  s = synthetic();
  s.report["ranks"][1]["memory"]["model_states_bytes"].erase("master_params");
  expect_disagreement(compare(s), "rank 1 master_params: zerobench does not report it vs upstream 0 bytes");

  s = synthetic();
  s.upstream[1]["model_states_bytes"]["activations"] = 0;  // even a zero no rule names
  expect_disagreement(compare(s), "rank 1 activations: zerobench does not report it vs upstream 0 bytes");

  // The step-counter rule predicts an upstream-only category: zerobench reporting it too is not it.
  s = synthetic("fsdp");
  s.upstream[0]["model_states_bytes"]["optimizer_step_counters"] = 64;
  s.upstream[1]["model_states_bytes"]["optimizer_step_counters"] = 32;
  s.report["ranks"][0]["memory"]["model_states_bytes"]["optimizer_step_counters"] = 60;
  expect_disagreement(compare(s), "rank 0 optimizer_step_counters: zerobench 60 bytes vs upstream 64 bytes");
}

// DeepSpeed keeps one `step` per fp32 sub-group: the count comes from zerobench's resolved
// options (config.backend.options.sub_groups), never from the upstream's own report.
TEST(CrossvalCompare, Zero3StepCounterRuleUsesZerobenchsSubGroups) {
  auto s = synthetic("zero3", "bf16");
  for (auto& u : s.upstream) {
    u["model_states_bytes"]["optimizer_step_counters"] = 4;
    u["model_states_detail"] = {{"sub_groups", 2}};  // what the upstream says about itself: ignored
  }
  EXPECT_TRUE(compare(s)["verdict"]["agree"].get<bool>());
  s.report["config"]["backend"]["options"]["sub_groups"] = 2;  // zerobench resolved two sub-groups
  expect_disagreement(compare(s), "rank 0 optimizer_step_counters");
  for (auto& u : s.upstream) u["model_states_bytes"]["optimizer_step_counters"] = 8;
  EXPECT_TRUE(compare(s)["verdict"]["agree"].get<bool>());
  s.report["config"]["backend"]["options"].erase("sub_groups");  // no prediction, no explanation
  expect_disagreement(compare(s), "rank 1 optimizer_step_counters");

  // offload_optimizer with DeepSpeedCPUAdam (zerobench's resolved options, as the rule sees them):
  // its step count is a Python int, no bytes; the same upstream 0 without them is unexplained.
  s = synthetic("zero3", "bf16");
  for (auto& u : s.upstream) u["model_states_bytes"]["optimizer_step_counters"] = 0;
  expect_disagreement(compare(s), "rank 0 optimizer_step_counters: zerobench does not report it vs upstream 0 bytes");
  // As the engine writes them (zero3::Zero3Resolved, which the rule reads): the option and its summary.
  s.report["config"]["backend"]["options"]["offload_optimizer"] = {{"device", "cpu"}};
  s.report["config"]["backend"]["options"]["offload"] = {{"optimizer", "cpu"}, {"param", "none"}};
  s.report["config"]["backend"]["options"]["host_optimizer"] = "DeepSpeedCPUAdam";
  EXPECT_TRUE(compare(s)["verdict"]["agree"].get<bool>()) << compare(s)["verdict"].dump(1);
}

TEST(CrossvalCompare, EveryRanksCollectivesOfEveryKindAreCompared) {
  auto s = synthetic();
  s.upstream[0]["steps"][1]["comm"]["kinds"]["all_gather"]["count"] = 6;
  auto m = compare(s);
  expect_disagreement(m, "rank 0 step 1: all_gather count/bytes 5/5000 vs upstream 6/5000 (unexplained)");
  EXPECT_FALSE(m["comm_equal"].get<bool>());
  ASSERT_EQ(m["comm_differences"].size(), 1u);
  EXPECT_EQ(m["comm_differences"][0]["step"], 1);
  EXPECT_EQ(m["comm_differences"][0]["rank"], 0);
  EXPECT_EQ(m["comm_differences"][0]["kind"], "all_gather");
  EXPECT_TRUE(m["comm_differences"][0]["explanation"].is_null());

  s = synthetic();  // a changed collective on rank 1 only
  s.upstream[1]["steps"][2]["comm"]["kinds"]["reduce_scatter"]["bytes"] = 1502;
  expect_disagreement(compare(s), "rank 1 step 2: reduce_scatter count/bytes 3/1500 vs upstream 3/1502");

  s = synthetic();  // zerobench's rank 1 changed
  s.report["ranks"][1]["comm_steps"][0]["all_reduce"]["count"] = 2;
  expect_disagreement(compare(s), "rank 1 step 0: all_reduce count/bytes 2/4 vs upstream 1/4");

  s = synthetic();  // "other" collectives count: a barrier, an all-to-all, point-to-point
  s.upstream[1]["steps"][0]["comm"]["other"] = {{"barrier", {{"count", 1}, {"bytes", 0}}}};
  s.upstream[0]["steps"][2]["comm"]["other"] = {{"all_to_all", {{"count", 1}, {"bytes", 64}}}, {"send", 3}};
  m = compare(s);
  expect_disagreement(m, "rank 1 step 0: barrier count/bytes 0/0 vs upstream 1/0");
  expect_disagreement(m, "rank 0 step 2: all_to_all count/bytes 0/0 vs upstream 1/64");
  expect_disagreement(m, "rank 0 step 2: send count/bytes 0/0 vs upstream 3/0");

  s = synthetic();  // a report without per-rank collectives cannot pass for rank 1
  s.report["ranks"][1].erase("comm_steps");
  expect_disagreement(compare(s), "zerobench's report has no per-step collectives of rank 1");
}

// A report written before ranks[i].comm_steps: rank 0's steps[j].comm stands for rank 0's, and
// the other ranks cannot pass. On a GPU zerobench's peak is ranks[i].memory.cuda's, max over ranks.
TEST(CrossvalCompare, OlderReportsUseStepsCommForRankZeroAndTheCudaPeakIsTheRanksMax) {
  auto s = synthetic();
  for (auto& r : s.report["ranks"]) r.erase("comm_steps");
  s.report["steps"][1]["comm"]["all_gather"]["count"] = 6;
  auto m = compare(s);
  expect_disagreement(m, "rank 0 step 1: all_gather count/bytes 6/5000 vs upstream 5/5000 (unexplained)");
  expect_disagreement(m, "zerobench's report has no per-step collectives of rank 1");

  s = synthetic();
  s.report["ranks"][0]["memory"]["cuda"] = {{"peak_allocated_bytes", 2000}};
  s.report["ranks"][1]["memory"]["cuda"] = {{"peak_allocated_bytes", 3000}};
  s.upstream[1]["peak_cuda_allocated_bytes"] = 6000;
  m = compare(s);
  EXPECT_EQ(m["perf"]["peak_cuda_allocated_bytes"], 3000);
  EXPECT_EQ(m["perf"]["upstream_peak_cuda_allocated_bytes"], 6000);
  EXPECT_DOUBLE_EQ(m["perf"]["peak_cuda_allocated_ratio"].get<double>(), 0.5);
}

TEST(CrossvalCompare, Zero3TraceCheckBroadcastsAreExplainedOnEveryRank) {
  auto s = synthetic("zero3", "bf16");
  // tiny: L = 2, M = 2 (5 + 24) = 58, P = 2 (3 + 18) = 42: step 0 2 calls / 8 B, step 1 6 / 24 + 8 (58 + 84) B.
  for (auto& u : s.upstream) {
    u["steps"][0]["comm"]["kinds"]["broadcast"] = {{"count", 2}, {"bytes", 8}};
    u["steps"][1]["comm"]["kinds"]["broadcast"] = {{"count", 6}, {"bytes", 24 + 8 * (58 + 84)}};
  }
  auto m = compare(s);
  EXPECT_TRUE(m["verdict"]["agree"].get<bool>()) << m["verdict"].dump(1);
  EXPECT_EQ(m["comm_differences"].size(), 4u);  // 2 ranks x 2 steps, each explained
  s.upstream[1]["steps"][1]["comm"]["kinds"]["broadcast"]["bytes"] = 24 + 8 * (58 + 84) + 8;
  expect_disagreement(compare(s), "rank 1 step 1: broadcast");
}

TEST(CrossvalCompare, RendersMarkdownAndHtml) {
  auto s = synthetic();
  json doc = {{"backend", "fsdp"}, {"upstream", {{"name", "PyTorch FSDP1"}, {"version", "2.11.0"}}}, {"world_size", 2},
              {"model", {{"preset", "tiny"}, {"layers", 2}, {"hidden", 128}}},
              {"modes", {compare(s)}},
              {"verdict", {{"agree", true}, {"reasons", json::array()}}}};
  const auto md = zb::reports::render_crossval(doc, "md");
  EXPECT_NE(md.find("crossval: zerobench fsdp vs PyTorch FSDP1 2.11.0"), std::string::npos) << md;
  EXPECT_NE(md.find("| fp32 | agree |"), std::string::npos) << md;
  EXPECT_NE(md.find("5 / 5"), std::string::npos) << md;
  const auto html = zb::reports::render_crossval(doc, "html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("AGREE"), std::string::npos);
}

// ---- the committed documents and the tables generated from them ----

namespace {
const std::string kResults = std::string(zb::bench::source_dir()) + "/reports/results/cpu/crossval";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text between "<!-- crossval-table:begin -->\n" and "<!-- crossval-table:end -->".
std::string between_markers(const std::string& text, const std::string& path) {
  const std::string begin = "<!-- crossval-table:begin -->\n", end = "<!-- crossval-table:end -->";
  const auto b = text.find(begin), e = text.find(end);
  EXPECT_NE(b, std::string::npos) << path << " has no crossval-table markers";
  EXPECT_NE(e, std::string::npos) << path << " has no crossval-table end marker";
  if (b == std::string::npos || e == std::string::npos || e < b) return "";
  return text.substr(b + begin.size(), e - b - begin.size());
}
}  // namespace

TEST(CrossvalTable, ReadmeAndDocsTablesRegenerateFromTheCommittedDocuments) {
  const auto docs = zb::reports::read_crossval_documents(kResults);
  const std::string table = zb::reports::crossval_tables(kResults);  // the documents' rows, then the real files'
  EXPECT_EQ(table.rfind(zb::reports::crossval_results_table(docs), 0), 0u);
  for (const auto* file : {"/README.md", "/docs/crossval.md"}) {
    const std::string path = std::string(zb::bench::source_dir()) + file;
    EXPECT_EQ(between_markers(read_file(path), path), table)
        << path << " is out of date: run scripts/crossval-table.sh";
  }
  // Every committed mode agrees, and the CLI prints the same bytes.
  for (const auto& d : docs) EXPECT_TRUE(d["verdict"]["agree"].get<bool>()) << d["_file"];
  const auto r = zb::test_support::run_command(std::string(zb::test_support::zerobench_bin()) + " crossval --table " + kResults);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, table);
}

TEST(CrossvalTable, ATamperedDocumentChangesTheTable) {
  // The gate can fail: a changed number in a committed document gives a different table.
  auto docs = zb::reports::read_crossval_documents(kResults);
  const std::string before = zb::reports::crossval_results_table(docs);
  docs.front()["modes"][0]["max_loss_rel_diff"] = 1.5e-3;
  EXPECT_NE(zb::reports::crossval_results_table(docs), before);
  // The real files' section too: a file's verdict changed in the committed summary changes its row.
  std::ifstream in(kResults + "/real-files.json");
  ASSERT_TRUE(in.good()) << "no committed real-files.json (scripts/crossval-real-files.sh)";
  auto summary = nlohmann::json::parse(in);
  const std::string section = zb::reports::crossval_real_files_table(summary);
  summary["files"][0]["outcome"] = summary["files"][0]["outcome"] == "agree" ? "disagree" : "agree";
  EXPECT_NE(zb::reports::crossval_real_files_table(summary), section);
  const auto bad = zb::test_support::make_clean_dir("cv_table_bad");
  std::ofstream(bad + "/x.json") << "{\"schema\": {\"name\": \"zerobench.report\"}}";
  const auto r = zb::test_support::run_zerobench("crossval --table " + bad);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("x.json is not a crossval document"), std::string::npos) << r.output;
}
