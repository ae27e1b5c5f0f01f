// `zerobench compare` (issue 25): side parsing and up-front validation (exit 2 with the line), the
// order-statistic median interval, the compare JSON from fixed reports (the committed cpu-smoke
// baseline), the verdict's numbers equal to the JSON's, a planted throughput difference detected
// and an identical one not, failed runs shown, rendering through `--from-dir`, and one small
// end-to-end run (tiny model, W = 2, 2 sides, --repeat 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>

#include "backends/backend_info.hpp"
#include "bench/compare/analysis.hpp"
#include "bench/compare/config_diff.hpp"
#include "bench/compare/sides.hpp"
#include "bench/compare/verdict.hpp"
#include "reports/report.hpp"
#include "reports/stats.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using namespace zb::bench::compare;
using nlohmann::json;
using test_support::run_zerobench;

namespace {
const std::string kSrc = zb::bench::source_dir();
const std::string kSmoke = kSrc + "/reports/baselines/cpu-smoke/";

json smoke(const std::string& cell) { return reports::read_report(kSmoke + cell + ".json"); }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A copy of a report whose throughput is scaled by `factor` (step time divided by it).
json scaled(json r, double factor) {
  r["summary"]["tokens_per_gpu_per_s"]["median"] =
      r["summary"]["tokens_per_gpu_per_s"]["median"].get<double>() * factor;
  r["summary"]["step_time_s"]["median"] = r["summary"]["step_time_s"]["median"].get<double>() / factor;
  return r;
}

// Rounds of a side: the same report with throughput jitter (deterministic factors).
SideRuns rounds(const std::string& label, const json& report, const std::vector<double>& factors) {
  SideRuns s{label, label, {}, {}};
  for (size_t i = 0; i < factors.size(); ++i) {
    s.runs.push_back(scaled(report, factors[i]));
    s.report_files.push_back("runs/" + label + "_r" + std::to_string(i + 1) + ".json");
  }
  return s;
}

json compare_of(const std::vector<SideRuns>& sides) {
  json c = analyse(sides, {{"model", "tiny"}}, int(sides[0].runs.size()));
  c["verdict"] = verdict(c);
  return c;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}
}  // namespace

// ---- statistics ------------------------------------------------------------------------------

TEST(CompareStats, MedianIntervalMatchesHandComputedOrderStatistics) {
  // n = 6: k = 1 (min, max), coverage 1 - 2/64.
  auto r = reports::median_interval({6, 1, 5, 2, 4, 3});
  EXPECT_EQ(r.k, 1);
  EXPECT_DOUBLE_EQ(r.median, 3.5);
  EXPECT_DOUBLE_EQ(r.lo, 1);
  EXPECT_DOUBLE_EQ(r.hi, 6);
  EXPECT_NEAR(r.coverage, 1 - 2.0 / 64, 1e-12);
  // n = 10: k = 2 (P(Bin(10,.5) <= 1) = 11/1024; k = 3 would give 1 - 112/1024 = 0.89 < 0.95).
  r = reports::median_interval({10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  EXPECT_EQ(r.k, 2);
  EXPECT_DOUBLE_EQ(r.lo, 2);
  EXPECT_DOUBLE_EQ(r.hi, 9);
  EXPECT_NEAR(r.coverage, 1 - 22.0 / 1024, 1e-12);
  // n = 20: k = 6, sum C(20, 0..5) = 21700 (the textbook x_(6), x_(15) interval).
  std::vector<double> v;
  for (int i = 1; i <= 20; ++i) v.push_back(i);
  r = reports::median_interval(v);
  EXPECT_EQ(r.k, 6);
  EXPECT_DOUBLE_EQ(r.lo, 6);
  EXPECT_DOUBLE_EQ(r.hi, 15);
  EXPECT_NEAR(r.coverage, 1 - 2 * 21700.0 / 1048576, 1e-12);
  // n = 5 cannot reach 95%: min-max at 1 - 2/32, said so.
  r = reports::median_interval({1, 2, 3, 4, 5});
  EXPECT_EQ(r.k, 1);
  EXPECT_NEAR(r.coverage, 0.9375, 1e-12);
  EXPECT_LT(r.coverage, 0.95);
  EXPECT_EQ(reports::median_interval({}).n, 0);
  EXPECT_TRUE(std::isnan(reports::median_interval({}).median));
  EXPECT_DOUBLE_EQ(reports::median({3, 1, 2}), 2);
  EXPECT_EQ(interval_level(0.96875), "95%");
  EXPECT_EQ(interval_level(0.9375), "93.8%");
}

// ---- sides ----------------------------------------------------------------------------------

TEST(CompareSides, ParsesFilesAndSpecs) {
  const auto s = parse_side(kSrc + "/bench/configs/deepspeed_zero3_blog.json");
  EXPECT_TRUE(s.is_file);
  EXPECT_EQ(s.label, "deepspeed_zero3_blog");
  ASSERT_EQ(s.options.size(), 1u);
  EXPECT_EQ(s.options[0].first, "config");
  const auto t = parse_side("fsdp:mixed:sharding-strategy=SHARD_GRAD_OP,forward-prefetch=true");
  EXPECT_FALSE(t.is_file);
  EXPECT_EQ(t.label, "fsdp:mixed:sharding-strategy=SHARD_GRAD_OP,forward-prefetch=true");
  ASSERT_EQ(t.options.size(), 4u);
  EXPECT_EQ(t.options[2], (std::pair<std::string, std::string>{"sharding-strategy", "SHARD_GRAD_OP"}));
  const auto both = parse_sides({"fsdp:mixed", "fsdp:mixed"});  // an A/A compare: labels made unique
  EXPECT_EQ(both[1].label, "fsdp:mixed-2");
}

TEST(CompareSides, BadSpecsNameThemselves) {
  for (const std::string bad :
       {"nosuch.yaml", "fsdp", "fsdp:", ":mixed", "fsdp:mixed:", "fsdp:mixed:x", "fsdp:mixed:seq-len=8",
        "fsdp:mixed:backend=zero3", "a:b:c:d", "fsdp:mixed:forward-prefetch=true,forward-prefetch=false"}) {
    try {
      parse_side(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("side '" + bad + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_sides({"fsdp:mixed"}), UsageError);
}

TEST(CompareSides, BinaryRefusesABadSideBeforeRunningAnything) {
  const auto out = test_support::make_clean_dir("cmp_bad");
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"fsdp:mixed fsdp:mixd", "side 'fsdp:mixd': --precision 'mixd'"},
      {"fsdp:mixed zero3:bf16:reduce-bucket-size=abc",
       "side 'zero3:bf16:reduce-bucket-size=abc': --reduce-bucket-size"},
      {"fsdp:mixed nosuch.yaml", "side 'nosuch.yaml': not an existing file"},
      // A config file that contradicts a workload flag: named, refused up front.
      {"fsdp:mixed " + kSrc + "/bench/configs/deepspeed_zero3_blog.json --micro-batch 4",
       "train_micro_batch_size_per_gpu 8 in the file but --micro-batch 4"},
      {"fsdp:mixed", "at least two sides"},
  };
  for (const auto& c : cases) {
    const auto r = run_zerobench("compare " + c.args + " --out " + out + "/x");
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
    // One line, and nothing ran: no runs directory.
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(system(("test -e " + out + "/x/runs").c_str()), 0) << c.args;
  }
  // Interleaved order: A1 B1 A2 B2.
  const auto r = run_zerobench("compare ddp:fp32 fsdp:fp32 --repeat 2 --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a1 = r.output.find("a_ddp-fp32_r1"), b1 = r.output.find("b_fsdp-fp32_r1"),
             a2 = r.output.find("a_ddp-fp32_r2"), b2 = r.output.find("b_fsdp-fp32_r2");
  ASSERT_NE(b2, std::string::npos) << r.output;
  EXPECT_LT(a1, b1);
  EXPECT_LT(b1, a2);
  EXPECT_LT(a2, b2);
}

// One workload: the blog's DeepSpeed JSON fixes micro-batch 8 and the accelerate YAML leaves it to
// the command line, so without --micro-batch every run gets 8; with it, the flag decides (and the
// JSON refuses 4, above); two sides that each keep a different batch are left as they are.
TEST(CompareSides, TheBatchOneFileFixesIsGivenToEverySide) {
  const std::string fsdp = kSrc + "/bench/configs/accelerate_fsdp_blog.yaml",
                    ds = kSrc + "/bench/configs/deepspeed_zero3_blog.json";
  auto r = run_zerobench("compare " + fsdp + " " + ds + " --model tiny --repeat 1 --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t n = 0;
  for (size_t p = r.output.find("--micro-batch 8"); p != std::string::npos; p = r.output.find("--micro-batch 8", p + 1))
    ++n;
  EXPECT_EQ(n, 2u) << r.output;  // both runs
  r = run_zerobench("compare fsdp:mixed zero3:bf16 --model tiny --repeat 1 --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("--micro-batch"), std::string::npos) << r.output;  // nothing to align
}

// Two DeepSpeed files whose scheduler has warmup_num_steps "auto" (transformers' ds_config_zero2.json
// and its copies): run refuses them without a warm-up and names --lr-warmup-steps / --lr-warmup-ratio
// as the way round; compare takes those flags and gives them to every side (found by the
// 2026-11-28 real-file trial: compare had neither, so such a pair could not be compared at all).
TEST(CompareSides, AnAutoWarmUpFileComparesWithTheWarmUpGivenToEverySide) {
  const std::string a = kSrc + "/tests/configs/real/qwen_ds_config_zero2.json",
                    b = kSrc + "/tests/configs/real/accelerate_zero_stage2_config.json";
  auto r = run_zerobench("compare " + a + " " + b + " --repeat 1 --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("give --lr-warmup-steps N or --lr-warmup-ratio R"), std::string::npos) << r.output;
  for (const std::string flag : {"--lr-warmup-steps 2", "--lr-warmup-ratio 0.5"}) {
    r = run_zerobench("compare " + a + " " + b + " " + flag + " --repeat 1 --dry-run");
    ASSERT_EQ(r.exit_code, 0) << flag << "\n" << r.output;
    size_t n = 0;
    for (size_t p = r.output.find(flag); p != std::string::npos; p = r.output.find(flag, p + 1)) ++n;
    EXPECT_EQ(n, 2u) << "both runs get " << flag << ":\n" << r.output;
  }
  // Given once: not also by a spec side, and not both forms.
  r = run_zerobench("compare " + a + " zero2:fp32:lr-warmup-steps=3 --lr-warmup-steps 2 --repeat 1 --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("side 'zero2:fp32:lr-warmup-steps=3': lr-warmup-steps=3 beside compare's --lr-warmup-steps"),
            std::string::npos)
      << r.output;
  r = run_zerobench("compare " + a + " " + b + " --lr-warmup-steps 2 --lr-warmup-ratio 0.5 --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

// ---- the compare document ---------------------------------------------------------------------

TEST(CompareAnalysis, VerdictNumbersEqualTheJson) {
  // zero3_bf16 planted 10% slower than fsdp_mixed in every round, with jitter.
  const std::vector<double> jitter = {1.00, 1.01, 0.99, 1.02, 0.98, 1.005};
  std::vector<double> slow;
  for (double j : jitter) slow.push_back(0.9 * j * (1 + 0.001));
  const auto c =
      compare_of({rounds("fsdp_mixed", smoke("fsdp_mixed"), jitter), rounds("zero3_bf16", smoke("zero3_bf16"), slow)});
  const auto& cmp = c["comparisons"][0];
  ASSERT_TRUE(cmp["beyond_noise"].get<bool>());
  const std::string v = c["verdict"];
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      v, m,
      std::regex(
          R"(zero3_bf16 is ([0-9.]+)% slower than fsdp_mixed in tokens/GPU/s \(95% interval ([0-9.]+)–([0-9.]+)%, 6 paired rounds\))")))
      << v;
  const auto& pct = cmp["throughput_change_pct"];
  EXPECT_EQ(m[1].str(), fmt("%.1f", -pct["median"].get<double>()));
  EXPECT_EQ(m[2].str(), fmt("%.1f", -pct["hi"].get<double>()));
  EXPECT_EQ(m[3].str(), fmt("%.1f", -pct["lo"].get<double>()));
  // Every round's ratio is 0.9 * 1.001 (the planted factor; the jitter cancels in the pair) times
  // the committed reports' own ratio.
  const double base = smoke("zero3_bf16")["summary"]["tokens_per_gpu_per_s"]["median"].get<double>() /
                      smoke("fsdp_mixed")["summary"]["tokens_per_gpu_per_s"]["median"].get<double>();
  EXPECT_NEAR(cmp["throughput_ratio"]["median"].get<double>(), 0.9009 * base, 1e-9);
  EXPECT_NEAR(cmp["throughput_ratio"]["lo"].get<double>(), 0.9009 * base, 1e-9);
  EXPECT_NEAR(cmp["throughput_ratio"]["hi"].get<double>(), 0.9009 * base, 1e-9);
  ASSERT_TRUE(std::regex_search(
      v, m, std::regex(R"(holds ([0-9.]+)× fsdp_mixed's model-state memory per rank \(([0-9.]+) vs ([0-9.]+) MiB\))")))
      << v;
  EXPECT_EQ(m[1].str(), fmt("%.2f", cmp["model_states_ratio"].get<double>()));
  const auto& sides = c["sides"];
  EXPECT_EQ(m[2].str(), fmt("%.1f", sides[1]["memory"]["max"]["model_states_total_bytes"].get<double>() / 1048576));
  EXPECT_EQ(m[3].str(), fmt("%.1f", sides[0]["memory"]["max"]["model_states_total_bytes"].get<double>() / 1048576));
  ASSERT_TRUE(std::regex_search(
      v, m, std::regex(R"(\(([0-9.]+)×; pre-flight estimates ([0-9.]+) vs ([0-9.]+) MiB\): fsdp_mixed fits in less)")))
      << v;
  EXPECT_EQ(m[1].str(), fmt("%.2f", cmp["peak_tracked_ratio"].get<double>()));
  EXPECT_EQ(m[2].str(), fmt("%.1f", sides[1]["memory"]["max"]["estimate_peak_bytes"].get<double>() / 1048576));
  ASSERT_TRUE(std::regex_search(
      v, m,
      std::regex(
          R"(agree to ([0-9.e+-]+) \(max relative difference per step over (\d+) steps; grad norms to ([0-9.e+-]+)\))")))
      << v;
  EXPECT_EQ(m[1].str(), fmt("%.1e", cmp["loss_max_rel_diff"].get<double>()));
  EXPECT_EQ(std::stoi(m[2].str()), cmp["steps_compared"].get<int>());
  EXPECT_EQ(m[3].str(), fmt("%.1e", cmp["grad_norm_max_rel_diff"].get<double>()));
  // The loss agreement is the committed reports' own: recomputed here from steps[].
  double worst = 0;
  const auto la = smoke("fsdp_mixed")["steps"], lb = smoke("zero3_bf16")["steps"];
  for (size_t i = 0; i < la.size(); ++i)
    worst = std::max(worst, std::abs(lb[i]["loss"].get<double>() - la[i]["loss"].get<double>()) /
                                std::abs(la[i]["loss"].get<double>()));
  EXPECT_DOUBLE_EQ(cmp["loss_max_rel_diff"].get<double>(), worst);
  // The curves of identical rounds are identical.
  EXPECT_TRUE(sides[0]["curves"]["identical_across_rounds"].get<bool>());
}

// A side that offloads its optimizer keeps its fp32 masters on the host: the verdict must not say
// the other side alone "keeps separate fp32 master weights", and names the host bytes the device
// totals leave out (2026-11-28 trial: transformers' ds_config_zero2.json, offload_optimizer cpu,
// against ms-swift's zero2.json was explained by "msswift_zero2 keeps separate fp32 master weights").
TEST(CompareAnalysis, OffloadedStatesAreNamedAndAnOffloadedMasterIsStillKept) {
  const auto off = smoke("zero2_bf16_zero-offload-optimizer-cpu");
  const auto c = compare_of({rounds("offloaded", off, {1, 1}), rounds("on_device", smoke("zero2_bf16"), {1, 1})});
  const auto& cmp = c["comparisons"][0];
  EXPECT_TRUE(cmp["keeps_master"]["side"].get<bool>());
  EXPECT_TRUE(cmp["keeps_master"]["baseline"].get<bool>()) << "its fp32 master is on the host";
  const std::string v = c["verdict"];
  EXPECT_EQ(v.find("keeps separate"), std::string::npos) << v;
  int64_t host = 0;
  for (const auto& rk : off["ranks"]) {
    int64_t t = 0;
    for (const char* k : {"params", "master_params", "grads", "optimizer", "buffers"})
      t += rk["memory"]["model_states_bytes"]["host"].value(k, int64_t(0));
    host = std::max(host, t);
  }
  ASSERT_GT(host, 0);
  EXPECT_EQ(c["sides"][0]["memory"]["max"]["host_model_states_total_bytes"].get<int64_t>(), host);
  EXPECT_TRUE(c["sides"][1]["memory"]["max"]["host_model_states_total_bytes"].is_null());
  EXPECT_NE(v.find("offloaded to the host, not counted in those: " + fmt("%.1f", host / 1048576.0) + " MiB for offloaded"),
            std::string::npos)
      << v;
}

// Both sides offloaded, the baseline wholly (FSDP2 CPUOffloadPolicy: no model state on the device,
// so no ratio): the verdict said nothing of model states at all (round 3 of the real-config trial,
// nngabe/qlora_graphrag's fsdp2.yaml vs xtuner's deepspeed_zero3_offload.json). Now it names the
// device bytes and each side's host bytes.
TEST(CompareAnalysis, AWhollyOffloadedBaselineStillHasItsModelStatesNamed) {
  const auto f = smoke("fsdp2_mixed_fsdp2-offload-policy-cpu");
  const auto z = smoke("zero3_bf16_zero3-offload-optimizer-cpu");
  const auto c = compare_of({rounds("fsdp2_off", f, {1, 1}), rounds("zero3_off", z, {1, 1})});
  const auto& sides = c["sides"];
  ASSERT_EQ(sides[0]["memory"]["max"]["model_states_total_bytes"].get<double>(), 0.0);
  ASSERT_FALSE(c["comparisons"][0]["model_states_ratio"].is_number());
  const double fh = sides[0]["memory"]["max"]["host_model_states_total_bytes"].get<double>();
  const double zh = sides[1]["memory"]["max"]["host_model_states_total_bytes"].get<double>();
  ASSERT_GT(fh, 0);
  ASSERT_GT(zh, 0);
  const std::string v = c["verdict"];
  EXPECT_NE(v.find("Model-state memory per rank on the device: " +
                   fmt("%.1f", sides[1]["memory"]["max"]["model_states_total_bytes"].get<double>() / 1048576.0) +
                   " MiB for zero3_off vs 0.0 MiB for fsdp2_off; offloaded to the host: " + fmt("%.1f", fh / 1048576.0) +
                   " MiB for fsdp2_off, " + fmt("%.1f", zh / 1048576.0) + " MiB for zero3_off. "),
            std::string::npos)
      << v;
}

// ZeRO-3 fp32 vs FSDP2 fp32 (the committed cpu-smoke reports; the real-config trial of
// 2026-11-28 round 2 compared trl's multi_gpu_deepspeed_zero3.yaml with accelerate's fsdp2.yaml):
// the largest category is DeepSpeed's reduce buffers, not its fp32 masters, so the masters are a
// second fact, not the explanation ("...is buffers (...): zero3 keeps separate fp32 master weights").
TEST(CompareAnalysis, MastersExplainTheLargestCategoryOnlyWhenTheyAreIt) {
  const auto c = compare_of({rounds("fsdp2", smoke("fsdp2_fp32"), {1, 1}), rounds("zero3", smoke("zero3_fp32"), {1, 1})});
  const auto& cmp = c["comparisons"][0];
  ASSERT_EQ(cmp["largest_category_difference"]["category"], "buffers");
  ASSERT_TRUE(cmp["keeps_master"]["side"].get<bool>());
  ASSERT_FALSE(cmp["keeps_master"]["baseline"].get<bool>());
  const std::string v = c["verdict"];
  EXPECT_EQ(v.find("): zero3 keeps separate"), std::string::npos) << v;
  EXPECT_NE(v.find("the largest difference by category is buffers ("), std::string::npos) << v;
  EXPECT_NE(v.find(" MiB on zero3); zero3 also keeps separate fp32 master weights"), std::string::npos) << v;
}

TEST(CompareAnalysis, NoPlantedDifferenceIsNotBeyondNoise) {
  // Same report both sides, jittered differently: the ratio's interval contains 1.
  const auto c = compare_of({rounds("a", smoke("fsdp_fp32"), {1.00, 1.02, 0.98, 1.01, 0.99, 1.00}),
                             rounds("b", smoke("fsdp_fp32"), {1.01, 0.99, 1.00, 0.98, 1.02, 1.00})});
  const auto& cmp = c["comparisons"][0];
  EXPECT_FALSE(cmp["beyond_noise"].get<bool>());
  EXPECT_LE(cmp["throughput_ratio"]["lo"].get<double>(), 1.0);
  EXPECT_GE(cmp["throughput_ratio"]["hi"].get<double>(), 1.0);
  const std::string v = c["verdict"];
  EXPECT_NE(v.find("differ in tokens/GPU/s by no more than the noise"), std::string::npos) << v;
  EXPECT_NE(v.find("agree to 0.0e+00"), std::string::npos) << v;
  EXPECT_TRUE(c["config_differences"].empty());
}

TEST(CompareAnalysis, FailedRunsAreShownNotFatal) {
  auto a = rounds("ddp_fp32", smoke("ddp_fp32"), {1, 1, 1});
  auto b = rounds("fsdp_fp32", smoke("fsdp_fp32"), {0.9, 0.9, 0.9});
  b.runs[1] = reports::failed_report("timeout", "cell exceeded its 10s timeout", json::object());
  auto c = compare_of({a, b});
  EXPECT_EQ(c["sides"][1]["ok_runs"], 2);
  EXPECT_EQ(c["sides"][1]["runs"][1]["state"], "timeout");
  EXPECT_EQ(c["comparisons"][0]["paired_rounds"], 2);  // the failed round is not paired
  EXPECT_NE(c["verdict"].get<std::string>().find("fsdp_fp32: 1 of 3 runs failed"), std::string::npos);
  for (auto& r : b.runs) r = reports::failed_report("oom", "out of memory", json::object());
  c = compare_of({a, b});
  const std::string v = c["verdict"];
  EXPECT_NE(v.find("fsdp_fp32 had no successful run (3 failed; first: oom: out of memory)"), std::string::npos) << v;
  EXPECT_TRUE(c["config_differences"].empty());  // nothing to diff against a side without a report
}

TEST(CompareAnalysis, ConfigDifferencesHaveEffects) {
  const auto fsdp = reports::run_report_from_json(smoke("fsdp_mixed"));
  const auto zero3 = reports::run_report_from_json(smoke("zero3_bf16"));
  const auto diffs = config_differences({&fsdp.config, &zero3.config});
  bool bucket = false;
  for (const auto& d : diffs) {
    EXPECT_FALSE(d["effect"].get<std::string>().empty());
    if (d["key"] == "options.reduce_bucket_size") {
      bucket = true;
      EXPECT_TRUE(d["values"][0].is_null());
      EXPECT_EQ(d["values"][1], 500000000);
      EXPECT_NE(d["effect"].get<std::string>().find("IPG"), std::string::npos);
    }
  }
  EXPECT_TRUE(bucket);
  EXPECT_EQ(config_effect("options.some_future_key"), "no description");
  EXPECT_TRUE(is_workload_key("train.micro_batch"));
}

// Every option a built-in backend writes into a report has an effect sentence: compare's config
// diff never says "no description" for one. The options of every committed cpu-smoke baseline cell
// (every backend but zero0, each precision, the offload variants) and of zero0's reports
// (tests/data/resolved/zero0_reports.json). A dotted key is described at its own path first
// (offload_optimizer.device) and else by its last name (reduce_bucket_size).
TEST(CompareAnalysis, EveryOptionABuiltInBackendReportsHasAnEffect) {
  std::vector<std::pair<std::string, json>> options;  // (where from, config.backend.options)
  const auto index = json::parse(std::ifstream(kSmoke + "index.json"));
  for (const auto& cell : index["cells"]) {
    const std::string name = cell["id"];
    options.push_back({name, smoke(name)["config"]["backend"]["options"]});
  }
  const auto zero0 = json::parse(std::ifstream(kSrc + "/tests/data/resolved/zero0_reports.json"));
  for (const auto& [name, report] : zero0["reports"].items())
    options.push_back({"zero0 " + name, report["config"]["backend"]["options"]});
  ASSERT_GE(options.size(), 25u);
  std::set<std::string> undescribed;
  std::function<void(const json&, const std::string&)> walk = [&](const json& j, const std::string& path) {
    if (j.is_object() && !j.empty()) {
      for (const auto& [k, v] : j.items()) walk(v, path + "." + k);
      return;
    }
    if (config_effect(path) == "no description") undescribed.insert(path);
  };
  for (const auto& [from, o] : options) {
    ASSERT_TRUE(o.is_object()) << from;
    walk(o, "options");
  }
  std::string list;
  for (const auto& k : undescribed) list += " " + k;
  EXPECT_TRUE(undescribed.empty()) << undescribed.size() << " option keys without an effect:" << list;
}

TEST(CompareAnalysis, PrecisionPlanIsReadNeverGuessed) {
  json a = smoke("fsdp_mixed"), b = smoke("zero3_bf16");
  a["config"].erase("precision_plan");  // a report from before precision plans existed
  b["config"]["precision_plan"] = {{"load", "bf16"},   {"params", "bf16"}, {"compute", "bf16"},
                                   {"reduce", "bf16"}, {"grads", "bf16"},  {"optimizer_states", "fp32"},
                                   {"master", "fp32"}, {"notes", "x"}};
  const auto c = compare_of({rounds("fsdp_mixed", a, {1}), rounds("zero3_bf16", b, {1})});
  EXPECT_TRUE(c["sides"][0]["precision_plan"].is_null());
  EXPECT_EQ(c["sides"][1]["precision_plan"]["master"], "fp32");
  // One round: a ratio without an interval, said so.
  EXPECT_NE(c["verdict"].get<std::string>().find("in the one paired round (no interval"), std::string::npos);
}

// ---- rendering through the binary, from committed reports -------------------------------------

TEST(CompareRender, FromDirWritesJsonMarkdownHtml) {
  const auto dir = test_support::make_clean_dir("cmp_render");
  ASSERT_FALSE(dir.empty());
  ASSERT_EQ(system(("mkdir -p " + dir + "/runs").c_str()), 0);
  json plan = {{"schema", {{"name", "zerobench.compare-plan"}, {"version", 1}}},
               {"repeat", 2},
               {"timeout_s", 600},
               {"workload", {{"model", "tiny"}, {"nproc", "2"}}},
               {"sides", json::array({{{"label", "fsdp_mixed"}, {"spec", "fsdp:mixed"}, {"options", json::array()}},
                                      {{"label", "zero3_bf16"}, {"spec", "zero3:bf16"}, {"options", json::array()}}})},
               {"cells", json::array()}};
  for (int r = 1; r <= 2; ++r)
    for (int s = 0; s < 2; ++s) {
      const std::string id = std::string(s ? "b_zero3_bf16" : "a_fsdp_mixed") + "_r" + std::to_string(r);
      plan["cells"].push_back({{"id", id}, {"side", s}, {"round", r}});
      reports::write_json_atomic(dir + "/runs/" + id + ".json",
                                 scaled(smoke(s ? "zero3_bf16" : "fsdp_mixed"), 1.0 + 0.01 * r));
    }
  reports::write_json_atomic(dir + "/plan.json", plan);
  const auto r = run_zerobench("compare --from-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json c = json::parse(slurp(dir + "/compare.json"));
  EXPECT_EQ(c["sides"].size(), 2u);
  EXPECT_EQ(c["sides"][1]["ok_runs"], 2);
  const std::string md = slurp(dir + "/compare.md"), html = slurp(dir + "/compare.html");
  EXPECT_NE(md.find(c["verdict"].get<std::string>()), std::string::npos);
  for (const char* part : {"Table 3", "Table 2", "Memory per rank", "Collectives per step", "Config keys that differ",
                           "options.reduce_bucket_size"}) {
    EXPECT_NE(md.find(part), std::string::npos) << part;
    EXPECT_NE(html.find(part), std::string::npos) << part;
  }
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("Loss per step"), std::string::npos);
  EXPECT_NE(html.find("paired tokens/GPU/s ratio"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained, static
  EXPECT_NE(slurp(dir + "/loss.svg").find("<polyline"), std::string::npos);
  // A missing report is shown as missing, the compare still written, exit 1.
  ASSERT_EQ(system(("rm " + dir + "/runs/b_zero3_bf16_r2.json").c_str()), 0);
  const auto r2 = run_zerobench("compare --from-dir " + dir);
  EXPECT_EQ(r2.exit_code, 1) << r2.output;
  EXPECT_EQ(json::parse(slurp(dir + "/compare.json"))["sides"][1]["runs"][1]["state"], "missing");
  // Bad --from-dir: exit 2, one line.
  const auto r3 = run_zerobench("compare --from-dir " + dir + "/runs");
  EXPECT_EQ(r3.exit_code, 2) << r3.output;
}

// ---- one small end-to-end run -------------------------------------------------------------------

TEST(CompareEndToEnd, TinyTwoSidesTwoRounds) {
  const auto dir = test_support::make_clean_dir("cmp_e2e");
  const std::string args =
      "compare ddp:fp32 fsdp:fp32 --model tiny --nproc 2 --steps 3 --warmup 1 --timeout 300 --out " + dir + " --repeat";
  const std::string args2 = args + " 2";
  const auto r = run_zerobench(args2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json c = json::parse(slurp(dir + "/compare.json"));
  ASSERT_EQ(c["sides"].size(), 2u);
  for (const auto& s : c["sides"]) {
    EXPECT_EQ(s["ok_runs"], 2) << s.dump();
    EXPECT_TRUE(s["curves"]["identical_across_rounds"].get<bool>()) << s["label"];  // same seed, same data
    EXPECT_TRUE(s["comm"]["profiled"].get<bool>());
    EXPECT_EQ(s["curves"]["loss"].size(), 3u);
  }
  // DDP and FSDP in fp32 compute the same losses (docs/crossval.md: bitwise against the frameworks).
  EXPECT_LT(c["comparisons"][0]["loss_max_rel_diff"].get<double>(), 1e-5);
  EXPECT_EQ(c["comparisons"][0]["paired_rounds"], 2);
  // FSDP shards: less model-state memory per rank than DDP.
  EXPECT_LT(c["comparisons"][0]["model_states_ratio"].get<double>(), 1.0);
  for (const char* f : {"/compare.md", "/compare.html", "/plan.json", "/runs/index.json"})
    EXPECT_EQ(system(("test -s " + dir + f).c_str()), 0) << f;
  // Same command again: resumes (nothing re-run), same document but the timestamps-free parts.
  const auto again = run_zerobench(args2);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(json::parse(slurp(dir + "/compare.json")), c);
  // A larger --repeat keeps the finished rounds and adds one.
  const auto more = run_zerobench(args + " 3");
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("a_ddp-fp32_r2"), std::string::npos) << more.output;
  EXPECT_NE(more.output.find("(ok)"), std::string::npos) << more.output;  // run_matrix's mark of a kept run
  const json c3 = json::parse(slurp(dir + "/compare.json"));
  EXPECT_EQ(c3["sides"][0]["ok_runs"], 3);
  EXPECT_EQ(c3["sides"][0]["runs"][0], c["sides"][0]["runs"][0]);  // round 1 reused, not re-run
  // Another compare into the same directory is refused (it would reuse the other plan's runs).
  const auto other = run_zerobench(
      "compare ddp:fp32 fsdp:mixed --model tiny --nproc 2 --repeat 2 --steps 3 "
      "--warmup 1 --out " +
      dir);
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("holds a different compare"), std::string::npos) << other.output;
}

// The committed acceptance compare (reports/results/cpu/compare-blog: the blog's accelerate YAML vs
// DeepSpeed JSON, --model small --nproc 2, 6 rounds) is generated from its committed runs: a
// re-render from them is byte for byte the committed document; a doctored run changes it.
TEST(CompareRender, CommittedBlogCompareRegeneratesFromItsRuns) {
  const std::string committed = kSrc + "/reports/results/cpu/compare-blog";
  const auto dir = test_support::make_clean_dir("cmp_committed");
  ASSERT_EQ(system(("cp -r " + committed + "/. " + dir + "/").c_str()), 0);
  auto r = run_zerobench("compare --from-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  for (const char* f : {"compare.json", "compare.md", "compare.html", "loss.svg", "grad_norm.svg"})
    EXPECT_EQ(slurp(dir + "/" + f), slurp(committed + "/" + f)) << f << " is not what its runs give";
  // Plant: one run's final-step loss changed -> the document changes.
  auto run = json::parse(slurp(dir + "/runs/b_deepspeed_zero3_blog_r1.json"));
  run["steps"].back()["loss"] = run["steps"].back()["loss"].get<double>() + 0.5;
  std::ofstream(dir + "/runs/b_deepspeed_zero3_blog_r1.json") << run.dump();
  r = run_zerobench("compare --from-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(slurp(dir + "/compare.json"), slurp(committed + "/compare.json"));
}

// A backend's option effects are its own (BackendInfo::analysis.option_effects, e.g. zero3_config.cpp) and
// reach the diff through the registry: a backend registered by a program (as the toy backend is)
// describes its keys with no edit to bench/compare; the general sentences (backend, precision,
// config.train) are not overridden by a backend's. Registered last in this file: earlier tests
// see only the built-in backends.
TEST(CompareAnalysis, OptionEffectsComeFromTheRegisteredBackends) {
  EXPECT_NE(config_effect("options.stage3_prefetch_bucket_size").find("all-gathered ahead"), std::string::npos);
  EXPECT_EQ(config_effect("options.bucket_cap_mb"), "DDP all-reduce bucket size: how many all-reduces a step issues");
  EXPECT_EQ(config_effect("options.effects_test_knob"), "no description");
  const std::string general = config_effect("backend");
  backends::BackendInfo info;
  info.name = "effects_test";
  info.analysis.option_effects = {{"effects_test_knob", "a test backend's own knob"},
                                  {"backend", "not the general sentence"}};
  backends::register_backend(info);
  EXPECT_EQ(config_effect("options.effects_test_knob"), "a test backend's own knob");
  EXPECT_EQ(config_effect("backend"), general);
}
