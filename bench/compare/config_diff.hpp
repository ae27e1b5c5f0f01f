// config_diff.hpp — the configuration keys on which the sides of `zerobench compare` differ, each
// with what the difference does (one dictionary of effects, keyed by the resolved option's name).
// Reads config.backend (name, precision, options) and config.train of each side's typed record.
// Owns: the flattening of those objects into keys and the effect sentences. Must not: run anything
// or decide which side is better.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/run_report.hpp"

namespace zb::bench::compare {

// The effect sentence for a flattened key ("options.reduce_bucket_size", "train.micro_batch",
// "backend", ...): looked up by its last component; "no description" for a key the dictionary
// does not know (never silence).
std::string config_effect(const std::string& key);

// Every key whose value differs between the configs (a key one side lacks counts as differing,
// shown as null there). configs[i] is a report's config (nullptr for a side with no report): the
// backend's name, precision and options (each option a key, flattened: "options.offload.device")
// and the train settings. Returns [{key, values: [v per side], effect}], sorted by key.
nlohmann::json config_differences(const std::vector<const reports::RunConfig*>& configs);

// The keys that change what is trained (batch, sequence, steps, data, seed): a compare whose
// sides differ here is not like for like, and the verdict says so.
bool is_workload_key(const std::string& key);

}  // namespace zb::bench::compare
