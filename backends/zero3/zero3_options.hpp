// zero3_options.hpp — ZeRO3-mode options, named and defaulted as DeepSpeed's
// runtime/zero/config.py names them (stage 3), and their JSON round trip.
// Owns: defaults and validation. Must not: run anything, or read a config file's format
// (config/deepspeed_config.hpp reads a DeepSpeed JSON, config/accelerate_deepspeed.hpp
// accelerate's DeepSpeed plugin; zero3_config.hpp turns them into these options).
#pragma once
#include <nlohmann/json.hpp>

#include "backends/backend_options.hpp"
#include "backends/common/loss_scaler.hpp"
#include "backends/deepspeed_family/deepspeed_resolved.hpp"
#include "backends/precision_plan.hpp"
#include "config/deepspeed_zero_config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zb::backends::zero3 {

// zero_optimization.offload_optimizer, as DeepSpeed 0.19.8's runtime/zero/offload_config.py
// DeepSpeedZeroOffloadOptimizerConfig names and defaults it. device cpu: fp32 master partitions,
// their gradients and the optimizer states on the host, the optimizer stepping there
// (stage3.py; backends/zero3/zero3_offload.hpp). nvme, ratio < 1 and super_offload are refused;
// buffer_count, fast_init and pipeline_read/write only drive the NVMe swapper (swap_tensor/).
struct OffloadOptimizerOptions {
  std::string device = "none";  // none | cpu (nvme refused)
  bool pin_memory = true;
  int64_t buffer_count = 4;
  bool fast_init = false, pipeline_read = false, pipeline_write = false;
  double ratio = 1.0;
  bool enabled() const { return device == "cpu"; }
};

// zero_optimization.offload_param, as DeepSpeedZeroOffloadParamConfig names and defaults it.
// device cpu: the model-dtype parameter partitions on the host, each copied to the device before
// its all-gather (partition_parameters.py). buffer_count, buffer_size and max_in_cpu are read by
// DeepSpeed only with device nvme (the swapper's buffer pool; stage3.py
// _create_param_groups_fp16_flat_cpu_memory caps the host buffer by max_in_cpu only when
// params_in_nvme_and_cpu): kept and shown, without effect on cpu, as upstream.
struct OffloadParamOptions {
  std::string device = "none";  // none | cpu (nvme refused)
  bool pin_memory = true;
  int64_t buffer_count = 5, buffer_size = 100000000, max_in_cpu = 1000000000;
  bool enabled() const { return device == "cpu"; }
};

// The optimizer that steps the host's fp32 partitions under offload_optimizer: DeepSpeedCPUAdam
// (DeepSpeed's choice for an "optimizer" section without torch_adam, and accelerate's replacement
// of a client optimizer while zero_force_ds_cpu_optimizer is true) or torch.optim.AdamW
// (torch_adam, or a client AdamW with zero_force_ds_cpu_optimizer false).
inline constexpr const char* kCpuAdam = "DeepSpeedCPUAdam";
inline constexpr const char* kTorchAdamW = "torch.optim.AdamW";

// The counts default to DeepSpeed's, defined once beside their reader (config::zero_keys).
struct Zero3Options {
  int64_t reduce_bucket_size = config::zero_keys::kDefaultReduceBucketSize;  // elements per gradient reduce bucket
  int64_t stage3_prefetch_bucket_size = config::zero_keys::kDefaultPrefetchBucketSize;  // elements prefetched ahead (trace-based)
  int64_t stage3_param_persistence_threshold = config::zero_keys::kDefaultParamPersistenceThreshold;  // numel <= this: never released
  int64_t stage3_max_live_parameters = config::zero_keys::kDefaultMaxLiveParameters;
  int64_t stage3_max_reuse_distance = config::zero_keys::kDefaultMaxReuseDistance;  // keep a param if reused within this many elements
  int64_t sub_group_size = config::zero_keys::kDefaultSubGroupSize;  // fp32 master / optimizer step granularity (0: one per param)
  bool overlap_comm = true;                         // stage 3 turns it on by default
  bool contiguous_gradients = true;
  std::string communication_data_type;              // "" = model dtype; bf16 | fp16 | fp32
  std::string grad_accum_dtype;                     // "" = model dtype; bf16 | fp16 | fp32
  OffloadOptimizerOptions offload_optimizer;
  OffloadParamOptions offload_param;
  std::string host_optimizer = kCpuAdam;            // under offload_optimizer: kCpuAdam | kTorchAdamW
  int64_t stage3_module_granularity_threshold = 0;  // 0: off; see zero3_granularity.hpp
  // ZeRO++ (runtime/zero/config.py; backends/zero3/zero3_zeropp.hpp has what each does here).
  int64_t zero_hpz_partition_size = 1;              // hpZ: secondary partition within groups of this size (0, 1: off)
  bool zero_quantized_weights = false;              // qwZ: int8 blockwise all-gather of parameters
  bool zero_quantized_nontrainable_weights = false; // every parameter here trains: nothing to store quantized
  bool zero_quantized_gradients = false;            // qgZ: quantized all-to-all gradient reduction (zero3_qgz.hpp)
  int64_t qgz_ranks_per_node = 0;                   // qgZ's get_accelerator().device_count(); 0: LOCAL_WORLD_SIZE
  bool hpz() const { return zero_hpz_partition_size > 1; }
  common::DeepSpeedLossScaleOptions fp16;           // the `fp16` section's loss scaling (precision fp16 only)
};

nlohmann::json to_json(const OffloadOptimizerOptions& o);
nlohmann::json to_json(const OffloadParamOptions& o);
nlohmann::json to_json(const Zero3Options& o);
// The keys as to_json writes them (a key missing: its default above), validated; throws UsageError.
Zero3Options zero3_options_from_json(const nlohmann::json& j);
// Throws UsageError for a value zero3 refuses (one line naming the key); resolution calls it once.
void validate(const Zero3Options& o);
// The options a spec carries (EngineSpec::options): the struct resolution stored, or a raw
// object parsed once by zero3_options_from_json. Every reader of a spec's options goes here.
const Zero3Options& zero3_options(const BackendOptions& options);

// What the engine resolved (Zero3Engine::resolved_options(), the report's config.backend.options):
// its options and what it worked out. to_json and zero3_resolved_from_json are the one mapping
// between the record and the report's keys (the report writes communication_data_type and
// grad_accum_dtype as the dtypes resolved, so the options' own strings are not in it); the
// projection program and crossval's rules read the record.
struct Zero3Resolved {
  Zero3Options options;
  deepspeed_family::DeepSpeedPrecisionResolved precision;  // dtypes resolved; fp16's scaler
  int64_t sub_groups = 1;                    // fp32 master / optimizer sub-groups (sub_group_size)
  int64_t persistent_params = 0, persistent_numel = 0;  // never released (persistence threshold)
  int64_t ipg_buffer_bytes = 0;              // the gradient reduce bucket
  std::string optimizer;                     // what steps the sub-groups (a description)
  int64_t hpz_group_size = 1;                // effective: min(zero_hpz_partition_size, W), 1 = off
  std::vector<int> hpz_group;                // this rank's hpZ group (hpz_group_size > 1)
  nlohmann::json module_granularity;         // stage3_module_granularity_threshold's check (null: off)
};
nlohmann::json to_json(const Zero3Resolved& r);
// A report's config.backend.options (a key it lacks: the default); -1 sub-groups when it has none.
Zero3Resolved zero3_resolved_from_json(const nlohmann::json& j);

}  // namespace zb::backends::zero3
