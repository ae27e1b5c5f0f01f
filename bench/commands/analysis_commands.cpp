// analysis_commands.cpp — registers the commands that model rather than train: `micro` (Google
// Benchmark micro-benchmarks that calibrate the cost model) and `project` (predict a run on W
// ranks x N nodes from a calibration). Their logic is in the micro and projection folders.
#include <CLI/CLI.hpp>

#include <memory>

#include "bench/commands/command.hpp"
#include "bench/project/micro_command.hpp"
#include "bench/project/project_command.hpp"

namespace zb::bench {
namespace {

const CommandRegistrar kMicro(
    {"micro", "Google Benchmark micro-benchmarks (collectives, GEMMs, copies) on W ranks", 60, [](CLI::App& cmd) {
       auto m = std::make_shared<micro::MicroOptions>();
       micro::add_micro_options(cmd, *m);
       return CommandAction([m, &cmd](const std::vector<std::string>& argv) {
         m->benchmark_args = cmd.remaining();
         m->max_bytes_given = cmd.count("--max-bytes") > 0;
         return micro::micro_command(*m, argv);
       });
     }});

const CommandRegistrar kProject(
    {"project", "predict a measured run on W ranks x N nodes from a calibration (micro JSON or a preset)", 70,
     [](CLI::App& cmd) {
       auto p = std::make_shared<projection::ProjectOptions>();
       projection::add_project_options(cmd, *p);
       return CommandAction([p](const std::vector<std::string>&) { return projection::project_command(*p); });
     }});

}  // namespace
}  // namespace zb::bench
