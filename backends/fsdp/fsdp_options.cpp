// fsdp_options.cpp — FSDP option names, JSON round trip, accelerate YAML reader.
#include "backends/fsdp/fsdp_options.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <set>

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

bool parse_bool(const std::string& key, const YAML::Node& n) {
  const std::string v = upper(n.as<std::string>());
  if (v == "TRUE" || v == "YES" || v == "1") return true;
  if (v == "FALSE" || v == "NO" || v == "0") return false;
  throw UsageError(key + " '" + n.as<std::string>() + "' is not true or false");
}
}  // namespace

std::string to_string(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kFullShard: return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::kNoShard: return "NO_SHARD";
    case ShardingStrategy::kHybridShard: return "HYBRID_SHARD";
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
  throw UsageError("sharding strategy HYBRID_SHARD_ZERO2 is not supported yet (use HYBRID_SHARD)");
}

BackwardPrefetch parse_backward_prefetch(const std::string& v) {
  if (upper(v) == "NONE") return BackwardPrefetch::kNone;
  const auto name = by_name_or_number("backward prefetch", v, {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"});
  if (name == "BACKWARD_PRE") return BackwardPrefetch::kBackwardPre;
  if (name == "BACKWARD_POST") return BackwardPrefetch::kBackwardPost;
  return BackwardPrefetch::kNone;
}

nlohmann::json to_json(const FsdpOptions& o) {
  return {{"sharding_strategy", to_string(o.sharding_strategy)},
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
}

FsdpOptions fsdp_options_from_json(const nlohmann::json& j) {
  FsdpOptions o;
  if (j.contains("sharding_strategy")) o.sharding_strategy = parse_sharding_strategy(j["sharding_strategy"].get<std::string>());
  if (j.contains("backward_prefetch")) o.backward_prefetch = parse_backward_prefetch(j["backward_prefetch"].get<std::string>());
  o.forward_prefetch = j.value("forward_prefetch", o.forward_prefetch);
  o.limit_all_gathers = j.value("limit_all_gathers", o.limit_all_gathers);
  o.hybrid_shard_group_size = j.value("hybrid_shard_group_size", o.hybrid_shard_group_size);
  o.reduce_dtype = j.value("reduce_dtype", o.reduce_dtype);
  if (!o.reduce_dtype.empty() && o.reduce_dtype != "bf16" && o.reduce_dtype != "fp32")
    throw UsageError("--reduce-dtype must be bf16 or fp32, got '" + o.reduce_dtype + "'");
  o.sync_module_states = j.value("sync_module_states", o.sync_module_states);
  o.activation_checkpointing = j.value("activation_checkpointing", o.activation_checkpointing);
  o.state_dict_type = j.value("state_dict_type", o.state_dict_type);
  o.auto_wrap_policy = j.value("auto_wrap_policy", o.auto_wrap_policy);
  o.use_orig_params = j.value("use_orig_params", o.use_orig_params);
  o.cpu_ram_efficient_loading = j.value("cpu_ram_efficient_loading", o.cpu_ram_efficient_loading);
  o.offload_params = j.value("offload_params", o.offload_params);
  if (o.hybrid_shard_group_size < 0)
    throw UsageError("--hsdp-shard-size must be >= 0, got " + std::to_string(o.hybrid_shard_group_size));
  return o;
}

AccelerateConfig read_accelerate_config(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    throw UsageError("--accelerate-config " + path + ": " + e.what());
  }
  AccelerateConfig c;
  const auto where = "--accelerate-config " + path + ": ";
  try {
    if (root["distributed_type"] && upper(root["distributed_type"].as<std::string>()) != "FSDP")
      throw UsageError(where + "distributed_type '" + root["distributed_type"].as<std::string>() + "' is not FSDP");
    if (root["mixed_precision"]) {
      const auto mp = upper(root["mixed_precision"].as<std::string>());
      if (mp == "BF16")
        c.precision = "mixed";  // accelerate >= 0.30 upcasts the flat shard to fp32
      else if (mp == "NO")
        c.precision = "";
      else
        throw UsageError(where + "mixed_precision '" + root["mixed_precision"].as<std::string>() +
                         "' is not supported (bf16 or no)");
    }
    if (root["num_processes"]) c.num_processes = root["num_processes"].as<int>();
    const auto f = root["fsdp_config"];
    if (!f) return c;
    auto& o = c.fsdp;
    for (const auto& kv : f) {
      const auto key = kv.first.as<std::string>();
      const auto& v = kv.second;
      if (key == "fsdp_sharding_strategy") {
        o.sharding_strategy = parse_sharding_strategy(v.as<std::string>());
      } else if (key == "fsdp_backward_prefetch" || key == "fsdp_backward_prefetch_policy") {
        o.backward_prefetch = parse_backward_prefetch(v.as<std::string>());
      } else if (key == "fsdp_forward_prefetch") {
        o.forward_prefetch = parse_bool(key, v);
      } else if (key == "fsdp_activation_checkpointing") {
        o.activation_checkpointing = parse_bool(key, v);
      } else if (key == "fsdp_sync_module_states") {
        o.sync_module_states = parse_bool(key, v);
      } else if (key == "fsdp_state_dict_type") {
        o.state_dict_type = by_name_or_number(key, v.as<std::string>(),
                                              {"FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"});
        c.warnings.push_back(key + " is recorded but not used: zerobench saves no checkpoints");
      } else if (key == "fsdp_auto_wrap_policy") {
        o.auto_wrap_policy =
            by_name_or_number(key, v.as<std::string>(), {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"});
        if (o.auto_wrap_policy != "TRANSFORMER_BASED_WRAP")
          c.warnings.push_back(key + " " + o.auto_wrap_policy +
                               " is not honoured: zerobench always wraps one unit per decoder block");
      } else if (key == "fsdp_transformer_layer_cls_to_wrap") {
        // The decoder block is the only layer class; nothing to choose.
      } else if (key == "fsdp_use_orig_params") {
        o.use_orig_params = parse_bool(key, v);
        c.warnings.push_back(key + " is recorded but not used: there is one optimizer over all flat shards");
      } else if (key == "fsdp_cpu_ram_efficient_loading") {
        o.cpu_ram_efficient_loading = parse_bool(key, v);
        c.warnings.push_back(key + " is recorded but not used: weights are built per unit, never loaded whole");
      } else if (key == "fsdp_offload_params") {
        o.offload_params = parse_bool(key, v);
        if (o.offload_params) throw UsageError(where + "fsdp_offload_params true is not supported yet");
      } else if (key == "fsdp_min_num_params") {
        c.warnings.push_back(key + " is not honoured: zerobench always wraps one unit per decoder block");
      } else {
        c.warnings.push_back("unknown fsdp_config key " + key + " ignored");
      }
    }
  } catch (const YAML::Exception& e) {
    throw UsageError(where + e.what());
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    throw UsageError(msg.rfind("--accelerate-config", 0) == 0 ? msg : where + msg);
  }
  return c;
}

}  // namespace zb::backends::fsdp
