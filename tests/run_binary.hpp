// run_binary.hpp — test support: run the zerobench binary (or any command line) and capture its exit
// code and output; scratch paths and directories under /tmp.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/build_paths.hpp"

namespace zb::test_support {

struct BinaryResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line; returns its exit code and what it printed (append " 2>&1" for stderr).
inline BinaryResult run_command(const std::string& cmd) {
  BinaryResult r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), int(buf.size()), p)) r.output += buf.data();
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline BinaryResult run_zerobench(const std::string& args) {
  return run_command(std::string(zb::test_support::zerobench_bin()) + " " + args + " 2>&1");
}

inline std::string temp_path(const std::string& name) {
  return "/tmp/zb_test_" + std::to_string(getpid()) + "_" + name;
}

// temp_path(name) as a new, empty directory (whatever was there is removed); "" if that failed.
inline std::string make_clean_dir(const std::string& name) {
  const auto d = temp_path(name);
  return std::system(("rm -rf '" + d + "' && mkdir -p '" + d + "'").c_str()) == 0 ? d : std::string();
}

}  // namespace zb::test_support
