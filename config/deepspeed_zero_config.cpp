// deepspeed_zero_config.cpp — zero_optimization as DeepSpeedZeroConfig reads it, and DeepSpeed's
// value readers (see deepspeed_zero_config.hpp; docs/configs.md has the key-by-key table).
#include "config/deepspeed_zero_config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "runtime/errors.hpp"

namespace zb::config {

namespace deepspeed_values {
using json = nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "null";
  return v.dump();
}

std::string fmt(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

// pydantic's lax int (DeepSpeedConfigModel fields): an integral number (DeepSpeed files write
// 5e8) or a string of digits; `min` is the field's ge= bound.
int64_t as_count(const std::string& key, const json& v, int64_t min) {
  double d = 0;
  if (v.is_boolean()) {  // pydantic's lax int takes a bool as 0 / 1
    d = v.get<bool>() ? 1 : 0;
  } else if (v.is_number()) {
    d = v.get<double>();
  } else if (v.is_string()) {
    const auto s = v.get<std::string>();
    size_t pos = 0;
    try {
      d = double(std::stoll(s, &pos));
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos == 0 || pos != s.size()) throw UsageError(key + " \"" + s + "\" is not an integer");
  } else {
    throw UsageError(key + " " + v.dump() + " is not an integer");
  }
  if (!std::isfinite(d) || d != std::trunc(d)) throw UsageError(key + " " + text(v) + " is not an integer");
  if (d < double(min)) throw UsageError(key + " " + text(v) + " must be >= " + std::to_string(min));
  if (d > 9.2e18) throw UsageError(key + " " + text(v) + " is too large for zerobench (int64 counts)");
  return int64_t(d);
}

// pydantic's lax bool.
bool as_bool(const std::string& key, const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number() && (v.get<double>() == 0 || v.get<double>() == 1)) return v.get<double>() == 1;  // 0, 1, 0.0, 1.0
  if (v.is_string()) {
    const auto s = lower(v.get<std::string>());
    if (s == "true" || s == "t" || s == "yes" || s == "y" || s == "on" || s == "1") return true;
    if (s == "false" || s == "f" || s == "no" || s == "n" || s == "off" || s == "0") return false;
  }
  throw UsageError(key + " " + text(v) + " is not true or false");
}

double as_number(const std::string& key, const json& v) {
  double d = 0;
  if (v.is_number()) {
    d = v.get<double>();
  } else if (v.is_string()) {
    try {
      size_t pos = 0;
      d = std::stod(v.get<std::string>(), &pos);
      if (pos != v.get<std::string>().size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw UsageError(key + " \"" + v.get<std::string>() + "\" is not a number");
    }
  } else {
    throw UsageError(key + " " + v.dump() + " is not a number");
  }
  if (!std::isfinite(d)) throw UsageError(key + " " + text(v) + " is not a finite number");
  return d;
}

}  // namespace deepspeed_values

namespace {
using json = nlohmann::json;
using namespace deepspeed_values;

const std::set<std::string> kRemovedZero = {"mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param"};

// DeepSpeedZeroConfig's alias= names: file spelling -> pydantic field name (populate_by_name
// accepts both).
const std::map<std::string, std::string> kZeroAliases = {
    {zero_keys::kPrefetchBucketSize, "prefetch_bucket_size"},
    {"stage3_param_persistence_threshold", "param_persistence_threshold"},
    {"stage3_model_persistence_threshold", "model_persistence_threshold"},
    {"stage3_max_live_parameters", "max_live_parameters"},
    {"stage3_max_reuse_distance", "max_reuse_distance"},
    {"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save"},
    {"stage3_module_granularity_threshold", "module_granularity_threshold"},
    {"stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params"},
    {"stage3_allgather_sequential", "allgather_sequential"},
};

// Keys that matter only to ZeRO stages 0-2, offload, checkpoints or logging: what they do and
// why a stage-3 benchmark does not change with them (runtime/zero/config.py docstrings).
const std::map<std::string, std::string> kZeroIgnored = {
    {"allgather_partitions", "ZeRO 1/2 parameter gather after the step (stage 3 gathers per module)"},
    {"allgather_bucket_size", "ZeRO 1/2 all-gather bucket (stage 3 uses stage3_prefetch_bucket_size)"},
    {"use_multi_rank_bucket_allreduce", "ZeRO 1/2 bucketed all-reduce"},
    {"load_from_fp32_weights", "checkpoint loading; zerobench loads no checkpoint"},
    {"elastic_checkpoint", "checkpoint format; zerobench writes no checkpoint"},
    {"gather_16bit_weights_on_model_save", "checkpoint saving; zerobench writes no checkpoint"},
    {"stage3_gather_fp16_weights_on_model_save", "checkpoint saving (deprecated name); zerobench writes no checkpoint"},
    {"ignore_unused_parameters", "ZeRO 2 only; every parameter of zerobench's model is used"},
    {"legacy_stage1", "ZeRO 1 only"},
    {"round_robin_gradients", "ZeRO 1/2 CPU-offload gradient copy"},
    {"parameter_alignment", "ZeRO 1/2 flat-buffer padding"},
    {"cpu_offload_use_pin_memory", "deprecated; DeepSpeed warns and sets nothing with it (set_new_param=False): "
                                   "use offload_optimizer.pin_memory / offload_param.pin_memory"},
    {"memory_efficient_linear", "DeepSpeed's linear autograd function saves the same tensors as at::linear (input "
                                "and weight)"},
    {"override_module_apply", "wraps nn.Module.apply at model construction"},
    {"log_trace_cache_warnings", "logging"},
    {"enable_sanity_checks", "debug assertions"},
    {"pipeline_loading_checkpoint", "checkpoint loading under pipeline parallelism"},
    {"save_muon_momentum_buffer_in_memory", "Muon optimizer with NVMe offload only"},
    {"compute_grad_norm", "ZeRO 1/2 switch; stage 3 always computes the global norm"},
};


// An offload section's device as OffloadDeviceEnum reads it ("auto" dropped: the default none).
std::string offload_device(const std::string& key, const json& v) {
  if (!v.contains("device") || v["device"].is_null() || is_auto(v["device"])) return "none";
  const auto d = lower(text(v["device"]));
  if (d != "none" && d != "cpu" && d != "nvme")
    throw UsageError(key + ".device '" + text(v["device"]) + "' is not none, cpu or nvme (DeepSpeed's OffloadDeviceEnum)");
  return d;
}

// offload_optimizer (DeepSpeedZeroOffloadOptimizerConfig, extra keys forbidden; "auto" dropped).
void read_offload_optimizer(const std::string& key, const json& v, DeepSpeedOffloadOptimizer& o, ConfigNotes& notes) {
  o = {};
  if (v.is_null()) {
    notes.apply(key, "null", "no optimizer offload");
    return;
  }
  if (!v.is_object()) throw UsageError(key + " " + v.dump() + " is not a section");
  o.device = offload_device(key, v);
  for (const auto& [k, x] : v.items()) {
    const std::string sub = key + "." + k;
    if (k == "device" || is_auto(x)) continue;
    if (k == "pin_memory") o.pin_memory = as_bool(sub, x);
    else if (k == "buffer_count") o.buffer_count = as_count(sub, x);
    else if (k == "fast_init") o.fast_init = as_bool(sub, x);
    else if (k == "pipeline_read") o.pipeline_read = as_bool(sub, x);
    else if (k == "pipeline_write") o.pipeline_write = as_bool(sub, x);
    else if (k == "ratio") o.ratio = as_number(sub, x);
    else if (k == "nvme_path") notes.ignore(sub, text(x), "the NVMe swap folder; read only with device nvme");
    else if (k == "super_offload") {
      if (as_bool(sub, x)) throw UsageError(sub + " true: SuperOffload (Superchip CPU Adam) is not implemented");
    } else if (k == "cpuadam_cores_perc") {
      notes.ignore(sub, text(x), "CPU cores for SuperOffload's CPU Adam; super_offload is off");
    } else {
      throw UsageError(sub + ": not a DeepSpeed offload_optimizer setting (extra keys are forbidden)");
    }
  }
  if (o.ratio < 0 || o.ratio > 1) throw UsageError(key + ".ratio " + fmt(o.ratio) + " must be in [0, 1]");
  if (o.device == "cpu" && o.ratio < 1)
    throw UsageError(key + ".ratio " + fmt(o.ratio) + ": partial optimizer offload is not implemented in zerobench");
  if (o.device == "nvme")
    throw UsageError(key + ".device nvme: NVMe offload (DeepSpeed's swap_tensor/ swapper) is not implemented in "
                     "zerobench; use cpu");
  notes.apply(key, v.dump(), o.device == "none" ? "device none: no optimizer offload"
                                                : "fp32 master, gradients and optimizer states on the host (pin_memory " +
                                                      std::string(o.pin_memory ? "true" : "false") + ")");
  for (const char* nvme_only : {"buffer_count", "fast_init", "pipeline_read", "pipeline_write"})
    if (v.contains(nvme_only)) notes.ignore(key + "." + nvme_only, text(v[nvme_only]), "read by the NVMe swapper only");
}

// offload_param (DeepSpeedZeroOffloadParamConfig).
void read_offload_param(const std::string& key, const json& v, DeepSpeedOffloadParam& o, ConfigNotes& notes) {
  o = {};
  if (v.is_null()) {
    notes.apply(key, "null", "no parameter offload");
    return;
  }
  if (!v.is_object()) throw UsageError(key + " " + v.dump() + " is not a section");
  o.device = offload_device(key, v);
  for (const auto& [k, x] : v.items()) {
    const std::string sub = key + "." + k;
    if (k == "device" || is_auto(x)) continue;
    if (k == "pin_memory") o.pin_memory = as_bool(sub, x);
    else if (k == "buffer_count") o.buffer_count = as_count(sub, x);
    else if (k == "buffer_size") o.buffer_size = as_count(sub, x);
    else if (k == "max_in_cpu") o.max_in_cpu = as_count(sub, x);
    else if (k == "nvme_path") notes.ignore(sub, text(x), "the NVMe swap folder; read only with device nvme");
    else throw UsageError(sub + ": not a DeepSpeed offload_param setting (extra keys are forbidden)");
  }
  if (o.device == "nvme")
    throw UsageError(key + ".device nvme: NVMe offload (DeepSpeed's swap_tensor/ swapper) is not implemented in "
                     "zerobench; use cpu");
  notes.apply(key, v.dump(), o.device == "none" ? "device none: no parameter offload"
                                                : "parameter partitions on the host, copied to the device before each "
                                                  "all-gather");
  for (const char* nvme_only : {"buffer_count", "buffer_size", "max_in_cpu"})
    if (v.contains(nvme_only))
      notes.ignore(key + "." + nvme_only, text(v[nvme_only]),
                   "read by DeepSpeed only with device nvme (swapper buffers; the host buffer's cap)");
}

}  // namespace

std::string canonical_zero_key(const std::string& key) {
  for (const auto& [alias, field] : kZeroAliases)
    if (field == key) return alias;
  return key;
}

// The stage-1/2 keys (runtime/zero/config.py) DeepSpeedZeroOptimizer reads
// (engine.py _configure_zero_optimizer), honoured when the file's stage is 1 or 2; false when
// `field` is not one of them (the stage-3 reading then applies). "auto" is dropped: the default.
static bool read_stage12_key(const std::string& field, const std::string& key, const json& v, bool dropped_auto,
                      DeepSpeedZeroConfig& o, ConfigNotes& notes) {
  auto flag = [&](bool& out) {
    if (!dropped_auto) out = as_bool(key, v);
    notes.apply(key, text(v), field + " " + (out ? "true" : "false"));
  };
  if (field == "overlap_comm") {
    flag(o.overlap_comm);
  } else if (field == "reduce_scatter") {
    flag(o.reduce_scatter);
  } else if (field == "allgather_bucket_size") {
    if (!dropped_auto) o.allgather_bucket_size = as_count(key, v, 0);
    notes.apply(key, text(v), "allgather_bucket_size " + std::to_string(o.allgather_bucket_size));
  } else if (field == "allgather_partitions") {
    if (!dropped_auto) o.allgather_partitions = as_bool(key, v);
    notes.ignore(key, text(v), "DeepSpeed 0.19.8 reads it (engine.zero_allgather_partitions) but never passes it to "
                               "DeepSpeedZeroOptimizer: the partitions are always all-gathered after the step");
  } else if (field == "use_multi_rank_bucket_allreduce") {
    flag(o.use_multi_rank_bucket_allreduce);
  } else if (field == "round_robin_gradients") {
    flag(o.round_robin_gradients);
  } else if (field == "legacy_stage1") {
    if (!dropped_auto && as_bool(key, v)) throw UsageError(key + " true: the legacy ZeRO-1 optimizer is not implemented");
    notes.ignore(key, text(v), "off");
  } else if (field == "parameter_alignment") {
    if (!dropped_auto && as_bool(key, v))
      throw UsageError(key + " true: per-parameter alignment of the flat buffer is not implemented");
    notes.ignore(key, text(v), "off: no per-parameter padding in the flat buffer");
  } else if (field == "compute_grad_norm") {
    if (!dropped_auto && !as_bool(key, v))
      throw UsageError(key + " false: skipping the gradient norm is not implemented (zerobench reports it)");
    notes.ignore(key, text(v), "true: the norm is computed");
  } else {
    return false;
  }
  return true;
}

// The stage 1-3 settings DeepSpeed still validates (DeepSpeedZeroConfig) but does not read at
// stage 0: true (after checking the value) when `field` is one of them.
static bool stage0_unread(const std::string& field, const std::string& key, const json& v, bool is_auto_value) {
  static const std::set<std::string> counts = {
      "reduce_bucket_size", "prefetch_bucket_size", "param_persistence_threshold", "max_live_parameters",
      "max_reuse_distance", "sub_group_size", "allgather_bucket_size", "zero_hpz_partition_size",
      "module_granularity_threshold", "model_persistence_threshold"};
  static const std::set<std::string> flags = {
      "overlap_comm", "contiguous_gradients", "reduce_scatter", "allgather_partitions",
      "use_multi_rank_bucket_allreduce", "round_robin_gradients", "zero_quantized_weights",
      "zero_quantized_gradients", "zero_quantized_nontrainable_weights", "use_all_reduce_for_fetch_params",
      "allgather_sequential", "legacy_stage1", "parameter_alignment"};
  if (counts.count(field)) {
    if (!is_auto_value) as_count(key, v, 0);
    return true;
  }
  if (flags.count(field)) {
    if (!is_auto_value) as_bool(key, v);
    return true;
  }
  return false;
}

// As DeepSpeed reads the stage: 0 when the section or its stage is missing or the stage is "auto"
// (dropped: the default), 0 / 1 for the deprecated boolean form; -1 only when it is not a number.
int deepspeed_zero_stage(const json& root) {
  if (!root.is_object()) return -1;
  if (!root.contains("zero_optimization")) return 0;  // DeepSpeedZeroConfig's default stage
  const auto& z = root["zero_optimization"];
  if (z.is_boolean()) return z.get<bool>() ? 1 : 0;  // the deprecated boolean form
  if (!z.is_object()) return -1;
  if (!z.contains("stage") || is_auto(z["stage"])) return 0;  // absent, or "auto" dropped: the default 0
  try {
    return int(as_count("zero_optimization.stage", z["stage"]));
  } catch (const std::exception&) {
    return -1;
  }
}

void read_deepspeed_zero(const json& root, int64_t hidden, const StageGate& accept_stage, DeepSpeedZeroConfig& o,
                         ConfigNotes& notes) {
  if (!root.contains("zero_optimization")) {
    accept_stage({DeepSpeedStage::Form::kMissing, "zero_optimization", "", "0", 0});
    return;  // stage 0: no section to read
  }
  const auto& z = root["zero_optimization"];
  if (z.is_boolean()) {
    const int64_t stage = z.get<bool>() ? 1 : 0;
    accept_stage({DeepSpeedStage::Form::kBoolean, "zero_optimization", z.dump(), std::to_string(stage), stage});
    o.stage = stage;
    return;  // the deprecated boolean form has no keys to read
  }
  if (!z.is_object()) throw UsageError("zero_optimization " + z.dump() + " is not a section");
  for (const auto& [k, v] : z.items())
    if (kRemovedZero.count(k))
      throw UsageError("zero_optimization." + k + ": removed from DeepSpeed 0.19.8, which refuses the file");
  // stage: "auto" is dropped by DeepSpeedConfigModel (default 0).
  const int64_t stage = z.contains("stage") && !is_auto(z["stage"]) ? as_count("zero_optimization.stage", z["stage"]) : 0;
  const std::string shown = z.contains("stage") ? text(z["stage"]) : std::string("(absent: 0)");
  accept_stage({DeepSpeedStage::Form::kNumber, "zero_optimization.stage", shown, std::to_string(stage), stage});
  o.stage = stage;
  if (stage == 1 || stage == 2) o.overlap_comm = false;  // config.py overlap_comm_valid: None -> stage == 3
  notes.apply("zero_optimization.stage", z.contains("stage") ? shown : "(absent)", "ZeRO stage " + std::to_string(stage));
  const int64_t H = hidden;
  std::map<std::string, std::string> seen;  // pydantic field -> spelling used
  for (const auto& [spelled, v] : z.items()) {
    const std::string key = "zero_optimization." + spelled;
    if (spelled == "stage") continue;
    const auto alias = kZeroAliases.find(spelled);
    const std::string field = alias != kZeroAliases.end() ? alias->second : spelled;
    if (seen.count(field))
      throw UsageError(key + " and zero_optimization." + seen[field] + " are the same DeepSpeed setting given twice");
    seen[field] = spelled;
    // HF fills "auto" only for these three spellings (trainer_config_finalize, hidden-size based);
    // any other "auto" is dropped by DeepSpeedConfigModel(strict=False): the default applies.
    const bool hf_auto = is_auto(v) && (spelled == "reduce_bucket_size" || spelled == zero_keys::kPrefetchBucketSize ||
                                        spelled == "stage3_param_persistence_threshold");
    const bool dropped_auto = is_auto(v) && !hf_auto;
    auto count = [&](int64_t& out, int64_t auto_value, int64_t min) {
      if (hf_auto) out = auto_value;
      else if (!dropped_auto) out = as_count(key, v, min);
      return out;
    };
    auto note_default = [&](const std::string& what) {
      return dropped_auto ? what + " (DeepSpeed drops \"auto\" here: its default)" : what;
    };
    if (o.stage == 0 && stage0_unread(field, key, v, dropped_auto || hf_auto)) {
      notes.ignore(key, text(v), "ZeRO stage 0 builds no ZeRO optimizer and does not read it (engine.py "
                                 "_configure_optimizer; the engine all-reduces gradients in buckets of 5e8 elements: "
                                 "allreduce_gradients)");
      continue;
    }
    if (field == "reduce_bucket_size") {
      count(o.reduce_bucket_size, H * H, 1);
      notes.apply(key, text(v), note_default("reduce_bucket_size " + std::to_string(o.reduce_bucket_size)));
    } else if (field == "prefetch_bucket_size") {
      count(o.stage3_prefetch_bucket_size, int64_t(0.9 * double(H) * double(H)), 0);
      notes.apply(key, text(v), note_default(std::string(zero_keys::kPrefetchBucketSize) + " " + std::to_string(o.stage3_prefetch_bucket_size)));
    } else if (field == "param_persistence_threshold") {
      count(o.stage3_param_persistence_threshold, 10 * H, 0);
      notes.apply(key, text(v),
                  note_default("stage3_param_persistence_threshold " + std::to_string(o.stage3_param_persistence_threshold)));
    } else if (field == "max_live_parameters") {
      count(o.stage3_max_live_parameters, 0, 0);
      notes.apply(key, text(v), note_default("stage3_max_live_parameters " + std::to_string(o.stage3_max_live_parameters)));
    } else if (field == "max_reuse_distance") {
      count(o.stage3_max_reuse_distance, 0, 0);
      notes.apply(key, text(v), note_default("stage3_max_reuse_distance " + std::to_string(o.stage3_max_reuse_distance)));
    } else if (field == "sub_group_size") {
      count(o.sub_group_size, 0, 0);
      notes.apply(key, text(v), note_default("sub_group_size " + std::to_string(o.sub_group_size) +
                                             (o.sub_group_size == 0 ? " (one sub-group per parameter)" : "")));
    } else if (field == "model_persistence_threshold") {
      if (!dropped_auto && as_count(key, v, 0) < int64_t(9.2e18))
        throw UsageError(key + " " + text(v) + ": a cap on persisted parameters is not implemented");
      notes.apply(key, text(v), "no cap on persisted parameters");
    } else if ((o.stage == 1 || o.stage == 2) && read_stage12_key(field, key, v, dropped_auto, o, notes)) {
      // honoured for ZeRO stages 1/2 (read_stage12_key)
    } else if (field == "overlap_comm" || field == "contiguous_gradients" || field == "reduce_scatter") {
      const bool b = dropped_auto ? true : as_bool(key, v);
      if (field == "overlap_comm") o.overlap_comm = b;
      if (field == "contiguous_gradients") o.contiguous_gradients = b;
      if (field == "reduce_scatter" && !b)
        throw UsageError(key + " false: stage 3 then all-reduces contiguous buckets (stage3.py "
                         "__reduce_and_partition_ipg_grads); zerobench implements the reduce-scatter path only");
      notes.apply(key, text(v), field + " " + (b ? "true" : "false"));
    } else if (field == "offload_optimizer") {
      if (dropped_auto) notes.apply(key, "auto", "DeepSpeed drops \"auto\" here: no optimizer offload");
      else read_offload_optimizer(key, v, o.offload_optimizer, notes);
    } else if (field == "offload_param") {
      if (dropped_auto) notes.apply(key, "auto", "DeepSpeed drops \"auto\" here: no parameter offload");
      else read_offload_param(key, v, o.offload_param, notes);
    } else if (field == "cpu_offload" || field == "cpu_offload_param") {
      // Deprecated (config.py): new_param_fn maps true to {device: cpu} (every other key at its
      // default) and false to None; given beside the new key, DeepSpeed asserts.
      const std::string replaced = field == "cpu_offload" ? "offload_optimizer" : "offload_param";
      if (z.contains(replaced))
        throw UsageError(key + " and zero_optimization." + replaced +
                         " together: DeepSpeed refuses the deprecated key beside the one replacing it");
      const bool on = !v.is_null() && !dropped_auto && as_bool(key, v);
      if (field == "cpu_offload") {
        o.offload_optimizer = {};
        if (on) o.offload_optimizer.device = "cpu";
      } else {
        o.offload_param = {};
        if (on) o.offload_param.device = "cpu";
      }
      notes.apply(key, text(v), std::string("deprecated: ") + replaced + (on ? " {device: cpu}" : " none"));
      notes.warn(key + " is deprecated; DeepSpeed reads it as " + replaced);
    } else if (field == "zero_hpz_partition_size") {
      o.zero_hpz_partition_size = as_count(key, v, 0);  // the backend checks it divides the world
      notes.apply(key, text(v), o.zero_hpz_partition_size > 1 ? "ZeRO++ hpZ: secondary partition within groups of " +
                                                                    std::to_string(o.zero_hpz_partition_size) + " ranks"
                                                              : "ZeRO++ hpZ off");
    } else if (field == "zero_quantized_weights" || field == "zero_quantized_gradients") {
      const bool b = as_bool(key, v);
      (field == "zero_quantized_weights" ? o.zero_quantized_weights : o.zero_quantized_gradients) = b;
      notes.apply(key, text(v), field == "zero_quantized_weights" ? (b ? "ZeRO++ qwZ: int8 blockwise all-gather" : "qwZ off")
                                                                 : (b ? "ZeRO++ qgZ" : "qgZ off"));
    } else if (field == "zero_quantized_nontrainable_weights") {
      o.zero_quantized_nontrainable_weights = as_bool(key, v);
      notes.ignore(key, text(v), "stores non-trainable parameters quantized (_partition_param_sec); every parameter "
                                 "of zerobench's model trains, so there is none to quantize");
    } else if (field == "module_granularity_threshold") {
      o.module_granularity_threshold = dropped_auto ? 0 : as_count(key, v, 0);
      if (o.module_granularity_threshold == 0)
        notes.ignore(key, text(v), "0: per-module fetch");
      else
        notes.apply(key, text(v),
                    "z3 leaf modules where a module's granularity (parameters // layers, parameter_offload.py "
                    "_get_granularity_recursively) is at most " + std::to_string(o.module_granularity_threshold) +
                    "; zerobench's zero3 refuses that and runs when no module is that fine (DeepSpeed only warns)");
    } else if (field == "use_all_reduce_for_fetch_params" || field == "allgather_sequential") {
      if (!dropped_auto && as_bool(key, v)) throw UsageError(key + " true: that parameter-fetch path is not implemented");
      notes.ignore(key, text(v), "off: coalesced all-gather");
    } else if (field == "zenflow") {
      if (!v.is_null()) throw UsageError(key + ": ZenFlow is not implemented");
      notes.ignore(key, "null", "off");
    } else if (field == "leaf_module") {
      notes.ignore(key, v.dump(), "marks MoE-like modules as ZeRO-3 leaves; zerobench's dense decoder has none");
    } else if (field == "compute_grad_norm" && !dropped_auto && !as_bool(key, v)) {
      throw UsageError(key + " false: DeepSpeed allows it only with ZeRO stage 1 or 2");
    } else if (kZeroIgnored.count(field)) {
      notes.ignore(key, text(v), kZeroIgnored.at(field));
    } else {
      throw UsageError(key + ": not a DeepSpeed ZeRO setting (DeepSpeedZeroConfig forbids unknown keys)");
    }
  }
}

}  // namespace zb::config
