// analysis.hpp — `zerobench compare`'s numbers: from each side's reports (one per repetition,
// failed ones included) to the compare JSON (schema in docs/compare.md): Table 3 (tokens/GPU/s,
// s/step, MFU: median and order-statistic interval over repetitions), Table 2 (the reports'
// config.precision_plan, or null), per-rank memory by category next to the pre-flight estimate,
// collectives per step, loss and grad-norm curves, paired B-vs-A ratios, differing config keys.
// Owns: which report field feeds which number, and the pairing of rounds. Must not: run anything,
// format text (render.cpp, verdict.cpp) or invent a value a report does not hold.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zb::bench::compare {

struct SideRuns {
  std::string label, spec;
  // runs[i]: round i's report (a failed run's report is a failed report; a missing one is null);
  // report_files[i]: its file name (for the output's links).
  std::vector<nlohmann::json> runs;
  std::vector<std::string> report_files;
};

// The compare document without the verdict (verdict.hpp adds it). `workload`: the shared flags
// as given to every run (echoed). The first side is the baseline the others are compared with.
nlohmann::json analyse(const std::vector<SideRuns>& sides, const nlohmann::json& workload, int repeat);

// Largest |a_i - b_i| / max(|a_i|, tiny) over the common finite entries; NaN when none are common.
double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace zb::bench::compare
