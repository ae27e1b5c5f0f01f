// run_binary.hpp — test support: run the zerobench binary and capture its exit code and output.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

namespace zb::test_support {

struct BinaryResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline BinaryResult run_zerobench(const std::string& args) {
  const std::string cmd = std::string(ZEROBENCH_BIN) + " " + args + " 2>&1";
  BinaryResult r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), int(buf.size()), p)) r.output += buf.data();
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string temp_path(const std::string& name) {
  return "/tmp/zb_test_" + std::to_string(getpid()) + "_" + name;
}

}  // namespace zb::test_support
