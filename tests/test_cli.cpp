// The zerobench binary end to end: a 2-rank run writes a valid report with a falling loss;
// bad input exits 2 with a one-line message; a failing rank stops the job with no orphans.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "backends/backend_info.hpp"
#include "reports/report.hpp"
#include "tests/run_binary.hpp"

namespace {
using zb::test_support::temp_path;
zb::test_support::BinaryResult run(const std::string& args) { return zb::test_support::run_zerobench(args); }

// Processes whose command line mentions `marker` (the unique --out path of a run).
int processes_mentioning(const std::string& marker) {
  int n = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    if (!std::isdigit(e->d_name[0])) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmdline.find(marker) != std::string::npos) ++n;
  }
  closedir(d);
  return n;
}
}  // namespace

TEST(Cli, TwoRankRunWritesAValidReportWithFallingLoss) {
  const auto out = temp_path("run.json");
  auto r = run("run --nproc 2 --model tiny --backend ddp --steps 20 --data markov --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| ddp | fp32 | 2 |"), std::string::npos) << r.output;
  const auto report = zb::reports::read_report(out);  // throws if it does not match the schema
  EXPECT_EQ(report["env"]["world_size"], 2);
  EXPECT_EQ(report["ranks"].size(), 2u);
  EXPECT_GT(report["summary"]["tokens_per_gpu_per_s"]["median"].get<double>(), 0);
  EXPECT_GT(report["summary"]["mfu"].get<double>(), 0);
  EXPECT_GT(report["summary"]["mfu_6n"].get<double>(), report["summary"]["mfu"].get<double>() * 0.5);
  EXPECT_GT(report["ranks"][1]["memory"]["peak_tracked_bytes"].get<int64_t>(),
            report["ranks"][1]["memory"]["model_states_total_bytes"].get<int64_t>());
  const auto& steps = report["steps"];
  auto mean_loss = [&](size_t from, size_t to) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += steps[i]["loss"].get<double>();
    return s / double(to - from);
  };
  EXPECT_LT(mean_loss(15, 20), mean_loss(0, 5) - 0.05) << "loss did not fall";
  // Both ranks computed the same replica: identical engine-owned bytes and all-reduce bytes.
  EXPECT_EQ(report["ranks"][0]["memory"]["model_states_bytes"], report["ranks"][1]["memory"]["model_states_bytes"]);
  std::remove(out.c_str());
}

TEST(Cli, BadFlagsAndValuesExit2WithOneLineNamingThem) {
  auto r = run("run --steps abc");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  r = run("run --backend megatron");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("megatron"), std::string::npos) << r.output;
  r = run("run --precision fp8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("fp8"), std::string::npos) << r.output;
  r = run("run --model tiny --heads 3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--heads 3"), std::string::npos) << r.output;
  r = run("run --warmup 5 --steps 5");
  EXPECT_EQ(r.exit_code, 2);
  r = run("model-info nope");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("'nope'"), std::string::npos) << r.output;
}

TEST(Cli, ModelInfoDescribesLlama70bWithoutAllocatingIt) {
  auto r = run("model-info llama2-70b --world-size 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["params"]["total"], 68976648192LL);
  EXPECT_EQ(j["model_state_bytes_per_rank"]["ddp:fp32"]["params"], 68976648192LL * 4);
}

class LauncherFailure : public ::testing::TestWithParam<std::string> {};

TEST_P(LauncherFailure, AFailingRankStopsTheJobNamingTheRank) {
  const auto kind = GetParam();
  const auto out = temp_path("fault_" + kind + ".json");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run("run --nproc 3 --model tiny --steps 50 --fault-inject " + kind + ":1:2 --out " + out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  const std::string expected = kind == "exit" ? "exited with code 1" : "signal 6";
  EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  EXPECT_LT(seconds, 60) << "the surviving ranks were not stopped promptly";
  EXPECT_EQ(processes_mentioning(out), 0) << "orphan rank processes left running";
  // The failure is recorded as a report.
  auto report = zb::reports::read_report(out);
  EXPECT_EQ(report["status"]["state"], "failed");
  std::remove(out.c_str());
}

INSTANTIATE_TEST_SUITE_P(Kinds, LauncherFailure, ::testing::Values("exit", "crash"));

TEST(Launcher, AHangingRankIsStoppedByTheTimeout) {
  const auto out = temp_path("hang.json");
  auto r = run("run --nproc 2 --model tiny --steps 50 --timeout 8 --fault-inject hang:0:1 --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("timed out"), std::string::npos) << r.output;
  EXPECT_EQ(processes_mentioning(out), 0);
  EXPECT_EQ(zb::reports::read_report(out)["status"]["state"], "timeout");
  std::remove(out.c_str());
}

// The help is the registry's (issue 36: a hand-typed list had drifted: zero1/zero2 without fp16).
TEST(Cli, RunHelpListsEveryBackendWithItsOwnRegisteredPrecisions) {
  auto r = run("run --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string flat;  // CLI11 may wrap a long description
  for (char c : r.output) {
    const bool space = c == ' ' || c == '\n' || c == '\t';
    if (space && (flat.empty() || flat.back() == ' ')) continue;
    flat += space ? ' ' : c;
  }
  std::string names;
  for (const auto& b : zb::backends::registered_backends()) {
    std::string p;
    for (const auto& x : b.precisions) p += (p.empty() ? "" : "|") + x;
    EXPECT_NE(flat.find(b.name + ": " + p), std::string::npos) << b.name << ": " << p << "\n" << r.output;
    names += (names.empty() ? "" : "|") + b.name;
  }
  EXPECT_NE(flat.find("training engine: " + names), std::string::npos) << r.output;
  EXPECT_EQ(flat.find("(zero3); see --config"), std::string::npos) << "--deepspeed-config picks zero1|zero2|zero3";
}

// crossval's --precision help lists every backend with a reference framework and its registered
// modes (it once read "fsdp/fsdp2: fp32|low|mixed; zero3: fp32|bf16": no zero1/zero2, no fp16).
TEST(Cli, CrossvalHelpListsEveryCrossvalidatedBackendWithItsPrecisions) {
  auto r = run("crossval --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string flat;
  for (char c : r.output) {
    const bool space = c == ' ' || c == '\n' || c == '\t';
    if (space && (flat.empty() || flat.back() == ' ')) continue;
    flat += space ? ' ' : c;
  }
  int listed = 0;
  for (const auto& b : zb::backends::registered_backends()) {
    if (!b.crossval) continue;
    std::string p;
    for (const auto& x : b.precisions) p += (p.empty() ? "" : "|") + x;
    EXPECT_NE(flat.find(b.name + ": " + p), std::string::npos) << b.name << ": " << p << "\n" << r.output;
    ++listed;
  }
  EXPECT_GE(listed, 5) << "fsdp, fsdp2, zero1, zero2, zero3";
  EXPECT_EQ(flat.find("fsdp/fsdp2: fp32|low|mixed"), std::string::npos) << "the hand-typed list is gone";
}
