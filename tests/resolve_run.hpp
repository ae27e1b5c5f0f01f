// resolve_run.hpp — test support: `zerobench run FLAGS` resolved in-process (no process started),
// through the same CLI11 options, given-flag marks and RunOptions::resolve() the binary runs.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "bench/run/run_options.hpp"

namespace zb::test_support {

inline bench::RunOptions::Resolved resolve_run(const std::vector<std::string>& flags) {
  CLI::App app;
  bench::RunOptions o;
  bench::add_run_options(app, o);
  std::vector<std::string> args(flags.rbegin(), flags.rend());  // CLI11 takes a reversed vector
  app.parse(args);
  bench::mark_given(app, o);
  o.nproc = o.world_size_hint();
  return o.resolve();
}

}  // namespace zb::test_support
