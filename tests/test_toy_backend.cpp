// test_toy_backend.cpp — a backend is one descriptor registered by one line: the toy backend of
// tests/toy_backend/ (data parallel without bucketing), registered only in zerobench_toy, gets
// `run` (bytes equal to its closed form, the estimate checked), `model-info`, `matrix` and
// `table` with no change outside tests/; the real zerobench does not know it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "models/model_config.hpp"
#include "tests/run_binary.hpp"

namespace {
using json = nlohmann::json;
using zb::test_support::make_clean_dir;
using zb::test_support::run_command;

zb::test_support::BinaryResult toy(const std::string& args) {
  return run_command(std::string(zb::test_support::toy_bin()) + " " + args + " 2>&1");
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

TEST(ToyBackend, RunsWithBytesEqualToItsClosedFormAndAnEstimate) {
  const auto dir = make_clean_dir("toy_run");
  const auto r = toy("run --backend toy --model tiny --nproc 2 --steps 3 --warmup 1 --seq-len 32 --micro-batch 2 "
                     "--threads 1 --quiet --out " + dir + "/toy.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json rep = read_json(dir + "/toy.json");
  EXPECT_EQ(rep["config"]["backend"]["name"], "toy");
  const int64_t n = zb::models::count_params(zb::models::preset("tiny")).total;
  ASSERT_EQ(rep["ranks"].size(), 2u);
  for (const auto& rank : rep["ranks"]) {
    const auto& got = rank["memory"]["model_states_bytes"];
    EXPECT_EQ(got["params"], 4 * n);
    EXPECT_EQ(got["grads"], 4 * n);
    EXPECT_EQ(got["optimizer"], 8 * n);
    EXPECT_EQ(got, rank["memory"]["model_states_expected_bytes"]);
    EXPECT_GT(rank["memory"]["estimated_peak_bytes"].get<int64_t>(), 0);
  }
  EXPECT_EQ(rep["config"]["precision_plan"]["params"], "fp32");
  EXPECT_EQ(rep["status"]["state"], "ok");
}

TEST(ToyBackend, ProjectSimulatesItsOwnProgram) {
  const auto dir = make_clean_dir("toy_project");
  const auto r = toy("run --backend toy --model tiny --nproc 2 --steps 3 --warmup 1 --seq-len 32 --micro-batch 2 "
                     "--threads 1 --quiet --out " + dir + "/toy.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto p = toy("project " + dir + "/toy.json --calibration a100-nvlink --nproc 8 --compute flops --out " + dir + "/p.json");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const json proj = read_json(dir + "/p.json");
  const auto& pr = proj["projection"];
  EXPECT_EQ(pr["backend"], "toy");
  // One fp32 all-reduce per parameter tensor of the tiny model in the simulated step, nothing else.
  const auto cfg = zb::models::preset("tiny");
  int64_t tensors = 0;
  for (const auto& unit : zb::models::unit_param_specs(cfg)) tensors += int64_t(unit.size());
  EXPECT_EQ(pr["collectives"]["all_reduce"]["count"], tensors);
  EXPECT_EQ(pr["collectives"]["all_reduce"]["bytes"], 4 * zb::models::count_params(cfg).total);
  EXPECT_EQ(pr["collectives"]["all_gather"]["count"], 0);
}

TEST(ToyBackend, ModelInfoListsIt) {
  const auto r = toy("model-info tiny --world-size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("toy"), std::string::npos) << r.output;
}

TEST(ToyBackend, MatrixAndTableRunItBesideABuiltInBackend) {
  const auto dir = make_clean_dir("toy_matrix");
  {
    std::ofstream f(dir + "/m.yaml");
    f << "name: toy-matrix\ntimeout_s: 600\nbase:\n  model: tiny\n  nproc: 2\n  steps: 2\n  warmup: 1\n  seq-len: 32\n"
         "  micro-batch: 2\n  threads: 1\naxes:\n  backend: [toy, ddp]\n  precision: [fp32]\n";
  }
  const auto m = toy("matrix " + dir + "/m.yaml --out " + dir + "/out");
  ASSERT_EQ(m.exit_code, 0) << m.output;
  const auto t = toy("table " + dir + "/out");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("toy"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("ddp"), std::string::npos) << t.output;
}

TEST(ToyBackend, ThePlainZerobenchDoesNotKnowIt) {
  const auto r = zb::test_support::run_zerobench("run --backend toy --model tiny --nproc 1 --steps 2 --warmup 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown --backend 'toy'"), std::string::npos) << r.output;
}

}  // namespace
