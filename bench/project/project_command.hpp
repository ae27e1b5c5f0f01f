// project_command.hpp — `zerobench project`: the command glue. Owns: its flags, reading the
// report and the calibration, writing the projected report and printing its table, and the
// `--replay` printout. Must not: project or replay anything itself (analysis/projection/:
// projection.hpp, replay.hpp) or model schedules and collectives.
#pragma once
#include <CLI/CLI.hpp>

#include "analysis/projection/projection.hpp"

namespace zb::bench::projection {

using analysis::projection::ProjectOptions;

void add_project_options(CLI::App& app, ProjectOptions& o);
int project_command(const ProjectOptions& o);

}  // namespace zb::bench::projection
