// The regression gate on real runs: a cell's losses and grad norms reproduce bit for bit on a
// re-run (so `regress` can gate them exactly), and a numerics change the configuration does not
// show — the learning rate × 1.001 inside the step, planted here by running with --lr × 1.001
// and writing the baseline's lr back into the report — fails `regress`, naming the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "reports/report.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using nlohmann::json;
using test_support::make_clean_dir;
using test_support::run_zerobench;

namespace {
// The cpu-smoke cell fsdp_fp32's workload (bench/matrices/cpu-smoke.yaml), without profiling.
const std::string kCell =
    "run --model tiny --nproc 2 --backend fsdp --precision fp32 --micro-batch 4 --seq-len 64 --steps 6 --warmup 2 "
    "--data markov --seed 1234 --threads 1 --quiet";
}  // namespace

TEST(RegressNumerics, ARerunPassesBitwiseAndAPlantedLrTimes1001FailsNamingTheLoss) {
  const auto dir = make_clean_dir("regress_numerics");
  ASSERT_FALSE(dir.empty());
  for (const char* sub : {"base", "rerun", "planted"}) ASSERT_EQ(std::system(("mkdir -p " + dir + "/" + sub).c_str()), 0);
  auto r = run_zerobench(kCell + " --lr 0.003 --out " + dir + "/base/fsdp_fp32.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_zerobench(kCell + " --lr 0.003 --out " + dir + "/rerun/fsdp_fp32.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_zerobench(kCell + " --lr 0.003003 --out " + dir + "/planted/fsdp_fp32.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // The re-run: every step's loss, grad norm and lr identical, bit for bit.
  r = run_zerobench("regress --timing report --baseline " + dir + "/base --current " + dir + "/rerun");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("steps.loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("max rel diff 0 (bitwise)"), std::string::npos) << r.output;

  // The planted change, with the configuration (and the per-step lr) showing the baseline's lr:
  // only the numerics can catch it.
  const auto base = reports::read_report(dir + "/base/fsdp_fp32.json");
  auto planted = reports::read_report(dir + "/planted/fsdp_fp32.json");
  EXPECT_NE(planted["config"]["train"]["lr"], base["config"]["train"]["lr"]);
  planted["config"]["train"]["lr"] = base["config"]["train"]["lr"];
  for (size_t i = 0; i < planted["steps"].size(); ++i) planted["steps"][i]["lr"] = base["steps"][i]["lr"];
  reports::write_json_atomic(dir + "/planted/fsdp_fp32.json", planted);
  r = run_zerobench("regress --timing report --baseline " + dir + "/base --current " + dir + "/planted --json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto verdict = json::parse(r.output);
  EXPECT_EQ(verdict["verdict"], "regression");
  bool loss = false, grad_norm = false, config = false;
  double first_rel = 0;
  for (const auto& c : verdict["checks"]) {
    if (!c["regression"].get<bool>()) continue;
    const std::string m = c["metric"];
    loss = loss || m.find("].loss") != std::string::npos;
    grad_norm = grad_norm || m.find("].grad_norm") != std::string::npos;
    config = config || m == "config";
    if (m.find("].loss") != std::string::npos)
      first_rel = std::abs(std::stod(c["current"].get<std::string>()) / std::stod(c["baseline"].get<std::string>()) - 1);
  }
  EXPECT_TRUE(loss) << r.output;
  EXPECT_TRUE(grad_norm) << r.output;
  EXPECT_FALSE(config) << "the configuration was made to match: only the numerics differ\n" << r.output;
  EXPECT_GT(first_rel, 0.0);
  // The text form names it too (what CI prints).
  r = run_zerobench("regress --timing report --baseline " + dir + "/base --current " + dir + "/planted");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("].loss"), std::string::npos) << r.output;
  std::system(("rm -rf " + dir).c_str());
}
