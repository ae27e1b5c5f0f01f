// zero12_config.hpp — zero1/zero2's side of config files and the command line (their
// descriptors' config/CLI hooks, assigned in zero12_engine.cpp backend_info()): DeepSpeed configs
// whose zero_optimization.stage is 1 or 2 (a DeepSpeed JSON, or accelerate's DEEPSPEED plugin),
// read by config/deepspeed_*.cpp and turned into Zero12Options; the stage each runs; the flags
// --zero-stage, --zero-reduce-bucket-size, --zero-allgather-bucket-size, --zero-overlap-comm,
// --zero-contiguous-gradients, --zero-reduce-scatter, --zero-round-robin-gradients.
// Must not: read a file's format (config/ does) or parse a command line.
#pragma once
#include <functional>
#include <vector>

#include "backends/config_hooks.hpp"
#include "backends/zero12/zero12_options.hpp"

namespace zb::backends::zero12 {

// The Zero12Options a DeepSpeed config asks for (validated: throws UsageError).
Zero12Options options_from_deepspeed(const config::DeepSpeedConfig& c, int stage);
// Accepts ZeRO stage `stage`; throws UsageError naming the key and the stage otherwise.
void accept_stage(const config::DeepSpeedStage& s, int stage);

std::function<int(const ConfigIdentity&)> config_claim_for(int stage);
std::function<void(const ConfigInput&, ResolvedConfig&)> read_config_for(int stage);
std::vector<BackendFlag> cli_flags(int stage);
// BackendInfo::analysis.option_effects: what changing each option does (bench/compare's config diff).
std::vector<OptionEffect> option_effects();
std::function<void(const FlagValues&, bool, EngineSpec&, config::ConfigNotes&)> apply_flags_for(int stage);

// --zero-stage given with a backend that does not run that stage: one line (shared with zero3,
// which declares the flag too). No-op when the flag is absent or names `stage`.
void check_zero_stage_flag(const FlagValues& given, int stage, const std::string& backend);

}  // namespace zb::backends::zero12
