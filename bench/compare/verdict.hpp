// verdict.hpp — the verdict paragraph of `zerobench compare`, in plain words, written from the
// compare JSON alone (analysis.hpp computes it first): speed with its interval, model-state and
// peak memory per rank, whether the losses agree, failed sides and unlike workloads.
// Roundings (a test parses the text back against the JSON): percentages and MiB to 1 decimal,
// memory ratios to 2 decimals, B/A ratios to 3 decimals, relative differences as %.1e, interval
// levels as "95%" when the exact coverage is at least 0.95, else the coverage to 1 decimal.
// Owns: the wording. Must not: compute a number the JSON does not hold (beyond those roundings,
// the sign flip of "slower" and the bytes-to-MiB division).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace zb::bench::compare {

std::string verdict(const nlohmann::json& compare);

// "95%" when coverage >= 0.95, else the coverage as a percentage to 1 decimal ("93.8%").
std::string interval_level(double coverage);

}  // namespace zb::bench::compare
