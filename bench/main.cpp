// main.cpp — the zerobench executable: the command line built from the subcommands that register
// themselves in bench/commands/ (command.hpp says how; cli_main.cpp parses and dispatches).
#include "bench/commands/command.hpp"

int main(int argc, char** argv) { return zb::bench::cli_main(argc, argv); }
