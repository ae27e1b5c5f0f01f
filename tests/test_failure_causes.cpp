// test_failure_causes.cpp — failures that name their cause (issue 26, part 4): a rank's own error
// line reaches the report's status.error (and the matrix index) through the launcher's stderr
// capture (runtime/launcher.cpp) or the lone process's catch (bench/run/run_command.cpp); the
// checkpoint directory is checked before any rank starts (bench/lifecycle/checkpoint_preflight.*):
// writable, and room for the closed form of what the run's checkpoints write — a closed form the
// real runs' written bytes are held to, on every backend and both state-dict types.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "bench/lifecycle/checkpoint_preflight.hpp"
#include "bench/run/run_options.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using nlohmann::json;
using test_support::run_zerobench;
using test_support::temp_path;

namespace {
const std::string kRun = "run --model tiny --steps 3 --warmup 1 --seq-len 32 --threads 1 --quiet ";

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

// The run's checkpoint closed form, resolved in-process exactly as `zerobench run FLAGS` resolves it.
bench::lifecycle::CheckpointDiskNeed need_for(const std::vector<std::string>& flags, const std::string& dir,
                                              int64_t every, const std::string& state_dict) {
  CLI::App app;
  bench::RunOptions o;
  bench::add_run_options(app, o);
  std::vector<std::string> args(flags.rbegin(), flags.rend());
  app.parse(args);
  bench::mark_given(app, o);
  o.nproc = o.world_size_hint();
  const auto r = o.resolve();
  return bench::lifecycle::checkpoint_disk_need({dir, every, state_dict, ""}, r.backend, r.spec, o.world_size(), 0);
}
}  // namespace

// ---- The rank's own message in status.error --------------------------------------------------

TEST(RankError, AFailedSaveOnRankOneNamesItsCauseInTheReport) {
  const auto dir = test_support::make_clean_dir("cause_ckpt");
  const auto out = temp_path("cause.json");
  std::remove(out.c_str());
  const auto r = run_zerobench(kRun + "--nproc 2 --checkpoint-dir " + dir +
                               " --checkpoint-every 1 --fault-inject save-error:1:2 --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // Passed through to the console as before...
  EXPECT_NE(r.output.find("No space left on device (planted by --fault-inject save-error)"), std::string::npos)
      << r.output;
  // ...and now in the report: which rank, how it ended, and its own last line.
  const auto report = reports::read_report(out);
  EXPECT_EQ(report["status"]["state"], "failed");
  const std::string error = report["status"]["error"];
  EXPECT_EQ(error.rfind("rank 1 ", 0), 0u) << "the rank that failed first: " << error;
  EXPECT_NE(error.find("No space left on device (planted by --fault-inject save-error)"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << "one line: " << error;
}

TEST(RankError, ALoneProcessLeavesAFailedReportWithItsMessage) {
  const auto dir = test_support::make_clean_dir("cause_ckpt1");
  const auto out = temp_path("cause1.json");
  std::remove(out.c_str());
  const auto r = run_zerobench(kRun + "--nproc 1 --checkpoint-dir " + dir +
                               " --checkpoint-every 1 --fault-inject save-error:0:1 --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto report = reports::read_report(out);
  EXPECT_EQ(report["status"]["state"], "failed");
  const std::string error = report["status"]["error"];
  EXPECT_NE(error.find("rank 0 failed: cannot write "), std::string::npos) << error;
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
}

TEST(RankError, TheMatrixIndexCarriesTheRanksMessage) {
  const auto dir = test_support::make_clean_dir("cause_matrix");
  const auto ckpt = test_support::make_clean_dir("cause_matrix_ckpt");
  const auto file = temp_path("cause_matrix.yaml");
  std::ofstream(file) << "name: cause\nbase:\n  model: tiny\n  nproc: 2\n  steps: 2\n  warmup: 1\n  seq-len: 32\n"
                         "  threads: 1\n  checkpoint-dir: "
                      << ckpt << "\n  checkpoint-every: 1\n  fault-inject: save-error:1:1\n";
  const auto r = run_zerobench("matrix " + file + " --out " + dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::ifstream in(dir + "/index.json");
  const auto index = json::parse(in);
  ASSERT_EQ(index["cells"].size(), 1u);
  EXPECT_EQ(index["cells"][0]["status"], "failed");
  const std::string error = index["cells"][0]["error"];
  EXPECT_EQ(error.rfind("rank 1 ", 0), 0u) << "the rank that failed first: " << error;
  EXPECT_NE(error.find("No space left on device (planted by --fault-inject save-error)"), std::string::npos) << error;
}

// ---- The checkpoint directory before any rank starts -----------------------------------------

TEST(CheckpointPreflight, AnUnwritableDirectoryExitsTwoBeforeTraining) {
  // A path under a regular file cannot be created, root or not.
  const auto file = temp_path("not_a_dir");
  std::ofstream(file) << "x";
  const auto out = temp_path("unwritable.json");
  std::remove(out.c_str());
  auto r = run_zerobench(kRun + "--nproc 2 --checkpoint-dir " + file + "/ckpt --checkpoint-every 1 --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("--checkpoint-dir " + file + "/ckpt: cannot create"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Not a directory"), std::string::npos) << r.output;
  // /proc exists but takes no files, root or not: the probe file fails.
  r = run_zerobench(kRun + "--nproc 2 --checkpoint-dir /proc --checkpoint-every 1 --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--checkpoint-dir /proc: not writable"), std::string::npos) << r.output;
  std::ifstream report(out);
  EXPECT_FALSE(report.good()) << "nothing ran, so no report";
}

struct DiskCase {
  std::string name, flags, state_dict;
  bool check_refusal;  // also run with one byte too few
  bool exact_tensors;  // the closed form's tensor bytes are exactly the saved ones (zero3: persistent copies counted)
};
void PrintTo(const DiskCase& c, std::ostream* os) { *os << c.name; }

class CheckpointDisk : public ::testing::TestWithParam<DiskCase> {};

// The closed form is what the saves write: Σ over ranks of bytes_written lies between the exact
// tensor bytes and the bound with headers (so a wrong state byte count fails one side or the
// other), and the check refuses a filesystem one byte short of it, naming needed and free.
TEST_P(CheckpointDisk, ClosedFormBoundsWhatTheSavesWriteAndOneByteShortExitsTwo) {
  const auto& c = GetParam();
  const auto dir = test_support::make_clean_dir("disk_" + c.name);
  const auto out = temp_path("disk_" + c.name + ".json");
  const int64_t every = 1;
  std::vector<std::string> flags = {"--model", "tiny", "--steps", "2", "--warmup", "1", "--seq-len", "32", "--nproc", "2"};
  std::stringstream ss(c.flags);
  for (std::string f; ss >> f;) flags.push_back(f);
  const auto need = need_for(flags, dir, every, c.state_dict);
  ASSERT_EQ(need.saves, 2);
  ASSERT_GT(need.tensor_bytes, 0);
  const std::string args = "run --model tiny --steps 2 --warmup 1 --seq-len 32 --nproc 2 --threads 1 --quiet " +
                           c.flags + " --checkpoint-dir " + dir + " --checkpoint-every 1 --state-dict " + c.state_dict +
                           " --out " + out;
  const std::string env = std::string(bench::lifecycle::kTestFreeBytesEnv) + "=";
  if (c.check_refusal) {
    std::remove(out.c_str());
    const auto r = test_support::run_command(env + std::to_string(need.total() - 1) + " " + zb::test_support::zerobench_bin() + " " + args +
                                             " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find("--checkpoint-dir " + dir + ": the run's checkpoints need " + std::to_string(need.total()) +
                            " bytes"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(std::to_string(need.total() - 1) + " bytes free"), std::string::npos) << r.output;
    EXPECT_TRUE(entries(dir).empty()) << "refused before any rank started: nothing written";
  }
  std::remove(out.c_str());
  const auto r =
      test_support::run_command(env + std::to_string(need.total()) + " " + zb::test_support::zerobench_bin() + " " + args + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = reports::read_report(out);
  int64_t written = 0;
  for (const auto& rank : report["ranks"]) written += rank["lifecycle"]["checkpoint"]["bytes_written"].get<int64_t>();
  std::cout << c.name << ": written " << written << " bytes in " << need.saves << " saves; closed form: tensors "
            << need.saves * need.tensor_bytes << ", bound " << need.total() << "\n";
  if (c.exact_tensors) {
    EXPECT_GE(written, need.saves * need.tensor_bytes) << "the tensors alone";
  }
  EXPECT_LE(written, need.total()) << "tensor bytes " << need.tensor_bytes << ", overhead bound " << need.overhead_bytes;
}

INSTANTIATE_TEST_SUITE_P(Backends, CheckpointDisk,
                         ::testing::Values(DiskCase{"fsdp_sharded", "--backend fsdp", "sharded", true, true},
                                           DiskCase{"fsdp_mixed_full", "--backend fsdp --precision mixed", "full", true, true},
                                           DiskCase{"zero3_bf16_sharded", "--backend zero3 --precision bf16", "sharded", false, false},
                                           DiskCase{"fsdp2_sharded", "--backend fsdp2", "sharded", false, true},
                                           DiskCase{"ddp_full", "--backend ddp", "full", false, true}),
                         [](const ::testing::TestParamInfo<DiskCase>& info) { return info.param.name; });

TEST(CheckpointPreflight, FreeSpaceIsStatvfsUnlessTheTestOverrideIsSet) {
  unsetenv(bench::lifecycle::kTestFreeBytesEnv);
  EXPECT_GT(bench::lifecycle::free_bytes_at("/tmp"), 0);
  setenv(bench::lifecycle::kTestFreeBytesEnv, "12345", 1);
  EXPECT_EQ(bench::lifecycle::free_bytes_at("/tmp"), 12345);
  setenv(bench::lifecycle::kTestFreeBytesEnv, "lots", 1);
  EXPECT_THROW(bench::lifecycle::free_bytes_at("/tmp"), UsageError);
  unsetenv(bench::lifecycle::kTestFreeBytesEnv);
}
