// fsdp_config.hpp — fsdp's side of config files and the command line (its descriptor's
// config/CLI hooks, assigned in fsdp_engine.cpp backend_info()): accelerate configs with
// distributed_type FSDP (fsdp_version 1, read by config/accelerate_fsdp.cpp) turned into
// FsdpOptions, and the FSDP flags (--sharding-strategy, --backward-prefetch, ...).
// Must not: read a file's format (config/ does) or parse a command line.
#pragma once
#include <nlohmann/json.hpp>

#include <vector>

#include "backends/config_hooks.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "config/accelerate_fsdp.hpp"

namespace zb::backends::fsdp {

// The FsdpOptions an accelerate fsdp_config block (version 1) asks for; throws UsageError for a
// strategy zerobench does not run (naming the file's key).
FsdpOptions options_from_accelerate(const config::AccelerateFsdpConfig& c);

int config_claim(const ConfigIdentity& id);
void read_config(const ConfigInput& in, ResolvedConfig& out);
std::vector<BackendFlag> cli_flags();
// BackendInfo::analysis.option_effects: what changing each option does (bench/compare's config diff).
std::vector<OptionEffect> option_effects();
void apply_flags(const FlagValues& given, bool from_file, EngineSpec& spec, config::ConfigNotes& notes);
// FSDP1's sync_module_states: rank 0's weights are broadcast before sharding.
bool broadcasts_initial_weights(const BackendOptions& options);

}  // namespace zb::backends::fsdp
