// fsdp_options.cpp — FSDP option names, JSON round trip, accelerate's fsdp_config reader
// (see fsdp_options.hpp; docs/configs.md has the key-by-key table this file implements).
#include "backends/fsdp/fsdp_options.hpp"

#include <algorithm>
#include <cctype>
#include <map>
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

std::string scalar_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "null";
  return v.dump();
}

bool accelerate_bool(const std::string& key, const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>();
  const std::string s = upper(scalar_text(v));
  if (s == "Y" || s == "YES" || s == "T" || s == "TRUE" || s == "ON" || s == "1") return true;
  if (s == "N" || s == "NO" || s == "F" || s == "FALSE" || s == "OFF" || s == "0") return false;
  throw UsageError(key + " '" + scalar_text(v) + "' is not a boolean (accelerate's str_to_bool)");
}

namespace {
// accelerate's utils/constants.py lists: a key takes the name or its 1-based index.
const std::vector<std::string> kShardingStrategies = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                                      "HYBRID_SHARD_ZERO2"};
const std::vector<std::string> kStateDictTypes = {"FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"};
const std::vector<std::string> kAutoWrapPolicies = {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};

// accelerate 1.15 commands/launch.py: the FSDP arguments a config key can set (others are copied
// into the launch namespace and never read).
const std::set<std::string> kLaunchFsdpKeys = {
    "fsdp_version", "fsdp_offload_params", "fsdp_min_num_params", "fsdp_sharding_strategy",
    "fsdp_reshard_after_forward", "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap",
    "fsdp_backward_prefetch", "fsdp_state_dict_type", "fsdp_forward_prefetch", "fsdp_use_orig_params",
    "fsdp_cpu_ram_efficient_loading", "fsdp_sync_module_states", "fsdp_activation_checkpointing",
    "fsdp_activation_checkpointing_offload", "fsdp_ignored_modules"};
}  // namespace

FsdpConfigBlock read_fsdp_config(const nlohmann::json& block, int ranks_per_node) {
  FsdpConfigBlock c;
  auto& o = c.fsdp;
  auto& notes = c.notes;
  // Keys as the launcher sees them: `sharding_strategy` inside fsdp_config is fsdp_sharding_strategy.
  std::map<std::string, nlohmann::json> keys;
  std::map<std::string, std::string> spelled;  // launcher name -> as the file wrote it
  if (!block.is_null() && !block.is_object())
    throw UsageError("fsdp_config must be a mapping, got " + block.dump());
  const nlohmann::json empty = nlohmann::json::object();
  for (const auto& [k, v] : (block.is_object() ? block : empty).items()) {
    const std::string name = k.rfind("fsdp", 0) == 0 ? k : "fsdp_" + k;
    keys[name] = v;
    spelled[name] = "fsdp_config." + k;
  }
  auto has = [&](const std::string& k) { return keys.count(k) > 0; };
  auto text = [&](const std::string& k) { return scalar_text(keys.at(k)); };
  auto flag = [&](const std::string& k) { return accelerate_bool(spelled.at(k), keys.at(k)); };

  if (has("fsdp_version")) {
    const auto v = text("fsdp_version");
    if (v != "1" && v != "2")
      throw UsageError(spelled.at("fsdp_version") + " '" + v + "' is not 1 or 2 (accelerate launch --fsdp_version)");
    c.fsdp_version = v == "2" ? 2 : 1;
    notes.apply(spelled.at("fsdp_version"), v, "fsdp_version " + v);
  }
  if (c.fsdp_version == 2) return c;  // the caller dispatches FSDP2 (bench/config_file.cpp)

  // Defaults as accelerate resolves them when a key is absent (FullyShardedDataParallelPlugin.
  // __post_init__ reading the environment prepare_multi_gpu_env wrote): backward prefetch None,
  // auto-wrap NO_WRAP, sync_module_states and use_orig_params true (launch.py's defaults).
  o.backward_prefetch = BackwardPrefetch::kNone;
  o.auto_wrap_policy = "NO_WRAP";
  o.sync_module_states = true;
  o.use_orig_params = true;
  o.cpu_ram_efficient_loading = true;

  for (const auto& [name, v] : keys) {
    const auto& key = spelled.at(name);
    const auto value = scalar_text(v);
    try {
    if (name == "fsdp_version") {
      continue;
    } else if (name == "fsdp_sharding_strategy") {
      o.sharding_strategy = parse_sharding_strategy(value);
      notes.apply(key, value, "sharding_strategy " + to_string(o.sharding_strategy));
    } else if (name == "fsdp_reshard_after_forward") {
      continue;  // after the loop: it depends on fsdp_sharding_strategy
    } else if (name == "fsdp_backward_prefetch") {
      o.backward_prefetch = parse_backward_prefetch(value);
      notes.apply(key, value, "backward_prefetch " + to_string(o.backward_prefetch));
    } else if (name == "fsdp_forward_prefetch") {
      o.forward_prefetch = flag(name);
      notes.apply(key, value, std::string("forward_prefetch ") + (o.forward_prefetch ? "true" : "false"));
    } else if (name == "fsdp_activation_checkpointing") {
      o.activation_checkpointing = flag(name);
      notes.apply(key, value, std::string("train.activation_checkpointing ") + (o.activation_checkpointing ? "true" : "false"));
    } else if (name == "fsdp_sync_module_states") {
      o.sync_module_states = flag(name);
      notes.apply(key, value, std::string("sync_module_states ") + (o.sync_module_states ? "true" : "false"));
    } else if (name == "fsdp_offload_params") {
      o.offload_params = flag(name);
      if (o.offload_params)
        throw UsageError(key + " " + value + ": CPU offload of parameters and gradients is not implemented in zerobench");
      notes.apply(key, value, "offload_params false");
    } else if (name == "fsdp_activation_checkpointing_offload") {
      if (flag(name))
        throw UsageError(key + " " + value +
                         ": offloading checkpointed activations is not implemented (accelerate also requires fsdp_version 2)");
      notes.ignore(key, value, "off");
    } else if (name == "fsdp_auto_wrap_policy") {
      o.auto_wrap_policy = by_name_or_number(key, value, kAutoWrapPolicies);
      if (o.auto_wrap_policy != "TRANSFORMER_BASED_WRAP")
        throw UsageError(key + " " + value + ": zerobench wraps one FSDP unit per decoder block "
                         "(TRANSFORMER_BASED_WRAP); " + o.auto_wrap_policy + " is not implemented");
      notes.apply(key, value, "one flat parameter per decoder block, the root holds embedding, final norm and LM head");
    } else if (name == "fsdp_transformer_layer_cls_to_wrap") {
      notes.ignore(key, value, "names the model's decoder-layer class; zerobench's decoder has one block class and "
                               "it is the wrapped unit");
    } else if (name == "fsdp_min_num_params") {
      notes.ignore(key, value, "read only with SIZE_BASED_WRAP (FullyShardedDataParallelPlugin.__post_init__)");
    } else if (name == "fsdp_state_dict_type") {
      o.state_dict_type = by_name_or_number(key, value, kStateDictTypes);
      notes.ignore(key, value, "checkpoint format; zerobench writes no checkpoint");
    } else if (name == "fsdp_use_orig_params") {
      o.use_orig_params = flag(name);
      notes.ignore(key, value, "how the optimizer sees parameters; zerobench runs one AdamW over all flat shards, "
                               "the same arithmetic either way");
    } else if (name == "fsdp_cpu_ram_efficient_loading") {
      o.cpu_ram_efficient_loading = flag(name);
      notes.ignore(key, value, "how a pretrained checkpoint is loaded; zerobench builds each unit's weights in place");
    } else if (name == "fsdp_ignored_modules") {
      if (!v.is_null()) throw UsageError(key + " " + value + ": ignored modules are not implemented");
      notes.ignore(key, value, "none");
    } else {
      // accelerate copies unknown fsdp_config keys into the launch namespace and never reads them.
      notes.ignore(key, value, "not an accelerate 1.15 FSDP setting (commands/launch.py has no such argument): "
                               "accelerate ignores it too");
      notes.warn(key + " is not an accelerate FSDP setting; ignored as accelerate ignores it");
    }
    } catch (const UsageError& e) {
      const std::string msg = e.what();
      throw UsageError(msg.rfind(key, 0) == 0 ? msg : key + ": " + msg);
    }
  }

  // fsdp_reshard_after_forward under FSDP1: the plugin maps it by ShardingStrategy name or number,
  // but only when sharding_strategy is unset, and __post_init__ always sets sharding_strategy
  // (fsdp_sharding_strategy, else FULL_SHARD); accelerator.py prepare_model then passes
  // `sharding_strategy or reshard_after_forward`. So a value that disagrees with the strategy
  // accelerate actually uses is refused rather than run either way silently.
  if (has("fsdp_reshard_after_forward")) {
    const auto& key = spelled.at("fsdp_reshard_after_forward");
    const auto& v = keys.at("fsdp_reshard_after_forward");
    const auto value = scalar_text(v);
    if (v.is_boolean())
      throw UsageError(key + " " + value + ": a boolean is FSDP2's form; with fsdp_version 1 accelerate wants a "
                       "sharding strategy name (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD)");
    ShardingStrategy as_strategy;
    try {
      as_strategy = parse_sharding_strategy(value);
    } catch (const UsageError& e) {
      throw UsageError(key + ": " + e.what());
    }
    if (as_strategy != o.sharding_strategy)
      throw UsageError(key + " " + value + ": under fsdp_version 1 accelerate 1.6-1.15 runs the sharding strategy " +
                       to_string(o.sharding_strategy) +
                       " instead (FullyShardedDataParallelPlugin always sets sharding_strategy, which prepare_model "
                       "prefers); set fsdp_sharding_strategy: " + to_string(as_strategy) + " to run it");
    notes.apply(key, value, "sharding_strategy " + to_string(o.sharding_strategy));
  }
  if (!has("fsdp_auto_wrap_policy"))
    throw UsageError("fsdp_config has no fsdp_auto_wrap_policy: accelerate then uses NO_WRAP (one FSDP unit for the "
                     "whole model), which zerobench does not implement; set fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP");
  // utils/launch.py prepare_multi_gpu_env refuses this combination.
  if (o.cpu_ram_efficient_loading && !o.sync_module_states && has("fsdp_cpu_ram_efficient_loading"))
    throw UsageError(spelled.at("fsdp_cpu_ram_efficient_loading") +
                     " true needs fsdp_sync_module_states true (accelerate launch refuses the combination)");
  if (o.sharding_strategy == ShardingStrategy::kHybridShard && ranks_per_node > 0) {
    o.hybrid_shard_group_size = ranks_per_node;  // torch: intra-node shard group
    notes.apply("num_processes / num_machines", std::to_string(ranks_per_node),
                "hybrid_shard_group_size " + std::to_string(ranks_per_node));
  }
  return c;
}

}  // namespace zb::backends::fsdp
