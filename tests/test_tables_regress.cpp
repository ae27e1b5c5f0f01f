// Tables (Markdown, CSV, HTML with SVG plots) from fixture reports; the regression gate's
// verdicts; the matrix runner's failure recording and resume.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "reports/regress.hpp"
#include "reports/report.hpp"
#include "reports/stats.hpp"
#include "reports/table.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using nlohmann::json;

namespace {
// A schema-valid report with chosen throughput samples and engine-owned bytes.
json fixture(const std::string& cell, const std::string& backend, const std::string& precision,
             const std::vector<double>& step_times, int64_t params_bytes = 1000000) {
  std::vector<double> sorted = step_times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const int64_t tokens = 512;
  json dist = {{"median", 0}, {"p10", 0}, {"p90", 0}, {"min", 0}, {"max", 0}, {"mean", 0}, {"n", step_times.size()}};
  json tps = dist, st = dist;
  tps["median"] = double(tokens) / median;
  st["median"] = median;
  json rank = {{"rank", 0},
               {"memory",
                {{"model_states_bytes", {{"params", params_bytes}, {"master_params", 0}, {"grads", 1000}, {"optimizer", 2000}}},
                 {"peak_tracked_bytes", 5000000},
                 {"peak_rss_bytes", 9000000}}},
               {"comm",
                {{"all_gather", {{"count", 5}, {"bytes", 4096}}},
                 {"reduce_scatter", {{"count", 3}, {"bytes", 2048}}},
                 {"all_reduce", {{"count", 1}, {"bytes", 4}}},
                 {"broadcast", {{"count", 0}, {"bytes", 0}}}}},
               {"step_times_s", step_times}};
  json steps = json::array();
  for (size_t i = 0; i < step_times.size(); ++i)
    steps.push_back({{"step", i}, {"loss", 7.0 - 0.1 * double(i)}, {"grad_norm", 1.0}, {"lr", 1e-3}, {"time_s", step_times[i]}});
  return {{"schema", {{"name", reports::kSchemaName}, {"version", reports::kSchemaVersion}}},
          {"run_id", cell},
          {"created", "2026-11-21T00:00:00Z"},
          {"status", {{"state", "ok"}, {"error", ""}}},
          {"env",
           {{"device", "cpu"}, {"device_count", 1}, {"peak_tflops", 0.1}, {"peak_source", "flag"}, {"torch", "2.11.0"},
            {"compiler", "g++"}, {"git_sha", "x"}, {"host", "h"}, {"world_size", 1}, {"nodes", 1},
            {"cpu_capability", "AVX2"}, {"threads_per_rank", 1}}},
          {"config",
           {{"model", {{"preset", "tiny"}, {"layers", 2}, {"params", {{"total", 123}}}}},
            {"backend", {{"name", backend}, {"precision", precision}, {"options", json::object()}}},
            {"train", {{"steps", step_times.size()}, {"micro_batch", 4}}}}},
          {"summary",
           {{"tokens_per_gpu_per_s", tps}, {"step_time_s", st}, {"mfu", 0.3}, {"mfu_6n", 0.4}, {"hfu", 0.3},
            {"tokens_per_rank_per_step", tokens}, {"final_loss", 6.5}, {"entropy_floor_nats", 1.25},
            {"flops_per_token", {{"six_n", 600.0}, {"palm", 500.0}}}}},
          {"ranks", json::array({rank})},
          {"steps", steps},
          {"_cell", cell}};
}

std::vector<double> times(double base, double jitter, unsigned seed, int n = 12) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-jitter, jitter);
  std::vector<double> t;
  for (int i = 0; i < n; ++i) t.push_back(base * (1 + u(gen)));
  return t;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST(Table, MarkdownAndCsvCarryTheBlogColumnsAndRelativeColumns) {
  const std::vector<json> rs = {fixture("fsdp_mixed", "fsdp", "mixed", {0.1, 0.1, 0.1}),
                                fixture("zero3_bf16", "zero3", "bf16", {0.2, 0.2, 0.2})};
  const auto md = reports::render_table(rs, {"md", "fsdp_mixed"});
  EXPECT_NE(md.find("| cell | backend | precision | W | tokens/GPU/s | s/step | MFU | mfu_6n |"), std::string::npos) << md;
  EXPECT_NE(md.find("| zero3_bf16 | zero3 | bf16 | 1 | 2560.0 | 0.2000 | 0.300 | 0.400 |"), std::string::npos) << md;
  EXPECT_NE(md.find("-50.0%"), std::string::npos) << md;  // tokens/GPU/s vs base
  const auto csv = reports::render_table(rs, {"csv", ""});
  EXPECT_EQ(count(csv, "\n"), 3);
  // ... tokens/opt. step (512 tokens x W=1), params, master, grads, optimizer, buffers, host MiB,
  // peak, observed peak, est., peak/est, comm, offload MiB/step, ... (a report without
  // peak_program_bytes: its peak is the observed one)
  EXPECT_NE(csv.find("fsdp_mixed,fsdp,mixed,1,5120.0,0.1000,0.300,0.400,512,0.95,0.00,0.00,0.00,0.00,0.00,4.77,4.77,-,-,0.01,-,-,6.5000,ok"),
            std::string::npos)
      << csv;
  // tokens/opt. step is the global batch: each rank's 512 tokens per optimizer step times W.
  auto w4 = rs[0];
  w4["env"]["world_size"] = 4;
  EXPECT_NE(reports::render_table({w4}, {"csv", ""}).find("fsdp_mixed,fsdp,mixed,4,5120.0,0.1000,0.300,0.400,2048,"),
            std::string::npos);
  auto failed = reports::failed_report("oom", "CUDA out of memory", json::object());
  failed["_cell"] = "big";
  EXPECT_NE(reports::render_table({failed}, {}).find("oom: CUDA out of memory"), std::string::npos);
  EXPECT_THROW(reports::render_table(rs, {"md", "nope"}), UsageError);
}

TEST(Table, HtmlIsOneWellFormedPageWithOneSvgPerPlot) {
  const std::vector<json> rs = {fixture("a<b", "fsdp", "mixed", {0.1, 0.1}), fixture("b", "zero3", "bf16", {0.2, 0.2})};
  const auto html = reports::render_table(rs, {"html", ""});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  EXPECT_EQ(count(html, "<svg "), 4);  // throughput, memory, loss, grad norm
  EXPECT_EQ(count(html, "</svg>"), 4);
  EXPECT_EQ(count(html, "<figure>"), count(html, "</figure>"));
  EXPECT_EQ(count(html, "<tr>"), count(html, "</tr>"));
  EXPECT_EQ(html.find("a<b"), std::string::npos) << "cell names must be escaped";
  EXPECT_NE(html.find("a&lt;b"), std::string::npos);
}

// The HTML draws each run's tokens/GPU/s with its 95% interval (order statistics of the measured
// steps' times) and pivots backends per precision plan: FSDP mixed (fp32 flat params) and ZeRO-3
// bf16 (fp32 masters) share a row, FSDP low (bf16 weights updated) gets its own.
TEST(Table, HtmlDrawsIntervalsAndPivotsBackendsPerPrecisionPlan) {
  auto with_plan = [](json r, const std::string& params, const json& master) {
    r["config"]["precision_plan"] = {{"load", "bf16"}, {"params", params},   {"compute", "bf16"},
                                     {"reduce", "bf16"}, {"grads", params},  {"master", master},
                                     {"optimizer_states", "fp32"}, {"notes", ""}};
    for (auto& st : r["steps"]) st["measured"] = true;
    return r;
  };
  const std::vector<double> t = {0.13, 0.10, 0.17, 0.12, 0.15, 0.11, 0.16, 0.14};
  const std::vector<json> rs = {with_plan(fixture("fsdp_mixed", "fsdp", "mixed", t), "fp32", nullptr),
                                with_plan(fixture("zero3_bf16", "zero3", "bf16", t), "bf16", "fp32"),
                                with_plan(fixture("fsdp_low", "fsdp", "low", t), "bf16", nullptr)};
  const auto html = reports::render_table(rs, {"html", ""});
  // n = 8: k = 1 is the largest order statistic with coverage >= 0.95 (1 - 2/256), so [min, max]
  // of the step times, i.e. 512/0.17 .. 512/0.10 tokens/GPU/s.
  EXPECT_NE(html.find("<th>95% interval</th>"), std::string::npos);
  EXPECT_EQ(count(html, "<td>3011.8 – 5120.0</td>"), 3) << html;
  EXPECT_NE(html.find("<tr><td>compute bf16, optimizer updates fp32 weights</td><td>"), std::string::npos) << html;
  const auto row = html.substr(html.find("<tr><td>compute bf16, optimizer updates fp32 weights</td>"));
  const auto row_end = row.find("</tr>");
  EXPECT_NE(row.substr(0, row_end).find("fsdp_mixed"), std::string::npos);
  EXPECT_NE(row.substr(0, row_end).find("zero3_bf16"), std::string::npos);
  EXPECT_EQ(row.substr(0, row_end).find("fsdp_low"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>compute bf16, optimizer updates bf16 weights</td>"), std::string::npos);
  EXPECT_EQ(count(html, "<svg "), 4);
}

TEST(Stats, MannWhitneySeparatesShiftedSamplesAndNotNoise) {
  EXPECT_LT(reports::mann_whitney_greater_p(times(1.1, 0.02, 1), times(1.0, 0.02, 2)), 0.001);
  EXPECT_GT(reports::mann_whitney_greater_p(times(1.0, 0.02, 3), times(1.0, 0.02, 4)), 0.05);
  EXPECT_GT(reports::mann_whitney_greater_p({1, 1, 1}, {1, 1, 1}), 0.4);  // all ties
}

TEST(Regress, IdenticalAndNoisyReportsPass) {
  const std::vector<json> base = {fixture("c", "fsdp", "mixed", times(0.1, 0.02, 5))};
  EXPECT_FALSE(reports::compare_reports(base, base, {}).regression());
  const std::vector<json> noisy = {fixture("c", "fsdp", "mixed", times(0.101, 0.02, 6))};
  const auto r = reports::compare_reports(base, noisy, {});
  EXPECT_FALSE(r.regression()) << r.to_text();
}

TEST(Regress, FlagsAPlantedTenPercentThroughputDrop) {
  const std::vector<json> base = {fixture("c", "fsdp", "mixed", times(0.1, 0.02, 7))};
  const std::vector<json> slow = {fixture("c", "fsdp", "mixed", times(0.1 / 0.9, 0.02, 8))};
  const auto r = reports::compare_reports(base, slow, {});
  EXPECT_TRUE(r.regression()) << r.to_text();
  // On a shared CPU runner timings are reported, not gated.
  reports::RegressOptions report_only;
  report_only.gate_timing = false;
  EXPECT_FALSE(reports::compare_reports(base, slow, report_only).regression());
  // A big median change without statistical support (2 samples) is not flagged either.
  const std::vector<json> b2 = {fixture("c", "fsdp", "mixed", {0.1, 0.3})}, c2 = {fixture("c", "fsdp", "mixed", {0.12, 0.35})};
  EXPECT_FALSE(reports::compare_reports(b2, c2, {}).regression());
}

TEST(Regress, FlagsAOneByteChangeInEngineOwnedMemoryAndMissingCells) {
  const std::vector<json> base = {fixture("c", "fsdp", "mixed", {0.1, 0.1, 0.1}, 1000000)};
  const std::vector<json> plus_one = {fixture("c", "fsdp", "mixed", {0.1, 0.1, 0.1}, 1000001)};
  const auto r = reports::compare_reports(base, plus_one, {});
  ASSERT_TRUE(r.regression());
  EXPECT_NE(r.to_text().find("model_states_bytes.params"), std::string::npos) << r.to_text();
  const std::vector<json> two = {base[0], fixture("d", "zero3", "bf16", {0.1, 0.1, 0.1})};
  auto missing = reports::compare_reports(two, base, {});
  EXPECT_TRUE(missing.regression());
  EXPECT_EQ(missing.missing, std::vector<std::string>{"d"});
  auto extra = reports::compare_reports(base, two, {});
  EXPECT_FALSE(extra.regression());
  EXPECT_EQ(extra.extra, std::vector<std::string>{"d"});
  EXPECT_EQ(extra.to_json()["verdict"], "pass");
}

TEST(Regress, ComparesEveryModelStateCategoryIncludingBuffersBaselinesLack) {
  const std::vector<json> base = {fixture("c", "zero3", "bf16", {0.1, 0.1, 0.1})};
  auto with_buffers = base;
  with_buffers[0]["ranks"][0]["memory"]["model_states_bytes"]["buffers"] = 33554432;
  // A category the baseline does not have is a change (until the baseline is refreshed) ...
  const auto r = reports::compare_reports(base, with_buffers, {});
  EXPECT_TRUE(r.regression());
  EXPECT_NE(r.to_text().find("model_states_bytes.buffers"), std::string::npos) << r.to_text();
  // ... and once both have it, it is compared exactly like the others.
  EXPECT_FALSE(reports::compare_reports(with_buffers, with_buffers, {}).regression());
  auto changed = with_buffers;
  changed[0]["ranks"][0]["memory"]["model_states_bytes"]["buffers"] = 33554434;
  EXPECT_TRUE(reports::compare_reports(with_buffers, changed, {}).regression());
  // The tables carry the category as a column (0 where a report lacks it).
  const auto md = reports::markdown_table(with_buffers);
  EXPECT_NE(md.find("buffers MiB"), std::string::npos) << md;
  EXPECT_NE(md.find("32.00"), std::string::npos) << md;
}

TEST(Regress, GatesOffloadBytesByLocationAndTheTrafficEachWay) {
  std::vector<json> base = {fixture("c", "zero3", "bf16", {0.1, 0.1, 0.1})};
  base[0]["ranks"][0]["memory"]["model_states_bytes"]["host"] = {{"params", 0}, {"master_params", 4000},
                                                                 {"grads", 0}, {"optimizer", 8000},
                                                                 {"buffers", 0}, {"pinned", true}};
  base[0]["ranks"][0]["offload"] = {{"last_step", {{"h2d_bytes", 2000}, {"d2h_bytes", 1000}}}};
  EXPECT_FALSE(reports::compare_reports(base, base, {}).regression());
  auto moved = base;  // one byte more copied to the host per step (the planted fault)
  moved[0]["ranks"][0]["offload"]["last_step"]["d2h_bytes"] = 1001;
  const auto r = reports::compare_reports(base, moved, {});
  EXPECT_TRUE(r.regression());
  EXPECT_NE(r.to_text().find("offload.last_step.d2h_bytes"), std::string::npos) << r.to_text();
  auto unpinned = base;  // the same bytes, no longer pinned
  unpinned[0]["ranks"][0]["memory"]["model_states_bytes"]["host"]["pinned"] = false;
  EXPECT_TRUE(reports::compare_reports(base, unpinned, {}).regression());
  auto none = base;  // offload gone altogether
  none[0]["ranks"][0].erase("offload");
  EXPECT_TRUE(reports::compare_reports(base, none, {}).regression());
}

// Memory peaks: the program-order peak is gated exactly (one byte either way is a regression); the
// observed peak is shown, never gated — however far it moves — unless a report has no program-order
// peak (an older baseline), where the old rule holds: at most --memory-threshold (5%) above.
TEST(Regress, GatesTheProgramOrderPeakExactlyAndShowsTheObservedOne) {
  std::vector<json> base = {fixture("c", "fsdp", "mixed", {0.1, 0.1, 0.1})};
  base[0]["ranks"][0]["memory"]["peak_program_bytes"] = 5200000;
  EXPECT_FALSE(reports::compare_reports(base, base, {}).regression());
  auto observed_moved = base;  // +20% observed, program order unchanged: a timing difference
  observed_moved[0]["ranks"][0]["memory"]["peak_tracked_bytes"] = 6000000;
  auto r = reports::compare_reports(base, observed_moved, {});
  EXPECT_FALSE(r.regression()) << r.to_text();
  EXPECT_NE(r.to_text().find("| ranks[0].memory.peak_tracked_bytes | 5e+06 | 6e+06 | +20.00% | ok | observed"),
            std::string::npos)
      << r.to_text();
  EXPECT_NE(r.to_text().find("| ranks[0].memory.peak_program_bytes | 5200000 | 5200000 | same | ok |"),
            std::string::npos)
      << r.to_text();
  for (const int64_t delta : {1, -1}) {  // one byte more, or less: the planted fault
    auto moved = base;
    moved[0]["ranks"][0]["memory"]["peak_program_bytes"] = 5200000 + delta;
    r = reports::compare_reports(base, moved, {});
    EXPECT_TRUE(r.regression()) << delta;
    EXPECT_NE(r.to_text().find("peak_program_bytes | 5200000 | " + std::to_string(5200000 + delta)), std::string::npos)
        << r.to_text();
  }
  // A baseline recorded before the program-order peak: the observed one within 5%.
  const std::vector<json> old_base = {fixture("c", "fsdp", "mixed", {0.1, 0.1, 0.1})};
  auto within = base;
  within[0]["ranks"][0]["memory"]["peak_tracked_bytes"] = 5200000;  // +4%
  EXPECT_FALSE(reports::compare_reports(old_base, within, {}).regression());
  auto beyond = base;
  beyond[0]["ranks"][0]["memory"]["peak_tracked_bytes"] = 5300000;  // +6%
  r = reports::compare_reports(old_base, beyond, {});
  EXPECT_TRUE(r.regression());
  EXPECT_NE(r.to_text().find("the baseline has no peak_program_bytes"), std::string::npos) << r.to_text();
}

TEST(Regress, ANewConfigFieldStillMatchesButAChangedSettingIsFlagged) {
  const std::vector<json> base = {fixture("c", "fsdp", "mixed", {0.1, 0.1, 0.1})};
  auto newer = base;
  newer[0]["config"]["train"]["a_new_setting"] = true;
  EXPECT_FALSE(reports::compare_reports(base, newer, {}).regression());
  auto changed = base;
  changed[0]["config"]["train"]["micro_batch"] = 8;
  const auto r = reports::compare_reports(base, changed, {});
  ASSERT_TRUE(r.regression());
  EXPECT_NE(r.to_text().find("different configuration"), std::string::npos) << r.to_text();
}

TEST(Regress, GatesEveryStepsLossGradNormAndLrBitwiseUnlessToldATolerance) {
  const std::vector<json> base = {fixture("c", "fsdp", "mixed", {0.1, 0.1, 0.1, 0.1})};
  EXPECT_FALSE(reports::compare_reports(base, base, {}).regression());
  // One ulp of a float loss at step 2: a change in the numerics.
  auto ulp = base;
  const float l2 = float(ulp[0]["steps"][2]["loss"].get<double>());
  ulp[0]["steps"][2]["loss"] = double(std::nextafter(l2, 100.0f));
  auto r = reports::compare_reports(base, ulp, {});
  ASSERT_TRUE(r.regression()) << r.to_text();
  EXPECT_NE(r.to_text().find("steps[2].loss"), std::string::npos) << r.to_text();
  EXPECT_NE(r.to_text().find("1 of 4 steps differ"), std::string::npos) << r.to_text();
  // A documented tolerance lets the last bits vary ...
  reports::RegressOptions tol;
  tol.numerics_rtol = 1e-6;
  EXPECT_FALSE(reports::compare_reports(base, ulp, tol).regression()) << reports::compare_reports(base, ulp, tol).to_text();
  // ... but not a real change, a NaN, a missing value or a missing step.
  auto moved = base;
  moved[0]["steps"][3]["grad_norm"] = 1.001;
  r = reports::compare_reports(base, moved, tol);
  EXPECT_TRUE(r.regression());
  EXPECT_NE(r.to_text().find("steps[3].grad_norm"), std::string::npos) << r.to_text();
  auto nan = base;
  nan[0]["steps"][1]["loss"] = nullptr;  // how nlohmann writes a NaN
  EXPECT_TRUE(reports::compare_reports(base, nan, tol).regression());
  EXPECT_TRUE(reports::compare_reports(nan, nan, tol).regression()) << "NaN is never equal to NaN";
  auto lr = base;
  lr[0]["steps"][0]["lr"] = 1.001e-3;
  EXPECT_NE(reports::compare_reports(base, lr, {}).to_text().find("steps[0].lr"), std::string::npos);
  auto shorter = base;
  shorter[0]["steps"].erase(3);
  r = reports::compare_reports(base, shorter, tol);
  EXPECT_TRUE(r.regression());
  EXPECT_NE(r.to_text().find("number of recorded steps"), std::string::npos) << r.to_text();
  // Across machine kinds (another CPU capability, or a report that does not say) the last bits
  // differ: only a change beyond --numerics-rtol-other-machine (2e-2) counts there.
  auto other = ulp;
  other[0]["env"]["cpu_capability"] = "AVX512";
  r = reports::compare_reports(base, other, {});
  EXPECT_FALSE(r.regression()) << r.to_text();
  EXPECT_NE(r.to_text().find("other machine kind"), std::string::npos) << r.to_text();
  other[0]["steps"][3]["loss"] = other[0]["steps"][3]["loss"].get<double>() * 1.05;
  EXPECT_TRUE(reports::compare_reports(base, other, {}).regression());
  auto unknown = ulp;
  unknown[0]["env"].erase("cpu_capability");
  EXPECT_FALSE(reports::compare_reports(base, unknown, {}).regression());
  // Matching numerics are listed (gated, same), so the table shows what was checked.
  EXPECT_NE(reports::compare_reports(base, base, {}).to_text().find("steps.loss"), std::string::npos);
}

TEST(Regress, BadInputExits2AndARegressionExits1) {
  const auto dir = test_support::temp_path("regress");
  reports::write_json_atomic(dir + "/base/c.json", fixture("c", "fsdp", "mixed", {0.1, 0.1, 0.1}, 1000000));
  reports::write_json_atomic(dir + "/cur/c.json", fixture("c", "fsdp", "mixed", {0.1, 0.1, 0.1}, 1000001));
  auto r = test_support::run_zerobench("regress --baseline " + dir + "/base --current " + dir + "/cur --json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(json::parse(r.output)["verdict"], "regression");
  r = test_support::run_zerobench("regress --baseline " + dir + "/base --current " + dir + "/base");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ofstream(dir + "/trunc.json") << R"({"schema": {"name": "zerobench.report", "vers)";
  r = test_support::run_zerobench("regress --baseline " + dir + "/base --current " + dir + "/trunc.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("trunc.json"), std::string::npos) << r.output;
  auto wrong = fixture("c", "fsdp", "mixed", {0.1});
  wrong["schema"]["version"] = 99;
  reports::write_json_atomic(dir + "/wrong.json", wrong);
  r = test_support::run_zerobench("regress --baseline " + dir + "/base --current " + dir + "/wrong.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("v99"), std::string::npos) << r.output;
  std::system(("rm -rf " + dir).c_str());
}

TEST(Matrix, AFailingCellIsRecordedTheNextRunsAndARerunResumes) {
  // Cells time out after 20 s: long enough for two ranks to start and fail on a loaded 2-core
  // machine (8 s was not), short enough for the hanging cell.
  const auto dir = test_support::temp_path("matrix");
  const auto file = dir + ".yaml";
  std::ofstream(file) << "name: t\ntimeout_s: 20\nbase: {model: tiny, nproc: 2, steps: 2, warmup: 1, seq-len: 16, "
                         "micro-batch: 1, layers: 1}\n"
                         "axes:\n  backend: [ddp, fsdp]\n"
                         "include:\n  - {backend: ddp, fault-inject: 'exit:1:0'}\n  - {backend: ddp, fault-inject: 'hang:0:0'}\n";
  auto r = test_support::run_zerobench("matrix " + file + " --out " + dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;  // some cells failed
  const auto index = json::parse(std::ifstream(dir + "/index.json"));
  ASSERT_EQ(index["cells"].size(), 4u) << index.dump(2);
  EXPECT_EQ(index["cells"][0]["status"], "ok");
  EXPECT_EQ(index["cells"][1]["status"], "ok");
  EXPECT_EQ(index["cells"][2]["status"], "failed");
  EXPECT_NE(index["cells"][2]["error"].get<std::string>().find("rank 1"), std::string::npos) << index.dump(2);
  EXPECT_EQ(index["cells"][3]["status"], "timeout");
  EXPECT_EQ(reports::read_report(dir + "/" + index["cells"][3]["report"].get<std::string>())["status"]["state"], "timeout");
  EXPECT_NE(r.output.find("[4/4]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ETA"), std::string::npos);
  // Re-running skips every finished cell.
  r = test_support::run_zerobench("matrix " + file + " --out " + dir);
  const auto again = json::parse(std::ifstream(dir + "/index.json"));
  for (const auto& c : again["cells"]) EXPECT_TRUE(c["skipped"].get<bool>()) << c.dump();
  // A bad option in any cell fails the whole matrix up front.
  std::ofstream(file) << "base: {model: tiny}\naxes:\n  backend: [ddp, megatron]\n";
  r = test_support::run_zerobench("matrix " + file + " --out " + dir + "2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("megatron"), std::string::npos) << r.output;
  std::system(("rm -rf " + dir + " " + dir + "2 " + file).c_str());
}

// The README's benchmark table is generated from the committed cpu-smoke baseline
// (scripts/bench-table.sh), never typed in: the committed README holds exactly what the script
// generates, and the check fails on a stale copy (planted: a README-like file whose table has
// one changed digit).
TEST(ReadmeBenchTable, IsGeneratedFromTheCommittedBaselineAndAStaleCopyFails) {
  using test_support::run_command;
  const std::string src = zb::bench::source_dir();
  const auto ok = run_command("ZEROBENCH_BIN=" + std::string(zb::test_support::zerobench_bin()) + " " + src +
                              "/scripts/bench-table.sh --check 2>&1");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;

  const auto table = run_command(std::string(zb::test_support::zerobench_bin()) + " table " + src +
                                 "/reports/baselines/cpu-smoke --baseline fsdp_mixed 2>/dev/null");
  ASSERT_EQ(table.exit_code, 0);
  const auto dir = test_support::make_clean_dir("readme_table");
  const std::string table_file = dir + "/table.md", readme = dir + "/README.md";
  std::ofstream(table_file) << table.output;
  std::string stale = table.output;
  const auto digit = stale.find_first_of("0123456789", stale.find("| fsdp_mixed |") + 14);
  ASSERT_NE(digit, std::string::npos);
  stale[digit] = stale[digit] == '9' ? '8' : char(stale[digit] + 1);
  std::ofstream(readme) << "intro\n<!-- bench-table:begin -->\n" << stale << "<!-- bench-table:end -->\nrest\n";
  const std::string splice = "python3 " + src + "/scripts/splice_table.py bench-table ";
  const auto stale_check = run_command(splice + "--check " + table_file + " " + readme + " 2>&1");
  EXPECT_EQ(stale_check.exit_code, 1) << stale_check.output;
  EXPECT_NE(stale_check.output.find("out of date"), std::string::npos) << stale_check.output;
  ASSERT_EQ(run_command(splice + "write " + table_file + " " + readme + " 2>&1").exit_code, 0);
  EXPECT_EQ(run_command(splice + "--check " + table_file + " " + readme + " 2>&1").exit_code, 0);
}
