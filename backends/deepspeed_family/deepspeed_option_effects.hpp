// deepspeed_option_effects.hpp — what changing an option every DeepSpeed ZeRO stage shares does
// (stage, reduce_bucket_size, overlap_comm, the dtypes), for the zero3 and zero1/zero2 backends'
// BackendInfo::analysis.option_effects (bench/compare's config diff). Owns: those sentences. Must not:
// describe one stage's own options (each backend's <x>_config.cpp does).
// Belongs to the DeepSpeed family (backends/deepspeed_family/), used by zero0, zero12, zero3.
#pragma once
#include <vector>

#include "backends/config_hooks.hpp"

namespace zb::backends::deepspeed_family {

std::vector<OptionEffect> deepspeed_option_effects();

}  // namespace zb::backends::deepspeed_family
