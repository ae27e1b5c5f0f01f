// test_subprocess.cpp — runtime/subprocess.cpp: the wait loop of run_subprocess, which crossval
// (each side of every mode), the matrix (each cell) and the lifecycle study run their children with;
// and runtime/launcher.cpp starting another program's ranks (crossval's Python reference) as
// torchrun's agent would.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "runtime/launcher.hpp"
#include "runtime/subprocess.hpp"
#include "tests/run_binary.hpp"

namespace {
using zb::runtime::run_subprocess;

// A child that sends its stderr elsewhere closes the pipe at once (crossval's reference side: its
// log is a file): poll then reports the hang-up without waiting, and a loop that kept polling the
// fd went round about a hundred thousand times a second, a core spent beside every reference run
// (strace of one crossval mode: 300,170 waitpid calls). Paced by its 50 ms tick it wakes about 20
// times in this child's second.
TEST(Subprocess, AChildWithoutStderrIsWaitedForWithoutSpinning) {
  const auto r = run_subprocess({"/bin/sh", "-c", "exec 2>/dev/null; sleep 1"}, std::chrono::milliseconds(0));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_GE(r.wall_s, 1.0);
  EXPECT_LT(double(r.wakeups), r.wall_s / 0.05 * 2 + 10) << r.wakeups << " wake-ups in " << r.wall_s << " s";
}

// Output is still passed through and its tail kept; the exit code and a timeout are still seen.
TEST(Subprocess, StderrTailExitCodeAndTimeout) {
  auto r = run_subprocess({"/bin/sh", "-c", "echo first >&2; sleep 0.2; echo last >&2; exit 3"}, std::chrono::milliseconds(0));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.stderr_tail.find("first"), std::string::npos) << r.stderr_tail;
  EXPECT_NE(r.stderr_tail.find("last"), std::string::npos) << r.stderr_tail;
  r = run_subprocess({"/bin/sh", "-c", "exec 2>/dev/null; sleep 30"}, std::chrono::milliseconds(300));
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(r.wall_s, 10.0);
}

// Crossval's reference ranks are started by zerobench's launcher, not torchrun (its agent's
// `import torch` is 2.5 s of CPU a mode): each rank must see what torchrun's agent gives it. The
// same script under `torchrun --standalone` and under launch_local(program) prints its
// launcher-given variables (every RANK / WORLD_SIZE / MASTER_ / ROLE_ / GROUP_ / TORCHELASTIC_ /
// TORCH_NCCL_ name) and an all_reduce over the rendezvous: the same names, the same values but for
// the store's address and port and the run id (each launch's own) and two agent-side variables,
// and a working Gloo group through the agent store.
std::map<int, nlohmann::json> ranks_printed(const std::string& output) {
  std::map<int, nlohmann::json> by_rank;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("ENV ", 0) == 0) {
      auto j = nlohmann::json::parse(line.substr(4));
      by_rank[std::stoi(j["vars"]["RANK"].get<std::string>())] = j;
    }
  return by_rank;
}

TEST(Launcher, AnotherProgramsRanksGetTorchrunsWorkerEnvironmentAndItsAgentStore) {
  const std::string script = zb::test_support::temp_path("launcher_env.py");
  std::ofstream(script) << R"(import json, os, re
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
pat = re.compile(r"^(RANK|LOCAL_RANK|.*WORLD_SIZE|MASTER_.*|ROLE_.*|GROUP_.*|TORCHELASTIC_.*|TORCH_NCCL_.*)$")
line = "ENV " + json.dumps({"vars": {k: v for k, v in os.environ.items() if pat.match(k)}, "sum": t.item()}) + "\n"
os.write(1, line.encode())  # one write: the ranks share one output
dist.destroy_process_group()
)";
  const std::string python = ZEROBENCH_PYTHON_EXE;
  const auto under_torchrun = zb::test_support::run_command(
      "env -u TORCH_NCCL_ASYNC_ERROR_HANDLING '" + python + "' -m torch.distributed.run --standalone --nproc-per-node 2 '" +
      script + "' 2>&1");
  ASSERT_EQ(under_torchrun.exit_code, 0) << under_torchrun.output;
  const auto expected = ranks_printed(under_torchrun.output);
  ASSERT_EQ(expected.size(), 2u) << under_torchrun.output;

  const std::string log = zb::test_support::temp_path("launcher_env.log");
  std::remove(log.c_str());
  unsetenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  zb::runtime::LaunchOptions lo;
  lo.nproc = 2;
  lo.program = python;
  lo.argv = {python, script};
  lo.output_file = log;
  lo.timeout = std::chrono::milliseconds(120000);
  const auto r = zb::runtime::launch_local(lo);
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(r.exit_code, 0) << r.message << "\n" << output;
  const auto got = ranks_printed(output);
  ASSERT_EQ(got.size(), 2u) << output;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(got.at(rank)["sum"], 3.0) << output;
    auto want = expected.at(rank)["vars"], have = got.at(rank)["vars"];
    for (const char* own : {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}) {  // each launch's own store and id
      EXPECT_TRUE(have.contains(own)) << own;
      want.erase(own);
      have.erase(own);
    }
    // Not given, on purpose: where torch.distributed.elastic's @record writes a worker's failure
    // (the runners record their own: common.py record_failure) and the signals torchrun's agent
    // handles (the agent's variable, inherited; no worker reads it).
    for (const char* agents : {"TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE"}) {
      EXPECT_TRUE(want.contains(agents)) << agents << ": torchrun no longer sets it; drop it from this list";
      EXPECT_FALSE(have.contains(agents)) << agents;
      want.erase(agents);
    }
    EXPECT_EQ(have, want) << "rank " << rank << ": zerobench's launcher\n" << have.dump(1) << "\ntorchrun\n" << want.dump(1);
  }
}

}  // namespace
