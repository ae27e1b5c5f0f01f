// zero3_config.hpp — zero3's side of config files and the command line (its descriptor's
// config/CLI hooks, assigned in zero3_engine.cpp backend_info()): DeepSpeed configs (a DeepSpeed
// JSON on its own, or accelerate's distributed_type DEEPSPEED), read by config/deepspeed_*.cpp
// and config/accelerate_deepspeed.cpp, turned into Zero3Options; the stage it runs (3); and the
// ZeRO-3 flags (--reduce-bucket-size, --prefetch-bucket-size, ...).
// Must not: read a file's format (config/ does) or parse a command line.
#pragma once
#include <vector>

#include "backends/config_hooks.hpp"
#include "backends/zero3/zero3_options.hpp"

namespace zb::backends::zero3 {

// The Zero3Options a DeepSpeed config asks for (validated: throws UsageError).
Zero3Options options_from_deepspeed(const config::DeepSpeedConfig& c);
// Accepts ZeRO stage 3; throws UsageError naming the key and the stage otherwise.
void accept_stage(const config::DeepSpeedStage& s);

int config_claim(const ConfigIdentity& id);
void read_config(const ConfigInput& in, ResolvedConfig& out);
std::vector<BackendFlag> cli_flags();
// BackendInfo::analysis.option_effects: what changing each option does (bench/compare's config diff).
std::vector<OptionEffect> option_effects();
void apply_flags(const FlagValues& given, bool from_file, EngineSpec& spec, config::ConfigNotes& notes);

}  // namespace zb::backends::zero3
