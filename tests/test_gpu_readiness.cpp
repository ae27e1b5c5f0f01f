// GPU readiness, checked on CPU (issue 22): what would make the first GPU run crash or mislead,
// each with its fault planted so the check is seen to fail.
//  - the configure-time CUDA-stack check (cmake/TorchCudaStack.cmake) on a planted mismatched nccl.h
//    and a planted toolkit version (a tiny configure-only project around the same function);
//  - the device bundle is complete: the real project configures with CMake's package search limited
//    to the bundle's dpkg -x prefix (cmake/DepsPrefix.cmake), and fails with a package left out;
//  - scripts/gpu-first.sh: every cell has a limit and the required ones fit the 8-minute deadline
//    (planted: a shorter deadline fails); a failed and a hung cell are recorded and the rest runs;
//    a call killed midway still leaves its summary; the summary reads real reports;
//  - the env gate over /proc/self/maps, the datasheet peak by exact SKU, and the one-rank-per-GPU
//    check, on synthetic inputs;
//  - the CUDA event timer's logic over injected events, and the memory pre-flight of a GPU run
//    over an injected cudaMemGetInfo (runtime/cuda_seams.hpp).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "backends/backend_info.hpp"
#include "bench/run/preflight.hpp"
#include "bench/run/run_options.hpp"
#include "runtime/cuda_seams.hpp"
#include "runtime/device.hpp"
#include "runtime/env_gate.hpp"
#include "runtime/errors.hpp"
#include "runtime/gpu_skus.hpp"
#include "runtime/memory.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using test_support::make_clean_dir;
using test_support::run_command;

namespace {
const std::string kSource = zb::bench::source_dir();
const std::string kPython = ZEROBENCH_PYTHON_EXE;
const std::string kCmake = ZEROBENCH_CMAKE_COMMAND;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
// CMake wraps long messages over several lines: compare with whitespace runs made one space.
std::string flat(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n' || c == '\t';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  return out;
}
bool exists(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0;
}

// torch.version.cuda of the build's interpreter ("13.0").
std::string torch_cuda() {
  auto r = run_command("'" + kPython + "' -c 'import torch; print(torch.version.cuda or \"\")'");
  std::string v = r.output;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

// Configures tests/cmake/nccl_check with `nccl_dir` ("" = the wheel's) and `toolkit`.
test_support::BinaryResult nccl_check(const std::string& nccl_dir, const std::string& toolkit) {
  const auto dir = make_clean_dir("nccl_check_build");
  return run_command("'" + kCmake + "' -S '" + kSource + "/tests/cmake/nccl_check' -B '" + dir + "' -DZB_PYTHON='" +
                     kPython + "' -DZB_NCCL_DIR='" + nccl_dir + "' -DZB_TOOLKIT='" + toolkit + "' 2>&1");
}

// The wheel's nccl.h, copied with its NCCL_VERSION_CODE replaced by `code` (empty: unchanged).
std::string plant_nccl_header(const std::string& code) {
  auto r = run_command("'" + kPython +
                       "' -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], \"include\"))'");
  std::string wheel_dir = r.output;
  while (!wheel_dir.empty() && wheel_dir.back() == '\n') wheel_dir.pop_back();
  const auto dir = make_clean_dir("planted_nccl");
  const std::string sed = code.empty() ? "cat" : "sed 's/^#define NCCL_VERSION_CODE .*/#define NCCL_VERSION_CODE " + code + "/'";
  run_command(sed + " '" + wheel_dir + "/nccl.h' > '" + dir + "/nccl.h'");
  return dir;
}

bool torch_has_nccl() {
  return run_command("'" + kPython + "' -c 'import torch; torch.cuda.nccl.version()' 2>&1").exit_code == 0;
}
}  // namespace

// ---- the configure-time CUDA-stack check ----

TEST(NcclConfigureCheck, PassesOnTheWheelsOwnHeaderAndFailsOnAPlantedMismatch) {
  if (!torch_has_nccl()) GTEST_SKIP() << "this venv's torch has no NCCL (a CPU wheel): nothing to check against";
  const auto cuda = torch_cuda();
  auto ok = nccl_check("", cuda);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("headers from"), std::string::npos) << ok.output;
  // An identical copy elsewhere passes too: the check reads the code, not the path.
  auto copy = nccl_check(plant_nccl_header(""), cuda);
  EXPECT_EQ(copy.exit_code, 0) << copy.output;
  // The fault: a header one patch release away (NCCL_VERSION_CODE 22808 vs the wheel's 22809).
  auto bad = nccl_check(plant_nccl_header("22808"), cuda);
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(flat(bad.output).find("has NCCL_VERSION_CODE 22808 but torch runs NCCL"), std::string::npos) << bad.output;
}

TEST(NcclConfigureCheck, FailsOnAToolkitOfAnotherCudaMajor) {
  if (!torch_has_nccl()) GTEST_SKIP() << "this venv's torch has no NCCL (a CPU wheel): nothing to check against";
  const auto cuda = torch_cuda();
  const std::string other = cuda.rfind("12", 0) == 0 ? "13.0" : "12.8";
  auto bad = nccl_check("", other);
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(flat(bad.output).find("the CUDA toolkit is " + other + " but torch was built with CUDA " + cuda), std::string::npos)
      << bad.output;
}

// ---- the device bundle: configure with only the bundle's packages ----

namespace {
// The bundle these tests make and read: outside the clone, with the other caches (a fresh clone's
// CI run then fetches it once per machine, not once per run); the GPU call's own is <root>/.bundle.
std::string bundle_dir() {
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/zerobench/device-bundle-test";
}

// dpkg -x every bundled .deb except those whose name starts with `leave_out` into a new prefix.
std::string unpack_bundle(const std::string& name, const std::string& leave_out) {
  const auto prefix = make_clean_dir(name);
  std::string cmd = "set -e; for d in '" + bundle_dir() + "'/debs/*.deb; do ";
  if (!leave_out.empty()) cmd += "case \"$(basename \"$d\")\" in " + leave_out + "_*) continue;; esac; ";
  cmd += "dpkg -x \"$d\" '" + prefix + "'; done";
  const auto script = test_support::temp_path(name + ".sh");
  std::ofstream(script) << cmd << "\n";
  const auto r = run_command("bash '" + script + "' 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return prefix;
}

test_support::BinaryResult configure_with_bundle_only(const std::string& prefix, const std::string& cuda,
                                                     const std::string& cmake = kCmake) {
  const auto dir = make_clean_dir("bundle_configure_" + cuda);
  return run_command("cd '" + dir + "' && ZEROBENCH_PYTHON='" + kPython + "' '" + cmake + "' -S '" + kSource +
                     "' -B . -G Ninja -DZEROBENCH_CUDA=" + cuda + " -DZEROBENCH_DEPS_PREFIX='" + prefix +
                     "' -DZEROBENCH_DEPS_ONLY=ON 2>&1; echo; cat CMakeCache.txt 2>/dev/null");
}

void ensure_bundle() {
  // Fetches what is missing (network), else only verifies; exit 1 names what is missing.
  const auto r = run_command("BUNDLE_DIR='" + bundle_dir() + "' '" + kSource + "/scripts/device-bundle.sh' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
}
}  // namespace

// The real project configures with only the bundle's packages, every one found in the prefix and
// none in /usr, under the GPU image's CMake: 4.x (pip's `cmake`; scripts/setup.sh installs the same
// major version in ~/.cache/zerobench/cmake4). CMake 4 dropped compatibility with
// cmake_minimum_required < 3.5, which a package's config file or torch's could still carry. (One
// configure, the image's CMake: this machine's CMake 3.25 configure with the bundle proved nothing
// more and cost a configure.) gcc 13 (the image's) cannot be had on Debian 12: not checked here.
TEST(DeviceBundle, TheRealProjectConfiguresUnderCMake4AsTheGpuImageHasIt) {
  ensure_bundle();
  const char* home = std::getenv("HOME");
  const std::string cmake4 = std::string(home ? home : "") + "/.cache/zerobench/cmake4/cmake/data/bin/cmake";
  ASSERT_TRUE(exists(cmake4)) << cmake4 << " missing: run scripts/setup.sh";
  const auto v = run_command("'" + cmake4 + "' --version");
  ASSERT_NE(v.output.find("cmake version 4."), std::string::npos) << v.output;
  const auto prefix = unpack_bundle("bundle_prefix_cmake4", "");
  // auto: the CUDA path too when this machine has nvcc (the GPU machine's configuration).
  const auto r = configure_with_bundle_only(prefix, "auto", cmake4);
  ASSERT_NE(r.output.find("-- Generating done"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("CMake Deprecation Warning"), std::string::npos) << "the image's next CMake may refuse it:\n" << r.output;
  EXPECT_NE(r.output.find("package search limited to " + prefix), std::string::npos) << r.output;
  // Every package came from the prefix, none from /usr.
  for (const char* var : {"yaml-cpp_DIR:PATH=", "CLI11_DIR:PATH=", "GTest_DIR:PATH=", "benchmark_DIR:PATH=",
                          "nlohmann_json_DIR:PATH=", "OPENSSL_INCLUDE_DIR:PATH=", "ZEROBENCH_GLOO_INCLUDE:PATH="})
    EXPECT_NE(r.output.find(std::string(var) + prefix + "/usr/"), std::string::npos) << var << "\n" << r.output;
}

TEST(DeviceBundle, APackageLeftOutOfTheBundleFailsTheConfigure) {
  ensure_bundle();
  // The plant: the bundle without libyaml-cpp-dev. /usr has it; the configure must not see it.
  const auto r = configure_with_bundle_only(unpack_bundle("bundle_prefix_no_yaml", "libyaml-cpp-dev"), "OFF");
  EXPECT_EQ(r.output.find("-- Generating done"), std::string::npos) << r.output;
  EXPECT_NE(flat(r.output).find("Could not find a package configuration file provided by \"yaml-cpp\""), std::string::npos)
      << r.output;
  // A header-only package found by find_path (Gloo's headers) is hidden from /usr as well.
  const auto g = configure_with_bundle_only(unpack_bundle("bundle_prefix_no_gloo", "libgloo-dev"), "OFF");
  EXPECT_EQ(g.output.find("-- Generating done"), std::string::npos) << g.output;
  EXPECT_NE(flat(g.output).find("Gloo's headers (gloo/algorithm.h, Debian libgloo-dev) not found"), std::string::npos)
      << g.output;
}

// Two fetches into one folder (a user's beside a test's; CI once ran the two tests above at once
// on a fresh clone and one read the other's half-written wheel — CTest now keeps them apart with
// RESOURCE_LOCK, tests/CMakeLists.txt) must not mix: the second waits for the first's lock. Held here by
// flock(1) around the call, the script must still be waiting when `timeout` ends it (exit 124);
// a script without the lock verifies the complete bundle and exits 0.
TEST(DeviceBundle, ASecondFetchWaitsForTheFirstsLock) {
  ensure_bundle();
  const auto r = run_command("cd '" + kSource + "' && flock '" + bundle_dir() + "/.lock' env BUNDLE_DIR='" + bundle_dir() +
                              "' timeout 3 scripts/device-bundle.sh 2>&1");
  EXPECT_EQ(r.exit_code, 124) << r.output;
  EXPECT_EQ(r.output.find("[bundle] ok"), std::string::npos) << r.output;
}

// ---- scripts/gpu-first.sh: the cells, their limits, the machinery that survives failures and kills ----

namespace {
// Runs gpu-first.sh with `env` (VAR=value ...) and `args`; its work folder and OUT under `name`.
test_support::BinaryResult gpu_first(const std::string& name, const std::string& env, const std::string& args) {
  const auto dir = make_clean_dir(name);
  return run_command("cd '" + kSource + "' && " + env + " GPU_FIRST_WORK='" + dir + "/work' bash scripts/gpu-first.sh --out '" +
                     dir + "/out' " + args + " 2>&1");
}
int files_under(const std::string& dir) {
  auto r = run_command("find '" + dir + "' -type f | wc -l");
  return std::stoi(r.output);
}
}  // namespace

TEST(GpuFirst, DryRunGivesEveryCellALimitAndTheRequiredLimitsFitTheDeadline) {
  for (const std::string& call : {std::string(""), std::string("--more")}) {
    const auto r = run_command("cd '" + kSource + "' && bash scripts/gpu-first.sh --dry-run " + call + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::istringstream lines(r.output);
    std::string line;
    int cells = 0, required_sum = 0, deadline = 0, reported_sum = -1;
    while (std::getline(lines, line)) {
      std::istringstream w(line);
      std::string name, cap, kind, min;
      w >> name >> cap >> kind >> min;
      if (name == "cell" || name.empty()) continue;
      if (name == "call:") {
        ASSERT_EQ(std::sscanf(line.c_str(), "call: %*s deadline %d s; sum of required caps %d s", &deadline, &reported_sum), 2)
            << line;
        continue;
      }
      ++cells;
      ASSERT_FALSE(cap.empty()) << line;
      EXPECT_GT(std::stoi(cap), 0) << "a cell without a limit: " << line;
      EXPECT_TRUE(kind == "required" || kind == "if-time") << line;
      if (kind == "required") required_sum += std::stoi(cap);
    }
    EXPECT_GE(cells, 7) << r.output;
    EXPECT_EQ(required_sum, reported_sum) << r.output;
    EXPECT_EQ(deadline, call.empty() ? 480 : 210) << r.output;  // 8 minutes; --more: what a warm machine has left
    EXPECT_LE(required_sum, deadline) << r.output;
  }
  // The plant: a deadline below the required limits' sum fails the dry run, naming both.
  const auto bad = run_command("cd '" + kSource + "' && GPU_FIRST_DEADLINE_S=300 bash scripts/gpu-first.sh --dry-run 2>&1");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("the required cells' caps (480 s) exceed the deadline (300 s)"), std::string::npos) << bad.output;
  // A bad argument: one line naming it, exit 2.
  const auto arg = run_command("cd '" + kSource + "' && bash scripts/gpu-first.sh --part 2 2>&1");
  EXPECT_EQ(arg.exit_code, 2);
  EXPECT_NE(arg.output.find("unknown argument '--part'"), std::string::npos) << arg.output;
}

TEST(GpuFirst, AFailedAndAHungCellAreRecordedAndEveryLaterCellStillRuns) {
  // Fake cells (a short sleep each), limits scaled to seconds: the machinery alone.
  const auto r = gpu_first("gpu_first_fake", "GPU_FIRST_FAKE=1 GPU_FIRST_SCALE=0.05 GPU_FIRST_PLANT_FAIL=numbers "
                                             "GPU_FIRST_PLANT_HANG=cuda-tests", "");
  EXPECT_EQ(r.exit_code, 1) << r.output;  // a failed cell: exit 1, after everything else ran
  const auto dir = test_support::temp_path("gpu_first_fake");
  const auto summary = read_file(dir + "/out/SUMMARY.md");
  EXPECT_NE(summary.find("| first | numbers | FAILED | 1 |"), std::string::npos) << summary;
  EXPECT_NE(summary.find("| first | cuda-tests | TIMEOUT | 124 |"), std::string::npos) << summary;
  EXPECT_NE(summary.find("planted failure (GPU_FIRST_PLANT_FAIL=numbers)"), std::string::npos) << summary;
  for (const char* later : {"| first | crossval-fsdp | ok |", "| first | crossval-zero3 | ok |", "| first | launch-blocking | ok |"})
    EXPECT_NE(summary.find(later), std::string::npos) << later << "\n" << summary;
  EXPECT_NE(summary.find("2 failed or timed out: cuda-tests, numbers"), std::string::npos) << summary;
  EXPECT_LE(files_under(dir + "/out"), 8);  // the device tool brings back at most 8 files
  // The same without plants fails nothing; --more then runs on the same work folder.
  const auto ok = gpu_first("gpu_first_fake_ok", "GPU_FIRST_FAKE=1 GPU_FIRST_SCALE=0.05", "");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  const auto ok_dir = test_support::temp_path("gpu_first_fake_ok");
  const auto more = run_command("cd '" + kSource + "' && GPU_FIRST_FAKE=1 GPU_FIRST_SCALE=0.05 GPU_FIRST_WORK='" + ok_dir +
                                "/work' bash scripts/gpu-first.sh --more --out '" + ok_dir + "/more' 2>&1");
  EXPECT_EQ(more.exit_code, 0) << more.output;
  const auto more_summary = read_file(ok_dir + "/more/SUMMARY.md");
  EXPECT_NE(more_summary.find("calls: first, more"), std::string::npos) << more_summary;
  EXPECT_NE(more_summary.find("| more | crossval-fsdp2 | ok |"), std::string::npos) << more_summary;
  EXPECT_LE(files_under(ok_dir + "/more"), 8);
}

TEST(GpuFirst, ACallKilledMidwayStillLeavesASummaryNamingTheCellInFlight) {
  const auto dir = make_clean_dir("gpu_first_killed");
  // 1 s a fake cell; SIGKILL to the whole process group after 4 s, as the device tool's limit does.
  const auto r = run_command("cd '" + kSource + "' && GPU_FIRST_FAKE=1 GPU_FIRST_FAKE_S=1 GPU_FIRST_WORK='" + dir +
                             "/work' setsid bash scripts/gpu-first.sh --out '" + dir + "/out' > '" + dir +
                             "/log' 2>&1 & pid=$!; sleep 4; kill -9 -$pid; wait $pid; echo killed");
  ASSERT_NE(r.output.find("killed"), std::string::npos) << r.output;
  const auto summary = read_file(dir + "/out/SUMMARY.md");
  ASSERT_FALSE(summary.empty()) << read_file(dir + "/log");
  EXPECT_NE(summary.find("| first | environment | ok |"), std::string::npos) << summary;
  EXPECT_NE(summary.find("in flight when this summary was written"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("| first | launch-blocking |"), std::string::npos) << "ran to the end before the kill?\n" << summary;
  EXPECT_TRUE(exists(dir + "/out/results.tgz"));
  EXPECT_TRUE(exists(dir + "/out/cells.tsv"));
  EXPECT_LE(files_under(dir + "/out"), 8);
}

TEST(GpuFirst, TheSummaryReadsRealReportsAndCrossvalDocuments) {
  // A work folder as the numbers and crossval cells leave it, from committed results.
  const auto dir = make_clean_dir("gpu_first_summary");
  const auto setup = run_command("set -e; mkdir -p '" + dir + "/compare/runs' '" + dir + "/crossval' '" + dir + "/logs'; cp '" +
                                 kSource + "/reports/baselines/cpu-smoke/fsdp_mixed.json' '" + dir + "/compare/runs/a_r1.json'; cp '" +
                                 kSource + "/reports/results/cpu/crossval/zero3.json' '" + dir + "/crossval/zero3-bf16.json'; "
                                 "printf 'first\tnumbers\tok\t0\t61\t120\tlogs/numbers.log\n' > '" + dir + "/cells.tsv'; "
                                 "echo '{\"verdict\": \"A is faster\"}' > '" + dir + "/compare/compare.json'; "
                                 "echo 'half a report {' > '" + dir + "/compare/runs/b_r1.json'");
  ASSERT_EQ(setup.exit_code, 0) << setup.output;
  const auto r = run_command("'" + kPython + "' '" + kSource + "/scripts/gpu_first_summary.py' '" + dir + "' '" + dir + "/S.md' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = read_file(dir + "/S.md");
  // The committed report's own numbers, formatted: backend, precision, W, blocks, tokens/GPU/s.
  auto report = nlohmann::json::parse(read_file(kSource + "/reports/baselines/cpu-smoke/fsdp_mixed.json"));
  char tok[32];
  std::snprintf(tok, sizeof tok, "%.1f", report["summary"]["tokens_per_gpu_per_s"]["median"].get<double>());
  EXPECT_NE(s.find("| a_r1 | fsdp | mixed | 2 | " + std::to_string(report["config"]["model"]["layers"].get<int>()) + " | " + tok + " |"),
            std::string::npos) << s;
  EXPECT_NE(s.find("| b_r1 |"), std::string::npos) << s;  // a half-written report is shown, not fatal
  EXPECT_NE(s.find("unreadable"), std::string::npos) << s;
  EXPECT_NE(s.find("A is faster"), std::string::npos) << s;
  EXPECT_NE(s.find("DeepSpeed ZeRO-3 0.19.8): agree"), std::string::npos) << s;
  EXPECT_NE(s.find("| first | numbers | ok | 0 | 61 | 120 |"), std::string::npos) << s;
}

// ---- the env gate: one CUDA stack per process ----

namespace {
const char* kOneStack =
    "7f0000000000-7f0000100000 r-xp 00000000 08:01 1234 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13\n"
    "7f0000100000-7f0000200000 r--p 00100000 08:01 1234 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13\n"
    "7f0000300000-7f0000400000 r-xp 00000000 08:01 1300 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
    "7f0000500000-7f0000600000 r-xp 00000000 08:01 1400 /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcupti.so.13\n"
    "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
    "7f0000700000-7f0000800000 rw-p 00000000 00:00 0 \n";
}

TEST(EnvGate, OneOfEachLibraryPasses) {
  const auto libs = runtime::loaded_cuda_libraries(kOneStack);
  ASSERT_EQ(libs.at("libcudart.so").size(), 1u);  // two mappings of one file: one library
  EXPECT_EQ(libs.at("libnccl.so").size(), 1u);
  EXPECT_EQ(libs.at("libcupti.so").size(), 1u);
  EXPECT_EQ(runtime::check_one_cuda_stack(kOneStack, true), "");
  EXPECT_EQ(runtime::check_one_cuda_stack(kOneStack, false), "");
}

TEST(EnvGate, ASecondCudaRuntimeFailsNamingBothFiles) {
  const std::string two = std::string(kOneStack) +
                          "7f0000900000-7f0000a00000 r-xp 00000000 08:01 99 /usr/local/cuda-12.8/lib64/libcudart.so.12.8.90\n";
  const auto why = runtime::check_one_cuda_stack(two, false);
  EXPECT_NE(why.find("2 libcudart.so* loaded"), std::string::npos) << why;
  EXPECT_NE(why.find("/usr/local/cuda-12.8/lib64/libcudart.so.12.8.90"), std::string::npos) << why;
  EXPECT_NE(why.find("nvidia/cu13/lib/libcudart.so.13"), std::string::npos) << why;
  // A second libcupti (the toolkit's next to the wheel's), a path with a space, a deleted file.
  const std::string cupti = std::string(kOneStack) +
                            "7f0000b00000-7f0000c00000 r-xp 00000000 08:01 98 /opt/my cuda/extras/CUPTI/lib64/libcupti.so.13 (deleted)\n";
  const auto w = runtime::check_one_cuda_stack(cupti, false);
  EXPECT_NE(w.find("2 libcupti.so* loaded"), std::string::npos) << w;
  EXPECT_NE(w.find("/opt/my cuda/extras/CUPTI/lib64/libcupti.so.13"), std::string::npos) << w;
}

TEST(EnvGate, AMissingLibraryFailsOnlyWhenEachIsRequired) {
  const std::string no_nccl =
      "7f0000000000-7f0000100000 r-xp 00000000 08:01 1234 /x/libcudart.so.13\n"
      "7f0000500000-7f0000600000 r-xp 00000000 08:01 1400 /x/libcupti.so.13\n";
  EXPECT_EQ(runtime::check_one_cuda_stack(no_nccl, false), "");
  EXPECT_EQ(runtime::check_one_cuda_stack(no_nccl, true), "no libnccl.so* loaded");
  // libcudart_static or a file merely named like one elsewhere in the path is not a library.
  EXPECT_TRUE(runtime::loaded_cuda_libraries("1-2 r-xp 0 0:0 1 /libcudart.so.dir/other.so\n").at("libcudart.so").empty());
}

TEST(EnvGate, ThisProcessReadsItsOwnMaps) {
  const auto maps = runtime::read_self_maps();
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(n, 0);
  EXPECT_NE(maps.find(std::string(exe, static_cast<size_t>(n))), std::string::npos);  // the executable itself is mapped
}

// ---- the datasheet peak by exact SKU (names as cudaGetDeviceProperties / nvidia-smi print them) ----

TEST(GpuSkus, EveryListedSkuGetsItsOwnDenseFigure) {
  const int64_t GiB = int64_t(1) << 30;
  struct Case {
    const char* name;
    int64_t memory;
    const char* sku;
    double bf16, tf32, fp32;
  };
  const Case cases[] = {
      {"NVIDIA A100-SXM4-40GB", 40 * GiB, "A100 SXM 40GB", 312, 156, 19.5},
      {"NVIDIA A100-SXM4-80GB", 80 * GiB, "A100 SXM 80GB", 312, 156, 19.5},
      {"NVIDIA A100-PCIE-40GB", 40 * GiB, "A100 PCIe 40GB", 312, 156, 19.5},
      {"NVIDIA A100 80GB PCIe", 80 * GiB, "A100 PCIe 80GB", 312, 156, 19.5},
      {"NVIDIA H100 80GB HBM3", 81559LL << 20, "H100 SXM", 989, 494.7, 67},
      {"NVIDIA H100 PCIe", 81559LL << 20, "H100 PCIe", 756, 378, 51},
      {"NVIDIA H100 NVL", 95830LL << 20, "H100 NVL", 835.5, 417.5, 60},
      {"NVIDIA H200", 143771LL << 20, "H200", 989, 494.7, 67},
      {"NVIDIA H200 NVL", 143771LL << 20, "H200 NVL", 835.5, 417.5, 60},
      {"NVIDIA GH200 480GB", 97871LL << 20, "GH200", 989, 494.7, 67},
  };
  for (const auto& c : cases) {
    for (int64_t memory : {c.memory, int64_t(-1)}) {  // with the memory size, and with the name alone
      const auto sku = runtime::gpu_sku(c.name, memory);
      ASSERT_TRUE(sku) << c.name;
      EXPECT_EQ(sku->name, c.sku) << c.name;
      EXPECT_EQ(runtime::datasheet_peak_tflops(c.name, "bf16", memory), c.bf16) << c.name;
      EXPECT_EQ(runtime::datasheet_peak_tflops(c.name, "tf32", memory), c.tf32) << c.name;
      EXPECT_EQ(runtime::datasheet_peak_tflops(c.name, "fp32", memory), c.fp32) << c.name;
    }
  }
  // The old substring table gave the NVL the SXM figure and every MIG slice the whole GPU's.
  EXPECT_NE(runtime::datasheet_peak_tflops("NVIDIA H100 NVL"), runtime::datasheet_peak_tflops("NVIDIA H100 80GB HBM3"));
}

TEST(GpuSkus, MigSlicesAndUnknownDevicesHaveNoDatasheetFigure) {
  for (const char* mig : {"NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
                          "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "NVIDIA H200 MIG 7g.141gb"})
    EXPECT_FALSE(runtime::gpu_sku(mig, -1)) << mig;
  // A slice whose name does not say so: far less memory than its SKU.
  EXPECT_FALSE(runtime::gpu_sku("NVIDIA H100 80GB HBM3", 20 * (int64_t(1) << 30)));
  for (const char* other : {"NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-16GB", "NVIDIA L40S", "cpu: AMD EPYC"})
    EXPECT_FALSE(runtime::datasheet_peak_tflops(other)) << other;
}

// ---- ranks sharing a GPU under NCCL ----

TEST(GpuSharing, MoreLocalRanksThanGpusIsRefusedNamingEmulateWorldSize) {
  EXPECT_NO_THROW(runtime::check_one_rank_per_gpu(1, 1));
  EXPECT_NO_THROW(runtime::check_one_rank_per_gpu(8, 8));
  EXPECT_NO_THROW(runtime::check_one_rank_per_gpu(2, 8));
  try {
    runtime::check_one_rank_per_gpu(4, 1);
    FAIL() << "4 ranks on 1 GPU accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--emulate-world-size 4"), std::string::npos) << what;
    EXPECT_NE(what.find("1 visible GPU(s)"), std::string::npos) << what;
  }
  EXPECT_THROW(runtime::check_one_rank_per_gpu(9, 8), UsageError);
  // On CPU (or where no GPU is visible) the launcher's check does nothing: pick_device says why.
  EXPECT_NO_THROW(runtime::check_local_ranks_fit("cpu", 64));
}

TEST(GpuSharing, TheCliExitsTwoWhereNoGpuIsVisible) {
  if (runtime::cuda_available()) GTEST_SKIP() << "a GPU is visible: scripts/gpu-first.sh --more's gpu-sharing-refused cell checks the CLI there";
  const std::string out = "/tmp/zb_gpu_sharing_" + std::to_string(getpid()) + ".json";
  const auto r = test_support::run_zerobench("run --nproc 2 --device cuda --model tiny --steps 1 --warmup 0 --quiet --out " + out);
  std::remove(out.c_str());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device cuda"), std::string::npos) << r.output;
}

// ---- the CUDA event timer's logic, over injected events ----

namespace {
// What two CUDA events would answer: the elapsed times given, one per stop, and every call in
// order. Reading the elapsed time of an end event not yet waited for is cudaErrorNotReady.
class InjectedEvents final : public runtime::EventPair {
 public:
  InjectedEvents(std::vector<float> elapsed_ms, std::vector<std::string>* calls)
      : elapsed_ms_(std::move(elapsed_ms)), calls_(calls) {}
  void record_begin() override { calls_->push_back("record begin"); }
  void record_end() override {
    calls_->push_back("record end");
    waited_ = false;
  }
  void wait_end() override {
    calls_->push_back("wait end");
    waited_ = true;
  }
  float elapsed_ms() const override {
    calls_->push_back("elapsed");
    if (!waited_) throw std::runtime_error("cudaErrorNotReady: the end event has not completed");
    return elapsed_ms_.at(next_++);
  }

 private:
  std::vector<float> elapsed_ms_;
  std::vector<std::string>* calls_;
  bool waited_ = false;
  mutable size_t next_ = 0;
};
}  // namespace

TEST(CudaEventTimer, EachStopWaitsForItsEndEventAndGivesItsMillisecondsAsSeconds) {
  std::vector<std::string> calls;
  auto timer = runtime::make_event_pair_timer(std::make_unique<InjectedEvents>(std::vector<float>{1.5f, 0.25f, 1234.5f}, &calls));
  std::vector<double> step_s;
  for (int step = 0; step < 3; ++step) {
    timer->start();
    step_s.push_back(timer->stop_s());
  }
  EXPECT_EQ(step_s, (std::vector<double>{1.5e-3, 0.25e-3, 1.2345}));  // each step its own, exactly
  std::vector<std::string> once = {"record begin", "record end", "wait end", "elapsed"}, want;
  for (int step = 0; step < 3; ++step) want.insert(want.end(), once.begin(), once.end());
  EXPECT_EQ(calls, want);
  // The fault the order catches: a timer reading the elapsed time before waiting for the end event.
  InjectedEvents unwaited({1.0f}, &calls);
  unwaited.record_begin();
  unwaited.record_end();
  EXPECT_THROW(unwaited.elapsed_ms(), std::runtime_error);
}

// ---- the memory pre-flight of a GPU run, over an injected cudaMemGetInfo ----

namespace {
struct InjectedMemInfo {
  static inline int64_t free_bytes = 0, total_bytes = 0;
  static inline bool ok = true;
  static inline int asked_device = -1;
  static bool answer(int device, int64_t* free, int64_t* total) {
    asked_device = device;
    if (!ok) return false;  // cudaMemGetInfo failed
    *free = free_bytes;
    *total = total_bytes;
    return true;
  }
  // Installed for one test; the build's own source (cudaMemGetInfo) comes back after it.
  InjectedMemInfo() : previous(runtime::set_device_mem_info(answer)) {
    free_bytes = total_bytes = 0;
    ok = true;
    asked_device = -1;
  }
  ~InjectedMemInfo() { runtime::set_device_mem_info(previous); }
  runtime::DeviceMemInfo previous;
};

struct GpuJob {
  std::string backend;
  backends::EngineSpec spec;
  backends::Topology topo{1};
  int64_t peak = 0;  // the largest per-rank estimate (first or last rank), what check_memory compares
};
GpuJob gpu_job(const std::vector<std::string>& flags, int world) {
  CLI::App app;
  bench::RunOptions o;
  bench::add_run_options(app, o);
  std::vector<std::string> args(flags.rbegin(), flags.rend());
  app.parse(args);
  bench::mark_given(app, o);
  o.nproc = world;
  const auto r = o.resolve();
  GpuJob job{r.backend, r.spec, backends::Topology(world, world)};
  const auto& info = backends::backend(job.backend);
  for (int rank : {0, world - 1})
    job.peak = std::max(job.peak, info.training.estimate_peak(job.spec, job.topo, rank, /*gloo=*/false).peak_bytes());
  return job;
}
}  // namespace

TEST(CudaMemoryPreflight, RefusesWhatTheInjectedFreeMemoryCannotHoldInOneLineAndPassesWhatFits) {
  InjectedMemInfo inject;
  const at::Device gpu(at::kCUDA, 1);
  const auto job = gpu_job({"--backend", "fsdp", "--model", "tiny", "--seq-len", "32", "--micro-batch", "2"}, 2);
  ASSERT_GT(job.peak, 0);
  InjectedMemInfo::total_bytes = int64_t(80) << 30;  // the total would fit anything: only free counts
  const auto refusal = [&](int64_t free, int sharing) -> std::string {
    InjectedMemInfo::free_bytes = free;
    try {
      bench::check_memory(job.backend, job.spec, job.topo, sharing, gpu, sharing);
    } catch (const UsageError& e) {  // exit 2
      return e.what();
    }
    return "";
  };
  // One rank on the GPU: one byte short is refused, naming the need and what cudaMemGetInfo has free.
  const std::string m = refusal(job.peak - 1, 1);
  ASSERT_FALSE(m.empty()) << "a peak larger than the GPU's free memory was let through";
  EXPECT_EQ(InjectedMemInfo::asked_device, 1);  // the rank's own GPU
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m.rfind("memory pre-flight: each rank needs an estimated " + bench::human_bytes(double(job.peak)), 0), 0u) << m;
  EXPECT_NE(m.find("but " + bench::human_bytes(double(job.peak - 1)) + " is available (cudaMemGetInfo free)"),
            std::string::npos) << m;
  EXPECT_NE(m.find("--no-memory-check"), std::string::npos) << m;
  EXPECT_EQ(refusal(job.peak, 1), "");  // exactly enough fits
  // Two ranks on one GPU need twice the peak.
  const std::string two = refusal(2 * job.peak - 1, 2);
  EXPECT_NE(two.find(" x 2 ranks on this GPU = " + bench::human_bytes(double(2 * job.peak))), std::string::npos) << two;
  EXPECT_EQ(refusal(2 * job.peak, 2), "");
  // available_bytes reads the injected free and total.
  int64_t total = 0;
  InjectedMemInfo::free_bytes = 12345;
  EXPECT_EQ(runtime::available_bytes(gpu, &total), 12345);
  EXPECT_EQ(total, InjectedMemInfo::total_bytes);
}

TEST(CudaMemoryPreflight, AFailedMemGetInfoIsUnknownAndTheCheckStandsAside) {
  InjectedMemInfo inject;
  const at::Device gpu(at::kCUDA, 0);
  const auto job = gpu_job({"--backend", "zero3", "--precision", "bf16", "--model", "tiny"}, 1);
  InjectedMemInfo::ok = false;
  InjectedMemInfo::free_bytes = 0;
  int64_t total = -7;
  EXPECT_EQ(runtime::available_bytes(gpu, &total), -1);
  EXPECT_EQ(total, -7);  // not written
  EXPECT_NO_THROW(bench::check_memory(job.backend, job.spec, job.topo, 1, gpu, 1));  // as preflight.hpp says
  InjectedMemInfo::ok = true;
  EXPECT_THROW(bench::check_memory(job.backend, job.spec, job.topo, 1, gpu, 1), UsageError);  // 0 bytes free
}

TEST(CudaMemoryPreflight, RanksSharingAGpuFollowPickDevicesRoundRobin) {
  EXPECT_EQ(bench::ranks_sharing_gpu(1, 1, 0), 1);
  EXPECT_EQ(bench::ranks_sharing_gpu(8, 8, 3), 1);
  EXPECT_EQ(bench::ranks_sharing_gpu(2, 8, 5), 0);
  EXPECT_EQ(bench::ranks_sharing_gpu(4, 2, 1), 2);  // local ranks 1 and 3
  EXPECT_EQ(bench::ranks_sharing_gpu(3, 2, 0), 2);  // 0 and 2
  EXPECT_EQ(bench::ranks_sharing_gpu(3, 2, 1), 1);
}

// ---- build.sh reconfigures when what it configured with changes (CUDA option, torch, WERROR, UNITY, DEBUG_INFO) ----

TEST(BuildScript, ReconfiguresWhenTheCudaOptionOrTheTorchChanges) {
  // A cmake stand-in on PATH records each call: build.sh's decisions are seen without building.
  const auto dir = make_clean_dir("build_script");
  std::ofstream(dir + "/cmake") << "#!/bin/bash\necho \"cmake $*\" >> '" << dir << "/calls'\n"
                                << "if [ \"$1\" = -S ]; then mkdir -p \"$4\"; touch \"$4/build.ninja\" \"$4/CMakeCache.txt\"; fi\n";
  run_command("chmod +x '" + dir + "/cmake'");
  const auto build = [&](const std::string& env) {
    // WERROR, UNITY and DEBUG_INFO are unset first: CI exports WERROR=1 (.ci/run), and the defaults are
    // part of what is checked.
    return run_command("cd '" + kSource + "' && unset WERROR UNITY DEBUG_INFO && PATH='" + dir + "':$PATH BUILD_DIR='" + dir + "/build' " + env +
                       " scripts/build.sh 2>&1; grep -c -- ' -S ' '" + dir + "/calls'");
  };
  const auto configures = [](const test_support::BinaryResult& r) {
    const auto nl = r.output.find_last_of('\n', r.output.size() - 2);
    return std::stoi(r.output.substr(nl == std::string::npos ? 0 : nl + 1));
  };
  EXPECT_EQ(configures(build("ZEROBENCH_CUDA=OFF")), 1);  // a new build folder
  EXPECT_EQ(configures(build("ZEROBENCH_CUDA=OFF")), 1);  // nothing changed: no configure
  const auto on = build("ZEROBENCH_CUDA=ON");                 // the option changed
  EXPECT_EQ(configures(on), 2) << on.output;
  EXPECT_NE(on.output.find("reconfiguring"), std::string::npos) << on.output;
  const auto torch = build("ZEROBENCH_CUDA=ON ZEROBENCH_PYTHON=/bin/true");  // another interpreter: another torch
  EXPECT_EQ(configures(torch), 3) << torch.output;
  EXPECT_NE(torch.output.find("from a fresh cache"), std::string::npos) << torch.output;
  const auto werror = build("ZEROBENCH_CUDA=ON ZEROBENCH_PYTHON=/bin/true WERROR=1");  // warnings as errors (.ci/run)
  EXPECT_EQ(configures(werror), 4) << werror.output;
  EXPECT_EQ(configures(build("ZEROBENCH_CUDA=ON ZEROBENCH_PYTHON=/bin/true WERROR=1")), 4);
  const auto bad = build("ZEROBENCH_CUDA=ON ZEROBENCH_PYTHON=/bin/true WERROR=yes");
  EXPECT_NE(bad.output.find("WERROR must be 0 or 1, got 'yes'"), std::string::npos) << bad.output;
  EXPECT_EQ(configures(bad), 4) << bad.output;
  const auto serial = build("ZEROBENCH_CUDA=ON ZEROBENCH_PYTHON=/bin/true WERROR=1 UNITY=0");  // one file per compile
  EXPECT_EQ(configures(serial), 5) << serial.output;
  EXPECT_NE(serial.output.find("ZEROBENCH_UNITY=OFF, "), std::string::npos) << serial.output;
  EXPECT_EQ(configures(build("ZEROBENCH_CUDA=ON ZEROBENCH_PYTHON=/bin/true WERROR=1 UNITY=0")), 5);
  const auto bad_unity = build("ZEROBENCH_CUDA=ON ZEROBENCH_PYTHON=/bin/true WERROR=1 UNITY=on");
  EXPECT_NE(bad_unity.output.find("UNITY must be 0 or 1, got 'on'"), std::string::npos) << bad_unity.output;
  EXPECT_EQ(configures(bad_unity), 5) << bad_unity.output;
  const auto full = build("ZEROBENCH_CUDA=ON ZEROBENCH_PYTHON=/bin/true WERROR=1 UNITY=0 DEBUG_INFO=full");  // -g
  EXPECT_EQ(configures(full), 6) << full.output;
  EXPECT_NE(full.output.find("ZEROBENCH_DEBUG_INFO=full): reconfiguring"), std::string::npos) << full.output;
  const auto bad_debug = build("ZEROBENCH_CUDA=ON ZEROBENCH_PYTHON=/bin/true WERROR=1 UNITY=0 DEBUG_INFO=g1");
  EXPECT_NE(bad_debug.output.find("DEBUG_INFO must be lines or full, got 'g1'"), std::string::npos) << bad_debug.output;
  EXPECT_EQ(configures(bad_debug), 6) << bad_debug.output;
  const auto calls = read_file(dir + "/calls");
  EXPECT_NE(calls.find("-DZEROBENCH_CUDA=ON"), std::string::npos) << calls;
  EXPECT_NE(calls.find("-DZEROBENCH_WERROR=OFF"), std::string::npos) << calls;
  EXPECT_NE(calls.find("-DZEROBENCH_WERROR=ON"), std::string::npos) << calls;
  EXPECT_NE(calls.find("-DZEROBENCH_UNITY=ON"), std::string::npos) << calls;  // the default
  EXPECT_NE(calls.find("-DZEROBENCH_UNITY=OFF"), std::string::npos) << calls;
  EXPECT_NE(calls.find("-DZEROBENCH_DEBUG_INFO=lines"), std::string::npos) << calls;  // the default
  EXPECT_NE(calls.find("-DZEROBENCH_DEBUG_INFO=full"), std::string::npos) << calls;
}

// A clone at another path (CI's fresh checkout) hits ccache only if every compile command keys the
// same there: ccache rewrites the clone's paths in a command's path arguments (CCACHE_BASEDIR,
// scripts/build.sh) but hashes a -D value as it is, and a unity batch includes its sources by
// absolute path, so __FILE__ (assert, TORCH_CHECK, GoogleTest) differs unless -fmacro-prefix-map
// makes it relative. On 2026-11-29 the source tree's and zerobench's paths were compile definitions
// of zb_bench and of every test file: a fresh clone missed 47 of 102 compiles and built for 731 s;
// with the paths in generated files (bench/build_info.cpp.in, tests/CMakeLists.txt's
// test_paths.cpp) 23 still missed (292 s), the batches that expand __FILE__, until the map.
TEST(BuildScript, NoCompileCommandDependsOnWhereTheCloneIs) {
  const std::string bin = test_support::zerobench_bin();
  const std::string build = bin.substr(0, bin.rfind("/bin/"));
  std::ifstream in(build + "/compile_commands.json");
  ASSERT_TRUE(in.good()) << build << "/compile_commands.json";
  const auto commands = nlohmann::json::parse(in);
  ASSERT_GT(commands.size(), 20u);
  const std::regex define(R"((?:^|\s)-D(\S+))");
  const std::string map = "-fmacro-prefix-map=" + kSource + "/=";
  int defines = 0, cxx = 0;
  for (const auto& c : commands) {
    const std::string cmd = c.at("command"), file = c.at("file");
    for (std::sregex_iterator m(cmd.begin(), cmd.end(), define), end; m != end; ++m) {
      ++defines;
      const std::string d = (*m)[1];
      EXPECT_EQ(d.find(kSource), std::string::npos) << file << ": -D" << d;
      EXPECT_EQ(d.find(build), std::string::npos) << file << ": -D" << d;
    }
    ++cxx;
    EXPECT_NE(cmd.find(map), std::string::npos) << file << " is compiled without " << map;
  }
  EXPECT_GT(defines, 0) << "the pattern must see the definitions there are (USE_C10D_GLOO, ...)";
  EXPECT_GT(cxx, 20);
}
