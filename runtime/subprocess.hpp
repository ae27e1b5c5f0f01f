// subprocess.hpp — run one child command with a wall-clock limit (the matrix runs each cell
// this way). Owns: fork/exec in a new process group, capturing stderr, killing the whole group
// on timeout or interrupt. Must not: interpret what the child does.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace zb::runtime {

struct SubprocessResult {
  int exit_code = 0;          // the child's exit code; 128+signal if killed by a signal
  bool timed_out = false;
  bool interrupted = false;   // SIGINT/SIGTERM reached us while it ran
  int signal = 0;             // signal that ended it, 0 if it exited
  std::string stderr_tail;    // the last lines it wrote to stderr
  double wall_s = 0;
  // Times the wait loop went round: one per 50 ms tick or burst of output, so about wall_s / 0.05
  // for a quiet child (a loop that spun instead would count hundreds of thousands).
  int64_t wakeups = 0;
};

// argv[0] is the program path. timeout 0 = none. stderr is also passed through to ours.
SubprocessResult run_subprocess(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

std::string self_executable();

}  // namespace zb::runtime
