// test_subprocess.cpp — runtime/subprocess.cpp: the wait loop of run_subprocess, which crossval
// (each side of every mode), the matrix (each cell) and the lifecycle study run their children with.
#include <gtest/gtest.h>

#include "runtime/subprocess.hpp"

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
}  // namespace
