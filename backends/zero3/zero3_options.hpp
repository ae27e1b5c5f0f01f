// zero3_options.hpp — ZeRO3-mode options, named and defaulted as DeepSpeed's
// runtime/zero/config.py names them, and the reader for a DeepSpeed JSON config.
// Owns: defaults, "auto" resolution (as transformers' HfTrainerDeepSpeedConfig resolves it),
// validation. Must not: run anything.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zb::backends::zero3 {

struct Zero3Options {
  int64_t reduce_bucket_size = 500000000;           // elements per gradient reduce bucket
  int64_t stage3_prefetch_bucket_size = 50000000;   // elements prefetched ahead (trace-based)
  int64_t stage3_param_persistence_threshold = 100000;  // numel <= this: never released
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;   // keep a param if reused within this many elements
  int64_t sub_group_size = 1000000000;              // fp32 master / optimizer step granularity
  bool overlap_comm = true;                         // stage 3 turns it on by default
  bool contiguous_gradients = true;
  std::string communication_data_type;              // "" = model dtype; bf16 | fp32
  std::string grad_accum_dtype;                     // "" = model dtype; bf16 | fp32
};

nlohmann::json to_json(const Zero3Options& o);
Zero3Options zero3_options_from_json(const nlohmann::json& j);  // keys as in to_json; throws UsageError

struct DeepSpeedConfig {
  Zero3Options zero;
  std::string precision;      // "bf16" when bf16.enabled, "fp32" when explicitly disabled, "" if absent
  int64_t micro_batch = 0;    // train_micro_batch_size_per_gpu (0 = absent or "auto")
  int64_t grad_accum = 0;     // gradient_accumulation_steps
  double grad_clip = -1;      // gradient_clipping (-1 = absent or "auto")
  std::vector<std::string> warnings;
};
// `hidden` resolves "auto": reduce bucket hidden^2, prefetch bucket 0.9 hidden^2, persistence
// threshold 10 hidden. Throws UsageError naming the key and value.
DeepSpeedConfig read_deepspeed_config(const std::string& path, int64_t hidden);

}  // namespace zb::backends::zero3
