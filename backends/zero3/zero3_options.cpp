// zero3_options.cpp — ZeRO-3 option names and their JSON round trip (see zero3_options.hpp; the
// DeepSpeed format readers are config/deepspeed_config.cpp and config/deepspeed_zero_config.cpp,
// their use zero3_config.cpp).
#include "backends/zero3/zero3_options.hpp"

#include "backends/deepspeed_family/loss_scale_json.hpp"
#include "config/deepspeed_zero_config.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

namespace {
using json = nlohmann::json;
using config::deepspeed_values::as_count;

void check_dtype(const std::string& key, const std::string& v) {
  if (!v.empty() && v != "bf16" && v != "fp32" && v != "fp16")
    throw UsageError(key + " '" + v + "' is not supported (bf16, fp16 or fp32)");
}

// One line naming the key for what DeepSpeed could do and zerobench does not.
void check_offload(const Zero3Options& o) {
  for (const auto& [key, device] : {std::pair<const char*, std::string>{"offload_optimizer", o.offload_optimizer.device},
                                    {"offload_param", o.offload_param.device}}) {
    if (device == "nvme")
      throw UsageError(std::string("zero_optimization.") + key + ".device nvme: NVMe offload (DeepSpeed's swap_tensor/ "
                       "swapper) is not implemented in zerobench; use cpu");
    if (device != "none" && device != "cpu")
      throw UsageError(std::string("zero_optimization.") + key + ".device '" + device + "' is not none, cpu or nvme");
  }
  if (o.offload_optimizer.ratio < 0 || o.offload_optimizer.ratio > 1)
    throw UsageError("zero_optimization.offload_optimizer.ratio " + std::to_string(o.offload_optimizer.ratio) +
                     " must be in [0, 1]");
  if (o.offload_optimizer.enabled() && o.offload_optimizer.ratio < 1)
    throw UsageError("zero_optimization.offload_optimizer.ratio " + std::to_string(o.offload_optimizer.ratio) +
                     ": partial optimizer offload (a GPU AdamW for the first sub-groups) is not implemented");
  if (o.host_optimizer != kCpuAdam && o.host_optimizer != kTorchAdamW)
    throw UsageError("host_optimizer '" + o.host_optimizer + "' is not " + kCpuAdam + " or " + kTorchAdamW);
}

// ZeRO++: what zerobench does not run, one line each (zero3_zeropp.hpp).
void check_zeropp(const Zero3Options& o) {
  if (o.qgz_ranks_per_node < 0)
    throw UsageError("--zero3-ranks-per-node " + std::to_string(o.qgz_ranks_per_node) + " must be positive");
  if (o.hpz() && o.offload_param.enabled())
    throw UsageError("zero_optimization.zero_hpz_partition_size " + std::to_string(o.zero_hpz_partition_size) +
                     " with offload_param cpu: a host-resident hpZ secondary partition is not implemented");
}

}  // namespace

json to_json(const OffloadOptimizerOptions& o) {
  return {{"device", o.device},          {"pin_memory", o.pin_memory}, {"buffer_count", o.buffer_count},
          {"fast_init", o.fast_init},    {"pipeline_read", o.pipeline_read},
          {"pipeline_write", o.pipeline_write}, {"ratio", o.ratio}};
}

json to_json(const OffloadParamOptions& o) {
  return {{"device", o.device},
          {"pin_memory", o.pin_memory},
          {"buffer_count", o.buffer_count},
          {"buffer_size", o.buffer_size},
          {"max_in_cpu", o.max_in_cpu}};
}

namespace {
OffloadOptimizerOptions offload_optimizer_from_json(const json& j) {
  OffloadOptimizerOptions o;
  if (!j.is_object()) return o;
  o.device = j.value("device", o.device);
  o.pin_memory = j.value("pin_memory", o.pin_memory);
  if (j.contains("buffer_count")) o.buffer_count = as_count("offload_optimizer.buffer_count", j["buffer_count"]);
  o.fast_init = j.value("fast_init", o.fast_init);
  o.pipeline_read = j.value("pipeline_read", o.pipeline_read);
  o.pipeline_write = j.value("pipeline_write", o.pipeline_write);
  o.ratio = j.value("ratio", o.ratio);
  return o;
}

OffloadParamOptions offload_param_from_json(const json& j) {
  OffloadParamOptions o;
  if (!j.is_object()) return o;
  o.device = j.value("device", o.device);
  o.pin_memory = j.value("pin_memory", o.pin_memory);
  if (j.contains("buffer_count")) o.buffer_count = as_count("offload_param.buffer_count", j["buffer_count"]);
  if (j.contains("buffer_size")) o.buffer_size = as_count("offload_param.buffer_size", j["buffer_size"]);
  if (j.contains("max_in_cpu")) o.max_in_cpu = as_count("offload_param.max_in_cpu", j["max_in_cpu"]);
  return o;
}
}  // namespace

json to_json(const Zero3Options& o) {
  json j = {{"stage", 3},
          {"reduce_bucket_size", o.reduce_bucket_size},
          {"stage3_prefetch_bucket_size", o.stage3_prefetch_bucket_size},
          {"stage3_param_persistence_threshold", o.stage3_param_persistence_threshold},
          {"stage3_max_live_parameters", o.stage3_max_live_parameters},
          {"stage3_max_reuse_distance", o.stage3_max_reuse_distance},
          {"sub_group_size", o.sub_group_size},
          {"overlap_comm", o.overlap_comm},
          {"contiguous_gradients", o.contiguous_gradients},
          {"communication_data_type", o.communication_data_type},
          {"grad_accum_dtype", o.grad_accum_dtype},
          {"offload_optimizer", to_json(o.offload_optimizer)},
          {"offload_param", to_json(o.offload_param)},
          {"host_optimizer", o.host_optimizer},
          {"zero_hpz_partition_size", o.zero_hpz_partition_size},
          {"zero_quantized_weights", o.zero_quantized_weights},
          {"zero_quantized_nontrainable_weights", o.zero_quantized_nontrainable_weights},
          {"zero_quantized_gradients", o.zero_quantized_gradients}};
  // The fp16 section's loss scaling: only when it differs from DeepSpeed's defaults (it is read
  // only under precision fp16; a bf16/fp32 run's options stay as they were).
  if (to_json(o.fp16) != to_json(common::DeepSpeedLossScaleOptions{})) j["fp16"] = to_json(o.fp16);
  // Only when set (0, the default, is DeepSpeed's off; earlier reports' options stay as they were).
  if (o.stage3_module_granularity_threshold > 0)
    j["stage3_module_granularity_threshold"] = o.stage3_module_granularity_threshold;
  // qgZ's ranks per node: only with qgZ on (the options of other runs stay as they were).
  if (o.zero_quantized_gradients || o.qgz_ranks_per_node > 0) j["qgz_ranks_per_node"] = o.qgz_ranks_per_node;
  return j;
}

Zero3Options zero3_options_from_json(const json& j) {
  Zero3Options o;
  auto count = [&](const char* key, int64_t& field) {
    if (j.contains(key)) field = as_count(key, j[key]);
  };
  count("reduce_bucket_size", o.reduce_bucket_size);
  count("stage3_prefetch_bucket_size", o.stage3_prefetch_bucket_size);
  count("stage3_param_persistence_threshold", o.stage3_param_persistence_threshold);
  count("stage3_max_live_parameters", o.stage3_max_live_parameters);
  count("stage3_max_reuse_distance", o.stage3_max_reuse_distance);
  count("sub_group_size", o.sub_group_size);
  o.overlap_comm = j.value("overlap_comm", o.overlap_comm);
  o.contiguous_gradients = j.value("contiguous_gradients", o.contiguous_gradients);
  o.communication_data_type = j.value("communication_data_type", o.communication_data_type);
  o.grad_accum_dtype = j.value("grad_accum_dtype", o.grad_accum_dtype);
  if (j.contains("offload_optimizer")) o.offload_optimizer = offload_optimizer_from_json(j["offload_optimizer"]);
  if (j.contains("offload_param")) o.offload_param = offload_param_from_json(j["offload_param"]);
  o.host_optimizer = j.value("host_optimizer", o.host_optimizer);
  count("stage3_module_granularity_threshold", o.stage3_module_granularity_threshold);
  count("zero_hpz_partition_size", o.zero_hpz_partition_size);
  o.zero_quantized_weights = j.value("zero_quantized_weights", o.zero_quantized_weights);
  o.zero_quantized_nontrainable_weights = j.value("zero_quantized_nontrainable_weights", o.zero_quantized_nontrainable_weights);
  o.zero_quantized_gradients = j.value("zero_quantized_gradients", o.zero_quantized_gradients);
  if (j.contains("fp16")) o.fp16 = deepspeed_family::deepspeed_loss_scale_from_json(j["fp16"]);
  if (j.contains("qgz_ranks_per_node")) o.qgz_ranks_per_node = as_count("qgz_ranks_per_node", j["qgz_ranks_per_node"]);
  validate(o);
  return o;
}

void validate(const Zero3Options& o) {
  check_offload(o);
  check_zeropp(o);
  check_dtype("communication_data_type", o.communication_data_type);
  check_dtype("grad_accum_dtype", o.grad_accum_dtype);
  if (o.reduce_bucket_size <= 0) throw UsageError("reduce_bucket_size must be positive");  // Field(gt=0)
}

const Zero3Options& zero3_options(const BackendOptions& options) {
  return options.as<Zero3Options>(zero3_options_from_json);
}

json to_json(const Zero3Resolved& r) {
  auto j = to_json(r.options);
  deepspeed_family::write_precision(r.precision, r.options.fp16, j);  // dtypes; fp16 with its scaler
  j["sub_groups"] = r.sub_groups;
  j["persistent_params"] = r.persistent_params;
  j["persistent_numel"] = r.persistent_numel;
  j["ipg_buffer_bytes"] = r.ipg_buffer_bytes;
  j["reduces_every_micro_batch"] = true;
  j["optimizer"] = r.optimizer;
  if (!r.options.offload_optimizer.enabled()) j.erase("host_optimizer");
  j["hpz_group_size"] = r.hpz_group_size;
  if (r.hpz_group_size > 1) j["hpz_group"] = r.hpz_group;
  if (!r.module_granularity.is_null()) j["module_granularity"] = r.module_granularity;  // zero3_granularity.hpp
  if (!r.precision.loss_scaler) j.erase("fp16");  // no loss scaling outside fp16
  j["offload"] = {{"optimizer", r.options.offload_optimizer.enabled() ? "cpu" : "none"},
                  {"param", r.options.offload_param.enabled() ? "cpu" : "none"}};
  return j;
}

Zero3Resolved zero3_resolved_from_json(const json& j) {
  Zero3Resolved r;
  auto o = j.is_object() ? j : json::object();
  r.precision = deepspeed_family::take_precision(o);  // the dtypes resolved, not the options' bf16 | fp16 | fp32 | ""
  r.options = zero3_options_from_json(o);
  r.sub_groups = o.contains("sub_groups") && o["sub_groups"].is_number_integer() ? o["sub_groups"].get<int64_t>() : -1;
  r.persistent_params = o.value("persistent_params", r.persistent_params);
  r.persistent_numel = o.value("persistent_numel", r.persistent_numel);
  r.ipg_buffer_bytes = o.value("ipg_buffer_bytes", r.ipg_buffer_bytes);
  r.optimizer = o.value("optimizer", r.optimizer);
  r.hpz_group_size = o.value("hpz_group_size", r.hpz_group_size);
  if (o.contains("hpz_group") && o["hpz_group"].is_array()) r.hpz_group = o["hpz_group"].get<std::vector<int>>();
  if (o.contains("module_granularity")) r.module_granularity = o["module_granularity"];
  return r;
}

}  // namespace zb::backends::zero3
