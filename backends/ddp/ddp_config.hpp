// ddp_config.hpp — ddp's side of config files and the command line (its descriptor's
// config/CLI hooks, assigned in ddp_engine.cpp backend_info()): accelerate's MULTI_GPU /
// MULTI_CPU / NO configs (DistributedDataParallel through accelerate's native AMP) and
// --bucket-cap-mb. Must not: read a file's format (config/ does) or parse a command line.
#pragma once
#include <vector>

#include "backends/config_hooks.hpp"

namespace zb::backends::ddp {

int config_claim(const ConfigIdentity& id);
void read_config(const ConfigInput& in, ResolvedConfig& out);
std::vector<BackendFlag> cli_flags();
// BackendInfo::option_effects: what changing each option does (bench/compare's config diff).
std::vector<OptionEffect> option_effects();
void apply_flags(const FlagValues& given, bool from_file, EngineSpec& spec, config::ConfigNotes& notes);

}  // namespace zb::backends::ddp
