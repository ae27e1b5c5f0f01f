// command.hpp — how a zerobench subcommand joins the command line: each file in bench/commands/
// registers its subcommand(s) with one static CommandRegistrar (name, help, --help position, and
// a function that declares the options and returns the action), and cli_main builds the CLI11 app
// from what is registered. Owns: the registry and cli_main (parse, dispatch, and the one place
// exceptions become exit codes: 0 ok, 1 run failed, 2 usage or bad input, with a one-line
// message). Must not: hold a command's logic (that is in its own folder: bench/, analysis/, ...).
// The registrars run at static initialisation, so these files are linked as an OBJECT library
// (bench/CMakeLists.txt zb_commands) into every executable that has the command line.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace zb::bench {

// What runs when the subcommand was chosen; argv is the full command line (for relaunch).
using CommandAction = std::function<int(const std::vector<std::string>& argv)>;

struct Command {
  std::string name, help;
  int order = 0;  // position in --help, lower first
  // Declares the options on the subcommand `cmd` (the storage they parse into lives in the
  // returned action's captures) and returns the action.
  std::function<CommandAction(CLI::App& cmd)> define;
};

struct CommandRegistrar {
  explicit CommandRegistrar(Command c);
};

const std::vector<Command>& registered_commands();  // sorted by order

// The zerobench command line: parse argv, run the chosen subcommand, map exceptions to exit codes.
int cli_main(int argc, char** argv);

}  // namespace zb::bench
