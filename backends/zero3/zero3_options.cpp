// zero3_options.cpp — DeepSpeed option names, JSON round trip, ds_config reader.
#include "backends/zero3/zero3_options.hpp"

#include <fstream>

#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

namespace {
using json = nlohmann::json;

bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

int64_t as_count(const std::string& key, const json& v) {
  if (!v.is_number()) throw UsageError(key + " " + v.dump() + " is not a number");
  const double d = v.get<double>();  // DeepSpeed configs write 5e8
  if (d < 0) throw UsageError(key + " " + v.dump() + " must be >= 0");
  return int64_t(d);
}

void check_dtype(const std::string& key, const std::string& v) {
  if (!v.empty() && v != "bf16" && v != "fp32")
    throw UsageError(key + " '" + v + "' is not supported (bf16 or fp32)");
}

std::string dtype_name(const std::string& key, const json& v) {
  const auto s = v.get<std::string>();
  if (s == "bfp16" || s == "bf16" || s == "bfloat16") return "bf16";
  if (s == "fp32" || s == "float32" || s == "float") return "fp32";
  throw UsageError(key + " '" + s + "' is not supported (bf16 or fp32)");
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
  if (o.reduce_bucket_size <= 0) throw UsageError("reduce_bucket_size must be positive");
  if (o.sub_group_size <= 0) throw UsageError("sub_group_size must be positive");
  return o;
}

DeepSpeedConfig read_deepspeed_config(const std::string& path, int64_t hidden) {
  std::ifstream in(path);
  if (!in) throw UsageError("--deepspeed-config " + path + ": cannot read");
  json root;
  try {
    in >> root;
  } catch (const std::exception& e) {
    throw UsageError("--deepspeed-config " + path + ": not valid JSON: " + e.what());
  }
  DeepSpeedConfig c;
  const auto where = "--deepspeed-config " + path + ": ";
  try {
    if (root.contains("train_micro_batch_size_per_gpu") && !is_auto(root["train_micro_batch_size_per_gpu"]))
      c.micro_batch = as_count("train_micro_batch_size_per_gpu", root["train_micro_batch_size_per_gpu"]);
    if (root.contains("gradient_accumulation_steps") && !is_auto(root["gradient_accumulation_steps"]))
      c.grad_accum = as_count("gradient_accumulation_steps", root["gradient_accumulation_steps"]);
    if (root.contains("gradient_clipping") && !is_auto(root["gradient_clipping"])) {
      if (!root["gradient_clipping"].is_number()) throw UsageError("gradient_clipping is not a number");
      c.grad_clip = root["gradient_clipping"].get<double>();
    }
    if (root.contains("bf16")) {
      const auto& b = root["bf16"];
      const bool enabled = b.contains("enabled") && (is_auto(b["enabled"]) || b["enabled"].get<bool>());
      c.precision = enabled ? "bf16" : "fp32";
    }
    if (root.contains("fp16")) {
      const auto& f = root["fp16"];
      if (f.contains("enabled") && !is_auto(f["enabled"]) && f["enabled"].get<bool>())
        c.warnings.push_back("fp16 is not supported yet: ignored (use bf16)");
    }
    if (root.contains("communication_data_type") && !root["communication_data_type"].is_null())
      c.zero.communication_data_type = dtype_name("communication_data_type", root["communication_data_type"]);
    if (root.contains("data_types") && root["data_types"].contains("grad_accum_dtype") &&
        !root["data_types"]["grad_accum_dtype"].is_null())
      c.zero.grad_accum_dtype = dtype_name("data_types.grad_accum_dtype", root["data_types"]["grad_accum_dtype"]);
    if (!root.contains("zero_optimization")) throw UsageError("zero_optimization is missing (stage 3 expected)");
    const auto& z = root["zero_optimization"];
    const int64_t stage = z.contains("stage") ? as_count("zero_optimization.stage", z["stage"]) : 0;
    if (stage != 3)
      throw UsageError("zero_optimization.stage " + std::to_string(stage) +
                       " is not supported: zerobench's zero3 backend is ZeRO stage 3 (stages 1 and 2 may follow)");
    auto& o = c.zero;
    for (const auto& [key, v] : z.items()) {
      const auto name = "zero_optimization." + key;
      if (key == "stage") continue;
      if (key == "reduce_bucket_size") o.reduce_bucket_size = is_auto(v) ? hidden * hidden : as_count(name, v);
      else if (key == "stage3_prefetch_bucket_size")
        o.stage3_prefetch_bucket_size = is_auto(v) ? int64_t(0.9 * double(hidden * hidden)) : as_count(name, v);
      else if (key == "stage3_param_persistence_threshold")
        o.stage3_param_persistence_threshold = is_auto(v) ? 10 * hidden : as_count(name, v);
      else if (key == "stage3_max_live_parameters") o.stage3_max_live_parameters = as_count(name, v);
      else if (key == "stage3_max_reuse_distance") o.stage3_max_reuse_distance = as_count(name, v);
      else if (key == "sub_group_size") o.sub_group_size = as_count(name, v);
      else if (key == "overlap_comm") o.overlap_comm = v.get<bool>();
      else if (key == "contiguous_gradients") o.contiguous_gradients = v.get<bool>();
      else if (key == "offload_param" || key == "offload_optimizer") {
        const bool off = v.is_object() && v.value("device", std::string("none")) != "none";
        if (off) c.warnings.push_back(name + " is not supported yet: ignored (no offload)");
      } else if (key == "stage3_gather_16bit_weights_on_model_save" || key == "stage3_gather_fp16_weights_on_model_save")
        c.warnings.push_back(name + " is recorded but not used: zerobench saves no checkpoints");
      else
        c.warnings.push_back("unknown key " + name + " ignored");
    }
    zero3_options_from_json(to_json(o));  // validates ranges and dtypes
  } catch (const json::exception& e) {
    throw UsageError(where + e.what());
  } catch (const UsageError& e) {
    throw UsageError(where + e.what());
  }
  return c;
}

}  // namespace zb::backends::zero3
