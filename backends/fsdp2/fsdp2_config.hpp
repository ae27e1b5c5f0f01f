// fsdp2_config.hpp — fsdp2's side of config files and the command line (its descriptor's
// config/CLI hooks, assigned in fsdp2_engine.cpp backend_info()): accelerate configs with
// distributed_type FSDP and fsdp_version 2 (read by config/accelerate_fsdp2.cpp) turned into
// Fsdp2Options, and the FSDP2 flags (--reshard-after-forward, --dp-replicate-size, ...).
// Must not: read a file's format (config/ does) or parse a command line.
#pragma once
#include <nlohmann/json.hpp>

#include <vector>

#include "backends/config_hooks.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"

namespace zb::backends::fsdp2 {

// The Fsdp2Options accelerate 1.15 builds from such a file (utils/fsdp_utils.py
// fsdp2_prepare_model's grouping, the file's keys).
Fsdp2Options options_from_accelerate(const config::AccelerateFsdp2Config& c);

int config_claim(const ConfigIdentity& id);
void read_config(const ConfigInput& in, ResolvedConfig& out);
std::vector<BackendFlag> cli_flags();
// BackendInfo::analysis.option_effects: what changing each option does (bench/compare's config diff).
std::vector<OptionEffect> option_effects();
void apply_flags(const FlagValues& given, bool from_file, EngineSpec& spec, config::ConfigNotes& notes);
// cpu_ram_efficient_loading: rank 0 builds the weights and broadcasts each parameter.
bool broadcasts_initial_weights(const BackendOptions& options);

}  // namespace zb::backends::fsdp2
