// zero3_options.cpp — ZeRO-3 option names and their JSON round trip (see zero3_options.hpp; the
// DeepSpeed format readers are config/deepspeed_config.cpp and config/deepspeed_zero_config.cpp,
// their use zero3_config.cpp).
#include "backends/zero3/zero3_options.hpp"

#include "config/deepspeed_zero_config.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

namespace {
using json = nlohmann::json;
using config::deepspeed_values::as_count;

void check_dtype(const std::string& key, const std::string& v) {
  if (!v.empty() && v != "bf16" && v != "fp32") throw UsageError(key + " '" + v + "' is not supported (bf16 or fp32)");
}

}  // namespace

json to_json(const Zero3Options& o) {
  return {{"stage", 3},
          {"reduce_bucket_size", o.reduce_bucket_size},
          {"stage3_prefetch_bucket_size", o.stage3_prefetch_bucket_size},
          {"stage3_param_persistence_threshold", o.stage3_param_persistence_threshold},
          {"stage3_max_live_parameters", o.stage3_max_live_parameters},
          {"stage3_max_reuse_distance", o.stage3_max_reuse_distance},
          {"sub_group_size", o.sub_group_size},
          {"overlap_comm", o.overlap_comm},
          {"contiguous_gradients", o.contiguous_gradients},
          {"communication_data_type", o.communication_data_type},
          {"grad_accum_dtype", o.grad_accum_dtype}};
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
  check_dtype("communication_data_type", o.communication_data_type);
  check_dtype("grad_accum_dtype", o.grad_accum_dtype);
  if (o.reduce_bucket_size <= 0) throw UsageError("reduce_bucket_size must be positive");  // Field(gt=0)
  return o;
}

}  // namespace zb::backends::zero3
