// deepspeed_zero_config.hpp — a DeepSpeed config's zero_optimization section read as DeepSpeed
// 0.19.8's runtime/zero/config.py DeepSpeedZeroConfig reads it (pydantic aliases, lax ints and
// bools, "auto" filled as transformers' trainer_config_finalize fills it), plus the value
// readers the rest of the DeepSpeed format shares.
// Owns: the typed section (DeepSpeedZeroConfig), its keys and refusals. Must not: name a backend
// or decide which stage runs (StageGate: the backend that claims the file decides).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "config/config_notes.hpp"

namespace zb::config {

// zero_optimization.offload_optimizer / offload_param as runtime/zero/offload_config.py's
// DeepSpeedZeroOffloadOptimizerConfig / DeepSpeedZeroOffloadParamConfig name and default them
// (device "none" also when the section is absent or null). The backend decides what it runs.
struct DeepSpeedOffloadOptimizer {
  std::string device = "none";  // none | cpu | nvme
  bool pin_memory = true;
  int64_t buffer_count = 4;
  bool fast_init = false, pipeline_read = false, pipeline_write = false;
  double ratio = 1.0;
};
struct DeepSpeedOffloadParam {
  std::string device = "none";  // none | cpu | nvme
  bool pin_memory = true;
  int64_t buffer_count = 5, buffer_size = 100000000, max_in_cpu = 1000000000;
};

// zero_optimization's counts that ZeRO-3 reads: the key as files spell it (the alias of
// DeepSpeedZeroConfig's field) and DeepSpeed's default, each defined once, here beside their
// reader (read_deepspeed_zero). The zero3 backend's options default to them
// (backends/zero3/zero3_options.hpp); tools that write or map DeepSpeed files name the keys
// through them (bench/translate).
namespace zero_keys {
inline constexpr const char* kPrefetchBucketSize = "stage3_prefetch_bucket_size";
inline constexpr int64_t kDefaultReduceBucketSize = 500000000;
inline constexpr int64_t kDefaultPrefetchBucketSize = 50000000;
inline constexpr int64_t kDefaultParamPersistenceThreshold = 100000;
inline constexpr int64_t kDefaultMaxLiveParameters = 1000000000;
inline constexpr int64_t kDefaultMaxReuseDistance = 1000000000;
inline constexpr int64_t kDefaultSubGroupSize = 1000000000;
inline constexpr int64_t kDefaultAllgatherBucketSize = 500000000;  // stages 1 and 2
}  // namespace zero_keys

// zero_optimization's fields as DeepSpeedZeroConfig names and defaults them (stage-3 names).
struct DeepSpeedZeroConfig {
  int64_t stage = 0;
  int64_t reduce_bucket_size = zero_keys::kDefaultReduceBucketSize;  // elements per gradient reduce bucket
  int64_t stage3_prefetch_bucket_size = zero_keys::kDefaultPrefetchBucketSize;  // elements prefetched ahead
  int64_t stage3_param_persistence_threshold = zero_keys::kDefaultParamPersistenceThreshold;  // numel <= this: never released
  int64_t stage3_max_live_parameters = zero_keys::kDefaultMaxLiveParameters;
  int64_t stage3_max_reuse_distance = zero_keys::kDefaultMaxReuseDistance;
  int64_t sub_group_size = zero_keys::kDefaultSubGroupSize;  // 0: one sub-group per parameter
  bool overlap_comm = true;
  bool contiguous_gradients = true;
  DeepSpeedOffloadOptimizer offload_optimizer;  // also from the deprecated cpu_offload
  DeepSpeedOffloadParam offload_param;          // also from the deprecated cpu_offload_param
  // ZeRO++ (the backend decides what it runs: zero3 runs hpZ, qwZ and qgZ).
  int64_t zero_hpz_partition_size = 1;  // Field(1, ge=0); > 1: hpZ
  bool zero_quantized_weights = false, zero_quantized_nontrainable_weights = false, zero_quantized_gradients = false;
  // stage3_module_granularity_threshold (0: off); the zero3 engine, which knows the model, refuses
  // it when some module of the model is at or below it (zero3_granularity.hpp).
  int64_t module_granularity_threshold = 0;
  // Stages 1 and 2 only (read and honoured when the stage is 1 or 2; ignored with a reason for
  // stage 3). overlap_comm above defaults to false for stages 1/2 (config.py overlap_comm_valid).
  bool reduce_scatter = true;
  int64_t allgather_bucket_size = zero_keys::kDefaultAllgatherBucketSize;
  bool allgather_partitions = true;
  bool use_multi_rank_bucket_allreduce = true;
  bool round_robin_gradients = false;
};

// The ZeRO stage a file asks for, for the backend that claims it to accept or refuse.
struct DeepSpeedStage {
  enum class Form {
    kMissing,  // no zero_optimization section: DeepSpeed runs stage 0
    kBoolean,  // the deprecated boolean form: true = stage 1, false = stage 0
    kNumber,   // a stage value
  };
  Form form = Form::kNumber;
  std::string key;         // "zero_optimization.stage", "deepspeed_config.zero_stage", "zero_optimization"
  std::string shown;       // the value as the message shows it ("2", "(absent: 0)", "true")
  std::string stage_text;  // the stage as text ("2")
  int64_t stage = -1;      // the stage; -1 when not a number
};
// Throws UsageError (one line naming key and value) for a stage the backend does not run.
using StageGate = std::function<void(const DeepSpeedStage&)>;

// Reads zero_optimization of `root` into `out` (stage first, through `accept_stage`).
void read_deepspeed_zero(const nlohmann::json& root, int64_t hidden, const StageGate& accept_stage,
                         DeepSpeedZeroConfig& out, ConfigNotes& notes);

// The ZeRO stage a DeepSpeed config asks for, leniently (for choosing a backend), as DeepSpeed
// reads it: 0 when the section or its stage is missing or "auto", 0 / 1 for the deprecated
// boolean form; -1 when it is not a number.
int deepspeed_zero_stage(const nlohmann::json& root);

// DeepSpeedZeroConfig spells some settings two ways (pydantic populate_by_name: the alias, e.g.
// stage3_max_live_parameters, and the field name, max_live_parameters; runtime/zero/config.py).
// The alias is the canonical spelling (DeepSpeed's documentation, HF's "auto" fill): the alias of
// `key` when `key` is a field name that has one, else `key` itself.
std::string canonical_zero_key(const std::string& key);

// DeepSpeed's value readers (pydantic's lax forms), shared by the DeepSpeed format's readers.
namespace deepspeed_values {
std::string text(const nlohmann::json& v);
std::string lower(std::string s);
std::string fmt(double v);
bool is_auto(const nlohmann::json& v);
// An integral number (DeepSpeed files write 5e8) or a string of digits; `min` is the field's ge= bound.
int64_t as_count(const std::string& key, const nlohmann::json& v, int64_t min = 0);
bool as_bool(const std::string& key, const nlohmann::json& v);
double as_number(const std::string& key, const nlohmann::json& v);
}  // namespace deepspeed_values

}  // namespace zb::config
