// zero0_config.hpp — zero0's options (named as DeepSpeed 0.19.8 names what its stage 0 reads) and
// its side of config files: DeepSpeed JSONs and accelerate DEEPSPEED files whose ZeRO stage is 0
// (zero_optimization.stage 0, the section missing, its deprecated boolean false, or the plugin's
// zero_stage 0). Owns: the defaults, the validation (one line naming the key for what DeepSpeed
// itself refuses at stage 0 or zerobench does not run), the config hooks and the engine's resolved
// record (Zero0Resolved: the report's config.backend.options both ways). Must not: run anything or
// read a file's format (config/ does).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/common/loss_scaler.hpp"
#include "backends/config_hooks.hpp"
#include "backends/deepspeed_family/deepspeed_resolved.hpp"

namespace zb::backends::zero0 {

struct Zero0Options {
  std::string communication_data_type;  // "" = model dtype; bf16 | fp16 | fp32 (allreduce_bucket casts to it)
  std::string grad_accum_dtype;         // "" = model dtype; any other dtype: DeepSpeed raises (refused)
  common::DeepSpeedLossScaleOptions fp16;  // the `fp16` section's loss scaling (precision fp16 only)
  // The optimizer DeepSpeed steps: HF Trainer's client torch.optim.AdamW (no "optimizer" section),
  // or DeepSpeed's own from the section — torch AdamW with torch_adam, else FusedAdam.
  bool fused_adam = false;
};

nlohmann::json to_json(const Zero0Options& o);
Zero0Options zero0_options_from_json(const nlohmann::json& j);  // validated; throws UsageError naming the key
void validate(const Zero0Options& o);  // throws UsageError for a refused dtype; resolution calls it once
// The options a spec carries (EngineSpec::options): the struct resolution stored, or a raw object
// parsed once by zero0_options_from_json. Every reader of a spec's options goes here.
const Zero0Options& zero0_options(const BackendOptions& options);
// The refusals that depend on the precision, one line naming the key (DeepSpeed's own where it refuses).
void check_precision(const Zero0Options& o, const std::string& precision);

// What the engine resolved (Zero0Engine::resolved_options(), the report's config.backend.options):
// its options and what it worked out. to_json and zero0_resolved_from_json are the one mapping
// between the record and the report's keys (the report writes communication_data_type and
// grad_accum_dtype as the dtypes resolved, so the options' own strings are not in it; its fp16
// section is written whatever the precision, with the scaler's name under fp16).
struct Zero0Resolved {
  Zero0Options options;
  deepspeed_family::DeepSpeedPrecisionResolved precision;  // dtypes resolved; fp16's scaler
  int64_t allreduce_bucket_elements = 0;  // MEMORY_OPT_ALLREDUCE_SIZE: a bucket closes past it
  int64_t allreduce_buckets = 0;          // buckets of one gradient all-reduce
  std::string optimizer_wrapper;          // none (the basic optimizer) | FP16_UnfusedOptimizer
  std::string optimizer;                  // what steps the parameters or masters (a description)
};
nlohmann::json to_json(const Zero0Resolved& r);
// A report's config.backend.options (a key it lacks: the default); UsageError for a key that is
// neither the record's nor an option (zero0_options_from_json's check).
Zero0Resolved zero0_resolved_from_json(const nlohmann::json& j);

int config_claim(const ConfigIdentity& id);
void read_config(const ConfigInput& in, ResolvedConfig& out);

}  // namespace zb::backends::zero0
