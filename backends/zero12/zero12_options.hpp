// zero12_options.hpp — ZeRO stage 1/2 options, named and defaulted as DeepSpeed 0.19.8's
// runtime/zero/config.py (DeepSpeedZeroConfig) names them for stages 1 and 2, and their JSON
// round trip. Owns: defaults and validation (what zerobench runs, what it refuses with one line
// naming the key). Must not: run anything or read a config file's format (config/ does;
// zero12_config.cpp turns a DeepSpeed config into these options).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "backends/backend_options.hpp"
#include "backends/common/loss_scaler.hpp"
#include "backends/deepspeed_family/deepspeed_resolved.hpp"
#include "backends/precision_plan.hpp"
#include "config/deepspeed_zero_config.hpp"

namespace zb::backends::zero12 {

struct Zero12Options {
  int stage = 2;                                 // 1: optimizer states partitioned; 2: gradients too
  int64_t reduce_bucket_size = config::zero_keys::kDefaultReduceBucketSize;  // IPG bucket (elements)
  int64_t allgather_bucket_size = config::zero_keys::kDefaultAllgatherBucketSize;  // read only without all_gather_into_tensor (see engine)
  bool overlap_comm = false;                     // config.py overlap_comm_valid: False below stage 3
  bool contiguous_gradients = true;
  bool reduce_scatter = true;                    // average_tensor's partition-wise path (vs one all-reduce)
  bool round_robin_gradients = false;
  bool allgather_partitions = true;              // not passed to DeepSpeedZeroOptimizer in 0.19.8: no effect
  bool use_multi_rank_bucket_allreduce = true;
  std::string communication_data_type;           // "" = model dtype; bf16 | fp16 | fp32
  std::string grad_accum_dtype;                  // "" = model dtype; bf16 | fp16 | fp32
  common::DeepSpeedLossScaleOptions fp16;        // the `fp16` section's loss scaling (precision fp16 only)
  // zero_optimization.offload_optimizer (runtime/zero/offload_config.py): device none | cpu
  // (zero12_offload.cpp; nvme and ratio < 1 refused), pin_memory, and the optimizer that steps
  // the host's fp32 partition (kCpuAdam | kTorchAdamW, chosen as zero3_config.cpp chooses it).
  std::string offload_optimizer = "none";
  bool offload_pin_memory = true;
  std::string host_optimizer = "DeepSpeedCPUAdam";
  bool offload() const { return offload_optimizer == "cpu"; }
};

// The host optimizer under offload_optimizer (the same names as zero3_options.hpp).
inline constexpr const char* kCpuAdam = "DeepSpeedCPUAdam";
inline constexpr const char* kTorchAdamW = "torch.optim.AdamW";

nlohmann::json to_json(const Zero12Options& o);
// Keys as in to_json; throws UsageError naming the key for a bad or refused value.
Zero12Options zero12_options_from_json(const nlohmann::json& j, int stage);  // validated; throws UsageError
// `o` completed as DeepSpeed completes it (contiguous_gradients under offload) and checked;
// throws UsageError naming the refused key. Resolution calls it once.
Zero12Options validated(Zero12Options o);
// The options a spec of stage `stage` carries (EngineSpec::options): the struct resolution
// stored, or a raw object parsed once by zero12_options_from_json. Every reader goes here.
const Zero12Options& zero12_options(const BackendOptions& options, int stage);
// The refusals that depend on the precision (model dtype), one line naming the key.
void check_precision(const Zero12Options& o, const std::string& precision);

// What the engine resolved (Zero12Engine::resolved_options(), the report's
// config.backend.options): its options and what it worked out. to_json and
// zero12_resolved_from_json are the one mapping between the record and the report's keys (the
// report writes communication_data_type and grad_accum_dtype as the dtypes resolved, so the
// options' own strings are not in it); the projection program reads the record.
struct Zero12Resolved {
  Zero12Options options;
  deepspeed_family::DeepSpeedPrecisionResolved precision;  // dtypes resolved; fp16's scaler
  int64_t flat_numel = 0, flat_padded = 0, partition_size = 0;  // the flat buffer and one partition
  int ipg_buffers = 1;
  bool check_grad_overflow = false;
  std::string optimizer;            // what steps the partition (a description)
};
nlohmann::json to_json(const Zero12Resolved& r);
Zero12Resolved zero12_resolved_from_json(const nlohmann::json& j, int stage);

}  // namespace zb::backends::zero12
