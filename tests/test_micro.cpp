// The Google Benchmark micro-benchmark suite: `zerobench micro` on 2 Gloo ranks in its CI mode
// (Google Benchmark's own JSON, nccl-tests' busbw/algbw counters), `regress` on that JSON with
// the U test, the GEMM shapes, and the calibration: alpha/busbw fits and the datasheet presets.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "backends/common/comm.hpp"
#include "analysis/micro/gemm.hpp"
#include "analysis/projection/calibration.hpp"
#include "reports/regress.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using nlohmann::json;
using backends::common::CollectiveKind;

namespace {
json read_json(const std::string& path) { return json::parse(std::ifstream(path)); }

// A Google Benchmark JSON with `reps` repetitions of two collective entries, busbw scaled by `scale`.
json gb_fixture(int reps, double scale, unsigned seed = 1) {
  json bs = json::array();
  unsigned x = seed;
  auto jitter = [&x]() {  // +-1%, deterministic
    x = x * 1103515245u + 12345u;
    return 1.0 + (double((x >> 16) % 2001) - 1000.0) / 100000.0;
  };
  for (const char* name : {"all_gather/fp32/W:2/bytes:65536", "reduce_scatter/fp32/W:2/bytes:65536"})
    for (int r = 0; r < reps; ++r) {
      const double t = 100.0 * jitter() / scale;  // us
      const double algbw = 65536.0 / (t * 1e-6) / 1e9;
      bs.push_back({{"name", name}, {"run_name", name}, {"run_type", "iteration"}, {"repetitions", reps},
                    {"repetition_index", r}, {"iterations", 100}, {"real_time", t}, {"cpu_time", t / 10},
                    {"time_unit", "us"}, {"bytes", 65536.0}, {"algbw", algbw}, {"busbw", algbw * 0.5},
                    {"world_size", 2.0}});
    }
  return {{"context", {{"zerobench_world_size", "2"}}}, {"benchmarks", bs}};
}
}  // namespace

TEST(MicroCli, QuickTwoRankRunWritesGoogleBenchmarkJsonWithNcclTestsCounters) {
  const auto out = test_support::temp_path("micro.json"), cal = test_support::temp_path("cal.json");
  const auto r = test_support::run_zerobench("micro --nproc 2 --quick --out " + out + " --calibrate " + cal +
                                             " --benchmark_repetitions=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(out);
  ASSERT_TRUE(reports::is_google_benchmark_json(j));
  EXPECT_EQ(j["context"]["zerobench_world_size"], "2");
  EXPECT_EQ(j["context"]["zerobench_pg_backend"], "gloo");
  std::map<std::string, int> per_kind;
  bool saw_gemm = false, saw_copy = false, saw_offload = false, saw_host_adam = false;
  for (const auto& b : j["benchmarks"]) {
    const std::string name = b["name"];
    if (b.value("run_type", "") != "iteration") continue;
    EXPECT_GT(b["real_time"].get<double>(), 0) << name;
    if (name.rfind("gemm/", 0) == 0) {
      saw_gemm = true;
      EXPECT_GT(b["tflops"].get<double>(), 0) << name;
      continue;
    }
    if (name.rfind("copy/", 0) == 0 || name.rfind("cast/", 0) == 0) {
      saw_copy = true;
      EXPECT_GT(b["GBps"].get<double>(), 0) << name;
      continue;
    }
    if (name.rfind("offload/", 0) == 0) {  // host<->device copies and the host optimizer (offload.cpp)
      if (name.rfind("offload/host_adamw/", 0) == 0) {
        saw_host_adam = true;
        EXPECT_GT(b["ns_per_param"].get<double>(), 0) << name;
      } else {
        saw_offload = true;
        EXPECT_GT(b["GBps"].get<double>(), 0) << name;
      }
      continue;
    }
    const std::string kind = name.substr(0, name.find('/'));
    per_kind[kind]++;
    ASSERT_TRUE(b.contains("busbw") && b.contains("algbw") && b.contains("bytes")) << name;
    EXPECT_EQ(b["label"], "fp32");
    EXPECT_EQ(b["world_size"].get<double>(), 2.0);
    // nccl-tests: algbw = S / t (GB/s), busbw = algbw x factor.
    const double t = b["real_time"].get<double>() * 1e-6;  // us
    const double bytes = b["bytes"].get<double>();
    EXPECT_NEAR(b["algbw"].get<double>(), bytes / t / 1e9, 1e-6 * b["algbw"].get<double>()) << name;
    double factor = 1.0;
    if (kind == "all_gather" || kind == "reduce_scatter") factor = 0.5;
    if (kind == "all_reduce") factor = 1.0;  // 2(W-1)/W at W=2
    EXPECT_NEAR(b["busbw"].get<double>(), b["algbw"].get<double>() * factor, 1e-9 * b["algbw"].get<double>()) << name;
    // The size in the name is the message size (divisible by W x 4 bytes here).
    EXPECT_EQ(int64_t(bytes), std::stoll(name.substr(name.rfind(':') + 1))) << name;
  }
  // 1 KiB .. 64 KiB in x4 steps: 1, 4, 16, 64 KiB; 3 repetitions each.
  for (const char* k : {"all_gather", "reduce_scatter", "all_reduce", "broadcast"}) EXPECT_EQ(per_kind[k], 4 * 3) << k;
  EXPECT_TRUE(saw_gemm);
  EXPECT_TRUE(saw_copy);
  EXPECT_TRUE(saw_offload);
  EXPECT_TRUE(saw_host_adam);
  // --calibrate: one alpha/busbw fit per collective kind at W=2.
  const auto c = read_json(cal);
  EXPECT_EQ(c["schema"]["name"], "zerobench.calibration");
  EXPECT_EQ(c["collectives"].size(), 4u);
  for (const auto& f : c["collectives"]) {
    EXPECT_EQ(f["world_size"], 2);
    EXPECT_EQ(f["points"], 4);
    EXPECT_GE(f["alpha_s"].get<double>(), 0.0);
  }
  // The file regresses against itself: pass. A planted 20% busbw drop: regression. The run's
  // repetitions on a loaded CPU can spread by more than 20%, and then a U test rightly calls a
  // 20% shift insignificant: the drop is planted on a copy whose repetitions all carry their
  // first repetition's numbers (a steady baseline), so it must be flagged.
  auto same = test_support::run_zerobench("regress --baseline " + out + " --current " + out);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  auto steady = j;
  std::map<std::string, json> first;
  for (auto& b : steady["benchmarks"]) {
    if (b.value("run_type", "") != "iteration") continue;
    const std::string name = b["name"];
    if (!first.count(name)) first[name] = b;
    for (const char* k : {"real_time", "cpu_time", "busbw", "algbw"})
      if (b.contains(k)) b[k] = first[name][k];
  }
  const auto steady_file = test_support::temp_path("micro_steady.json");
  reports::write_json_atomic(steady_file, steady);
  auto dropped = steady;
  for (auto& b : dropped["benchmarks"])
    if (b.contains("busbw")) {
      b["busbw"] = b["busbw"].get<double>() * 0.8;
      b["algbw"] = b["algbw"].get<double>() * 0.8;
    }
  const auto drop_file = test_support::temp_path("micro_drop.json");
  reports::write_json_atomic(drop_file, dropped);
  auto flagged = test_support::run_zerobench("regress --baseline " + steady_file + " --current " + drop_file + " --json");
  EXPECT_EQ(flagged.exit_code, 1) << flagged.output;
  const auto verdict = json::parse(flagged.output);
  bool busbw_flagged = false;
  for (const auto& ch : verdict["checks"])
    if (ch["metric"] == "busbw.median" && ch["regression"].get<bool>()) busbw_flagged = true;
  EXPECT_TRUE(busbw_flagged) << flagged.output;
  for (const auto& f : {out, cal, drop_file, steady_file}) std::remove(f.c_str());
}

TEST(MicroCli, FlagsThatWouldBreakLockstepOrOutputAreRefused) {
  for (const char* bad : {"--benchmark_out=x.json", "--benchmark_enable_random_interleaving=true", "--bogus",
                          "--dtypes fp8", "--suite nope", "--min-bytes 0", "--calibrate c.json"}) {
    const auto r = test_support::run_zerobench(std::string("micro --quick ") + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
  }
}

TEST(MicroCli, ConcurrentGemmRunsTheSquareGemmBesideEveryCollectiveOnCpuOnly) {
  const auto out = test_support::temp_path("micro_cg.json");
  auto r = test_support::run_zerobench("micro --nproc 2 --quick --suite comm --threads 1 --concurrent-gemm "
                                       "--max-bytes 4096 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int collectives = 0;
  const auto j = read_json(out);
  for (const auto& b : j["benchmarks"]) {
    if (b.value("run_type", "") != "iteration") continue;
    ++collectives;
    EXPECT_GT(b.value("concurrent_gemm_runs", 0.0), 0.0) << b["name"];  // a GEMM was running beside it
  }
  EXPECT_GT(collectives, 0);
  std::remove(out.c_str());
  r = test_support::run_zerobench("micro --quick --device cuda --concurrent-gemm");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(RegressGoogleBenchmark, IdenticalPassesAPlantedTwentyPercentBusbwDropIsFlagged) {
  const auto base = gb_fixture(5, 1.0, 1);
  EXPECT_FALSE(reports::compare_benchmarks(base, base, {}).regression());
  const auto noisy = gb_fixture(5, 1.0, 2);  // +-1% noise only
  EXPECT_FALSE(reports::compare_benchmarks(base, noisy, {}).regression())
      << reports::compare_benchmarks(base, noisy, {}).to_text();
  const auto slow = gb_fixture(5, 0.8, 3);  // time x1.25, busbw x0.8
  const auto r = reports::compare_benchmarks(base, slow, {});
  ASSERT_TRUE(r.regression()) << r.to_text();
  int flagged_busbw = 0, flagged_time = 0;
  for (const auto& c : r.checks) {
    if (c.metric == "busbw.median" && c.regression) ++flagged_busbw;
    if (c.metric == "real_time.median" && c.regression) ++flagged_time;
  }
  EXPECT_EQ(flagged_busbw, 2);
  EXPECT_EQ(flagged_time, 2);
  // Faster is never a regression.
  EXPECT_FALSE(reports::compare_benchmarks(slow, base, {}).regression());
  // Timing not gated (shared CPU CI): reported only.
  reports::RegressOptions report_only;
  report_only.gate_timing = false;
  EXPECT_FALSE(reports::compare_benchmarks(base, slow, report_only).regression());
}

TEST(RegressGoogleBenchmark, FewRepetitionsAreNotGatedAndMissingOrChangedBenchmarksAre) {
  const auto one = gb_fixture(1, 1.0), one_slow = gb_fixture(1, 0.5);
  const auto r = reports::compare_benchmarks(one, one_slow, {});
  EXPECT_FALSE(r.regression()) << r.to_text();
  EXPECT_NE(r.to_text().find("needs >= 3 repetitions"), std::string::npos) << r.to_text();
  auto fewer = gb_fixture(5, 1.0);
  json kept = json::array();
  for (const auto& b : fewer["benchmarks"])
    if (b["name"] != "reduce_scatter/fp32/W:2/bytes:65536") kept.push_back(b);
  fewer["benchmarks"] = kept;
  const auto m = reports::compare_benchmarks(gb_fixture(5, 1.0), fewer, {});
  EXPECT_TRUE(m.regression());
  EXPECT_EQ(m.missing, std::vector<std::string>{"reduce_scatter/fp32/W:2/bytes:65536"});
  auto resized = gb_fixture(5, 1.0);
  for (auto& b : resized["benchmarks"]) b["bytes"] = 65540.0;
  EXPECT_TRUE(reports::compare_benchmarks(gb_fixture(5, 1.0), resized, {}).regression());
  // Mixing a Google Benchmark file with a zerobench report is a usage error.
  const auto gb = test_support::temp_path("gb.json");
  reports::write_json_atomic(gb, gb_fixture(3, 1.0));
  const auto res = test_support::run_zerobench("regress --baseline " + gb + " --current " + zb::bench::source_dir() +
                                               "/reports/baselines/cpu-smoke");
  EXPECT_EQ(res.exit_code, 2) << res.output;
  std::remove(gb.c_str());
}

TEST(GemmShapes, EveryLinearOfTheModelInThreePassesOnceEach) {
  auto cfg = models::preset("tiny");  // H 128, KV 64, F 352, V 2048
  const auto shapes = analysis::micro::model_gemm_shapes(cfg, 256);
  std::map<std::string, analysis::micro::GemmShape> by_name;
  for (const auto& s : shapes) by_name[s.name] = s;
  auto mnk = [&](const std::string& n) {
    const auto& s = by_name.at(n);
    return std::array<int64_t, 3>{s.m, s.n, s.k};
  };
  // (a_transposed, b_transposed): forward x·Wᵀ, dgrad dy·W, wgrad dyᵀ·x, as autograd runs them.
  auto layout = [&](const std::string& n) { return std::pair<bool, bool>{by_name.at(n).a_transposed, by_name.at(n).b_transposed}; };
  EXPECT_EQ(mnk("lm_head.fwd"), (std::array<int64_t, 3>{256, 2048, 128}));
  EXPECT_EQ(layout("lm_head.fwd"), (std::pair<bool, bool>{false, true}));
  EXPECT_EQ(mnk("lm_head.dgrad"), (std::array<int64_t, 3>{256, 128, 2048}));
  EXPECT_EQ(layout("lm_head.dgrad"), (std::pair<bool, bool>{false, false}));
  EXPECT_EQ(mnk("lm_head.wgrad"), (std::array<int64_t, 3>{2048, 128, 256}));
  EXPECT_EQ(layout("lm_head.wgrad"), (std::pair<bool, bool>{true, false}));
  EXPECT_EQ(mnk("wq.fwd"), (std::array<int64_t, 3>{256, 128, 128}));
  EXPECT_EQ(mnk("wk.fwd"), (std::array<int64_t, 3>{256, 64, 128}));
  EXPECT_EQ(mnk("w_gate.fwd"), (std::array<int64_t, 3>{256, 352, 128}));
  EXPECT_EQ(mnk("w_gate.dgrad"), (std::array<int64_t, 3>{256, 128, 352}));
  // w_down's forward has w_gate's dgrad's shape but not its layout: a kernel of its own.
  EXPECT_EQ(mnk("w_down.fwd"), (std::array<int64_t, 3>{256, 128, 352}));
  EXPECT_EQ(layout("w_down.fwd"), (std::pair<bool, bool>{false, true}));
  EXPECT_EQ(mnk("w_down.dgrad"), (std::array<int64_t, 3>{256, 352, 128}));  // w_gate.fwd's shape, as stored
  EXPECT_EQ(layout("w_down.dgrad"), (std::pair<bool, bool>{false, false}));
  EXPECT_EQ(mnk("wq.dgrad"), (std::array<int64_t, 3>{256, 128, 128}));  // square: wq.fwd's shape, as stored
  EXPECT_EQ(by_name.count("w_down.wgrad"), 1u);
  EXPECT_EQ(by_name.count("wo.fwd"), 0u);  // wq.fwd's shape and layout
  EXPECT_EQ(by_name.count("embedding.fwd"), 0u);
  // No shape repeats in the same layout.
  std::set<std::tuple<int64_t, int64_t, int64_t, bool, bool>> distinct;
  for (const auto& s : shapes) distinct.insert({s.m, s.n, s.k, s.a_transposed, s.b_transposed});
  EXPECT_EQ(distinct.size(), shapes.size());
  EXPECT_DOUBLE_EQ(shapes.front().flops(), 2.0 * 256 * 2048 * 128);
}

TEST(GemmShapes, TheProbeComputesItsProductInEachLayout) {
  const at::Device cpu(at::kCPU);
  // The peak probe multiplies as a Linear's forward does: B held as [n, k], read transposed.
  const auto probe = analysis::micro::peak_probe_shape(cpu, at::kBFloat16);
  EXPECT_EQ(probe.n, 512);
  EXPECT_FALSE(probe.a_transposed);
  EXPECT_TRUE(probe.b_transposed);
  for (const bool a_t : {false, true})
    for (const bool b_t : {false, true}) {
      analysis::micro::GemmShape s{"t", 24, 40, 16};
      s.a_transposed = a_t;
      s.b_transposed = b_t;
      analysis::micro::Gemm g(cpu, at::kFloat, s);
      EXPECT_EQ(g.a().sizes(), (at::IntArrayRef{24, 16}));
      EXPECT_EQ(g.b().sizes(), (at::IntArrayRef{16, 40}));
      EXPECT_EQ(g.a().is_contiguous(), !a_t);  // a transposed view of a [k, m] tensor
      EXPECT_EQ(g.b().is_contiguous(), !b_t);
      g.run();
      EXPECT_TRUE(at::allclose(g.c(), at::mm(g.a().contiguous(), g.b().contiguous()), 1e-5, 1e-5)) << a_t << b_t;
    }
}

TEST(Calibration, AFitRecoversAlphaAndBusBandwidthFromNoiselessPoints) {
  // t = 20 us + S * (W-1)/W / 2.5 GB/s at W=4 for an all-gather; 1 KiB .. 16 MiB.
  json bs = json::array();
  for (int64_t s = 1024; s <= (int64_t(16) << 20); s *= 4) {
    const double t = 20e-6 + double(s) * 0.75 / 2.5e9;
    bs.push_back({{"name", "all_gather/bf16/W:4/bytes:" + std::to_string(s)}, {"run_type", "iteration"},
                  {"real_time", t * 1e6}, {"time_unit", "us"}, {"bytes", double(s)}, {"busbw", 0.0}, {"world_size", 4.0}});
  }
  bs.push_back({{"name", "gemm/bf16/square/m:512/n:512/k:512"}, {"run_type", "iteration"}, {"real_time", 1.0},
                {"time_unit", "us"}, {"tflops", 0.25}});
  const auto c = analysis::projection::Calibration::fit({{"context", {{"zerobench_host_cores", "2"}}}, {"benchmarks", bs}}, "x");
  ASSERT_EQ(c.fits.size(), 1u);
  EXPECT_NEAR(c.fits[0].alpha_s, 20e-6, 1e-12);
  EXPECT_NEAR(c.fits[0].busbw_gbps, 2.5, 1e-9);
  EXPECT_LT(c.fits[0].max_rel_residual, 1e-9);
  EXPECT_EQ(c.host_cores, 2);
  ASSERT_EQ(c.gemm_tflops.size(), 1u);
  EXPECT_DOUBLE_EQ(c.gemm_tflops[0].second, 0.25);
  // The fitted model reproduces its own points, and extrapolates to W=2 with alpha scaled by
  // ring steps (1 of 3) and the same bus bandwidth.
  EXPECT_NEAR(c.collective_s(CollectiveKind::kAllGather, "bf16", 1 << 20, 4, 1), 20e-6 + (1 << 20) * 0.75 / 2.5e9, 1e-12);
  EXPECT_NEAR(c.collective_s(CollectiveKind::kAllGather, "bf16", 1 << 20, 2, 1), 20e-6 / 3 + (1 << 20) * 0.5 / 2.5e9, 1e-12);
  EXPECT_EQ(c.collective_s(CollectiveKind::kAllGather, "bf16", 1 << 20, 1, 1), 0.0);
  // Round trip through the calibration file.
  const auto back = analysis::projection::Calibration::from_json(c.to_json());
  EXPECT_DOUBLE_EQ(back.fits[0].busbw_gbps, c.fits[0].busbw_gbps);
  EXPECT_THROW(analysis::projection::Calibration::fit({{"benchmarks", json::array()}}, "empty"), UsageError);
}

TEST(Calibration, PresetsFollowNcclRingLatencyAndTheSlowestLinkAcrossNodes) {
  const auto c = analysis::projection::Calibration::load("a100-nvlink");
  ASSERT_TRUE(c.preset);
  EXPECT_DOUBLE_EQ(c.preset->peak_tflops, 312);
  EXPECT_DOUBLE_EQ(c.preset->intra_busbw_gbps, 300);
  const int64_t gib = int64_t(1) << 30;
  // One node, W=4 all-gather of 1 GiB: 8.4 + 3 x 3.4 us, then S x 3/4 / 300 GB/s.
  EXPECT_NEAR(c.collective_s(CollectiveKind::kAllGather, "bf16", gib, 4, 1), 18.6e-6 + gib * 0.75 / 300e9, 1e-12);
  // All-reduce: 2(W-1) steps and factor 2(W-1)/W.
  EXPECT_NEAR(c.collective_s(CollectiveKind::kAllReduce, "bf16", gib, 4, 1), (8.4 + 6 * 3.4) * 1e-6 + gib * 1.5 / 300e9,
              1e-12);
  // 16 ranks on 2 nodes: 15 steps, 1 across the network (14 us), busbw min(300, 50).
  EXPECT_NEAR(c.collective_s(CollectiveKind::kReduceScatter, "bf16", gib, 16, 2),
              (8.4 + 14 * 3.4 + 14.0) * 1e-6 + gib * (15.0 / 16) / 50e9, 1e-12);
  const auto h = analysis::projection::Calibration::load("h100-sxm");
  EXPECT_DOUBLE_EQ(h.preset->peak_tflops, 989);
  EXPECT_DOUBLE_EQ(h.preset->intra_busbw_gbps, 450);
  for (const auto& p : analysis::projection::presets()) EXPECT_GE(p.sources.size(), 7u) << p.name;  // every figure sourced
  EXPECT_THROW(analysis::projection::Calibration::load("b300-dream"), UsageError);
}
