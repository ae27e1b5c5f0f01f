// Single-process emulation of W ranks: one process playing rank r owns exactly the bytes and
// issues exactly the collectives (count and bytes per kind) that rank r of a real W-rank Gloo
// run does.
#include <gtest/gtest.h>

#include "reports/report.hpp"
#include "tests/run_binary.hpp"

using nlohmann::json;

namespace {
json run_report(const std::string& args, const std::string& name) {
  const auto out = zb::test_support::temp_path(name + ".json");
  auto r = zb::test_support::run_zerobench("run " + args + " --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto report = zb::reports::read_report(out);
  std::remove(out.c_str());
  return report;
}
}  // namespace

TEST(Emulation, OneProcessMatchesARealRankOfAThreeRankRun) {
  // vocab 251: no unit or weight divides by 3, so padding is exercised.
  const std::string model = "--model tiny --vocab 251 --layers 2 --micro-batch 1 --seq-len 16 --steps 2 --warmup 1";
  for (const std::string mode : {"--backend fsdp --precision mixed", "--backend fsdp --precision low --sharding-strategy "
                                 "SHARD_GRAD_OP", "--backend zero3 --precision bf16 --persistence-threshold 1000"}) {
    SCOPED_TRACE(mode);
    const auto real = run_report("--nproc 3 " + model + " " + mode, "real");
    for (int rank : {0, 2}) {
      const auto emu = run_report("--emulate-world-size 3 --emulate-rank " + std::to_string(rank) + " " + model + " " +
                                      mode,
                                  "emu" + std::to_string(rank));
      EXPECT_TRUE(emu["env"]["emulated"].get<bool>());
      EXPECT_EQ(emu["env"]["world_size"], 3);
      ASSERT_EQ(emu["ranks"].size(), 1u);
      const auto& e = emu["ranks"][0];
      const auto& r = real["ranks"][size_t(rank)];
      EXPECT_EQ(e["memory"]["model_states_bytes"], r["memory"]["model_states_bytes"]) << "rank " << rank;
      for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce", "broadcast"}) {
        EXPECT_EQ(e["comm"][kind]["count"], r["comm"][kind]["count"]) << kind;
        EXPECT_EQ(e["comm"][kind]["bytes"], r["comm"][kind]["bytes"]) << kind;
      }
      EXPECT_NE(emu["summary"]["throughput_note"].get<std::string>().find("exclude"), std::string::npos);
    }
  }
}

TEST(Emulation, BadCombinationsAreUsageErrors) {
  auto r = zb::test_support::run_zerobench("run --emulate-world-size 4 --nproc 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = zb::test_support::run_zerobench("run --emulate-world-size 4 --emulate-rank 4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--emulate-rank 4"), std::string::npos) << r.output;
}
