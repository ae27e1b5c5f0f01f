// fsdp_options.cpp — FSDP option names and their JSON round trip (see fsdp_options.hpp; the
// accelerate fsdp_config reader is config/accelerate_fsdp.cpp, its use fsdp_config.cpp).
#include "backends/fsdp/fsdp_options.hpp"

#include <algorithm>
#include <cctype>

#include "runtime/errors.hpp"

namespace zb::backends::fsdp {

namespace {
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// accelerate accepts both the enum name and its 1-based index (utils/constants.py lists).
std::string by_name_or_number(const std::string& key, const std::string& value, const std::vector<std::string>& names) {
  const std::string v = upper(value);
  for (size_t i = 0; i < names.size(); ++i)
    if (v == names[i] || v == std::to_string(i + 1)) return names[i];
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += (i ? ", " : "") + std::to_string(i + 1) + "/" + names[i];
  throw UsageError(key + " '" + value + "' is not one of " + list);
}

}  // namespace

std::string to_string(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kFullShard: return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::kNoShard: return "NO_SHARD";
    case ShardingStrategy::kHybridShard: return "HYBRID_SHARD";
    case ShardingStrategy::kHybridShardZero2: return "HYBRID_SHARD_ZERO2";
  }
  return "?";
}

std::string to_string(BackwardPrefetch p) {
  switch (p) {
    case BackwardPrefetch::kBackwardPre: return "BACKWARD_PRE";
    case BackwardPrefetch::kBackwardPost: return "BACKWARD_POST";
    case BackwardPrefetch::kNone: return "NO_PREFETCH";
  }
  return "?";
}

ShardingStrategy parse_sharding_strategy(const std::string& v) {
  const auto name = by_name_or_number("sharding strategy", v,
                                      {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"});
  if (name == "FULL_SHARD") return ShardingStrategy::kFullShard;
  if (name == "SHARD_GRAD_OP") return ShardingStrategy::kShardGradOp;
  if (name == "NO_SHARD") return ShardingStrategy::kNoShard;
  if (name == "HYBRID_SHARD") return ShardingStrategy::kHybridShard;
  return ShardingStrategy::kHybridShardZero2;
}

BackwardPrefetch parse_backward_prefetch(const std::string& v) {
  if (upper(v) == "NONE") return BackwardPrefetch::kNone;
  const auto name = by_name_or_number("backward prefetch", v, {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"});
  if (name == "BACKWARD_PRE") return BackwardPrefetch::kBackwardPre;
  if (name == "BACKWARD_POST") return BackwardPrefetch::kBackwardPost;
  return BackwardPrefetch::kNone;
}

nlohmann::json to_json(const FsdpOptions& o) {
  nlohmann::json j = {{"sharding_strategy", to_string(o.sharding_strategy)},
          {"backward_prefetch", to_string(o.backward_prefetch)},
          {"forward_prefetch", o.forward_prefetch},
          {"limit_all_gathers", o.limit_all_gathers},
          {"hybrid_shard_group_size", o.hybrid_shard_group_size},
          {"reduce_dtype", o.reduce_dtype},
          {"sync_module_states", o.sync_module_states},
          {"activation_checkpointing", o.activation_checkpointing},
          {"state_dict_type", o.state_dict_type},
          {"auto_wrap_policy", o.auto_wrap_policy},
          {"use_orig_params", o.use_orig_params},
          {"cpu_ram_efficient_loading", o.cpu_ram_efficient_loading},
          {"offload_params", o.offload_params}};
  if (o.auto_wrap_policy == "SIZE_BASED_WRAP") j["min_num_params"] = o.min_num_params;
  return j;
}

FsdpOptions fsdp_options_from_json(const nlohmann::json& j) {
  FsdpOptions o;
  if (j.contains("sharding_strategy")) o.sharding_strategy = parse_sharding_strategy(j["sharding_strategy"].get<std::string>());
  if (j.contains("backward_prefetch")) o.backward_prefetch = parse_backward_prefetch(j["backward_prefetch"].get<std::string>());
  o.forward_prefetch = j.value("forward_prefetch", o.forward_prefetch);
  o.limit_all_gathers = j.value("limit_all_gathers", o.limit_all_gathers);
  o.hybrid_shard_group_size = j.value("hybrid_shard_group_size", o.hybrid_shard_group_size);
  o.reduce_dtype = j.value("reduce_dtype", o.reduce_dtype);
  o.sync_module_states = j.value("sync_module_states", o.sync_module_states);
  o.activation_checkpointing = j.value("activation_checkpointing", o.activation_checkpointing);
  o.state_dict_type = j.value("state_dict_type", o.state_dict_type);
  o.auto_wrap_policy = j.value("auto_wrap_policy", o.auto_wrap_policy);
  o.min_num_params = j.value("min_num_params", o.min_num_params);
  o.use_orig_params = j.value("use_orig_params", o.use_orig_params);
  o.cpu_ram_efficient_loading = j.value("cpu_ram_efficient_loading", o.cpu_ram_efficient_loading);
  o.offload_params = j.value("offload_params", o.offload_params);
  validate(o);
  return o;
}

void validate(const FsdpOptions& o) {
  if (!o.reduce_dtype.empty() && o.reduce_dtype != "bf16" && o.reduce_dtype != "fp32")
    throw UsageError("--reduce-dtype must be bf16 or fp32, got '" + o.reduce_dtype + "'");
  if (o.auto_wrap_policy != "TRANSFORMER_BASED_WRAP" && o.auto_wrap_policy != "NO_WRAP" &&
      o.auto_wrap_policy != "SIZE_BASED_WRAP")
    throw UsageError("fsdp auto_wrap_policy must be TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP, got '" +
                     o.auto_wrap_policy + "'");
  if (o.hybrid_shard_group_size < 0)
    throw UsageError("--hsdp-shard-size must be >= 0, got " + std::to_string(o.hybrid_shard_group_size));
}

const FsdpOptions& fsdp_options(const BackendOptions& options) { return options.as<FsdpOptions>(fsdp_options_from_json); }

nlohmann::json to_json(const FsdpResolved& r) {
  auto j = to_json(r.options);
  if (r.sharding_strategy_requested) {
    j["sharding_strategy_requested"] = to_string(*r.sharding_strategy_requested);
    j["sharding_strategy_note"] = "FSDP1 switches to NO_SHARD at world size 1 (_init_utils.py _init_core_state)";
  }
  j["param_dtype"] = dtype_long_name(r.param_dtype);
  j["reduce_dtype"] = dtype_long_name(r.reduce_dtype);
  j["flat_param_dtype"] = dtype_long_name(r.flat_param_dtype);
  j["shard_group_size"] = r.shard_group_size;
  j["gradient_predivide_factor"] = r.gradient_predivide_factor;
  j["gradient_postdivide_factor"] = r.gradient_postdivide_factor;
  j["sync_each_batch"] = r.sync_each_batch;
  j.erase("offload_params");
  j["cpu_offload"] = {{"offload_params", r.options.offload_params}};  // FSDP1's CPUOffload, as api.py names it
  j["optimizer"] = r.optimizer;
  j["clip_grad_norm"] = "FullyShardedDataParallel.clip_grad_norm_";
  return j;
}

FsdpResolved fsdp_resolved_from_json(const nlohmann::json& j) {
  FsdpResolved r;
  auto o = j.is_object() ? j : nlohmann::json::object();
  r.param_dtype = dtype_key(o, "param_dtype");
  r.reduce_dtype = dtype_key(o, "reduce_dtype");
  r.flat_param_dtype = dtype_key(o, "flat_param_dtype");
  o.erase("reduce_dtype");  // the dtype resolved, not the option's bf16 | fp32 | ""
  if (o.contains("cpu_offload") && o["cpu_offload"].is_object())
    o["offload_params"] = o["cpu_offload"].value("offload_params", FsdpOptions{}.offload_params);
  r.options = fsdp_options_from_json(o);
  if (o.contains("sharding_strategy_requested"))
    r.sharding_strategy_requested = parse_sharding_strategy(o["sharding_strategy_requested"].get<std::string>());
  r.shard_group_size = o.value("shard_group_size", r.shard_group_size);
  r.gradient_predivide_factor = o.value("gradient_predivide_factor", r.gradient_predivide_factor);
  r.gradient_postdivide_factor = o.value("gradient_postdivide_factor", r.gradient_postdivide_factor);
  r.sync_each_batch = o.value("sync_each_batch", r.sync_each_batch);
  r.optimizer = o.value("optimizer", r.optimizer);
  return r;
}

}  // namespace zb::backends::fsdp
