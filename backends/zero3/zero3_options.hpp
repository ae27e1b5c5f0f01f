// zero3_options.hpp — ZeRO3-mode options, named and defaulted as DeepSpeed's
// runtime/zero/config.py names them (stage 3), and their JSON round trip.
// Owns: defaults and validation. Must not: run anything, or read a config file's format
// (config/deepspeed_config.hpp reads a DeepSpeed JSON, config/accelerate_deepspeed.hpp
// accelerate's DeepSpeed plugin; zero3_config.hpp turns them into these options).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace zb::backends::zero3 {

struct Zero3Options {
  int64_t reduce_bucket_size = 500000000;           // elements per gradient reduce bucket
  int64_t stage3_prefetch_bucket_size = 50000000;   // elements prefetched ahead (trace-based)
  int64_t stage3_param_persistence_threshold = 100000;  // numel <= this: never released
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;   // keep a param if reused within this many elements
  int64_t sub_group_size = 1000000000;              // fp32 master / optimizer step granularity (0: one per param)
  bool overlap_comm = true;                         // stage 3 turns it on by default
  bool contiguous_gradients = true;
  std::string communication_data_type;              // "" = model dtype; bf16 | fp32
  std::string grad_accum_dtype;                     // "" = model dtype; bf16 | fp32
};

nlohmann::json to_json(const Zero3Options& o);
Zero3Options zero3_options_from_json(const nlohmann::json& j);  // keys as in to_json; throws UsageError

}  // namespace zb::backends::zero3
