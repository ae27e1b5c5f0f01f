// cli_main.cpp — the registry of subcommands and the command line built from it (see command.hpp).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "bench/commands/command.hpp"
#include "runtime/errors.hpp"
#include "runtime/world.hpp"

namespace zb::bench {

namespace {
std::vector<Command>& registry() {
  static std::vector<Command> all;
  return all;
}
}  // namespace

CommandRegistrar::CommandRegistrar(Command c) {
  auto& all = registry();
  all.push_back(std::move(c));
  std::stable_sort(all.begin(), all.end(), [](const Command& a, const Command& b) { return a.order < b.order; });
}

const std::vector<Command>& registered_commands() { return registry(); }

int cli_main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  CLI::App app{"zerobench — FSDP-mode vs ZeRO3-mode LLM training benchmarks"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, CommandAction>> actions;
  for (const auto& c : registered_commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    actions.emplace_back(sub, c.define(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "zerobench: error: " << e.what() << " (see zerobench --help)\n";
    return kExitUsage;
  }
  const char* rank = std::getenv("RANK");
  const std::string who = rank && std::getenv("WORLD_SIZE") ? "rank " + std::string(rank) + ": " : "";
  try {
    for (auto& [sub, action] : actions)
      if (*sub) return action(args);
  } catch (const UsageError& e) {
    std::cerr << "zerobench: " << who << "error: " << e.what() << "\n";
    runtime::abort_process_groups_at_exit();  // an error: NCCL communicators are aborted, not drained
    return kExitUsage;
  } catch (const std::exception& e) {
    runtime::abort_process_groups_at_exit();
    std::string msg = e.what();
    auto nl = msg.find('\n');  // c10::Error carries a backtrace after the first line
    std::cerr << "zerobench: " << who << "failed: " << msg.substr(0, nl) << "\n";
    return kExitFailed;
  }
  return kExitUsage;
}

}  // namespace zb::bench
