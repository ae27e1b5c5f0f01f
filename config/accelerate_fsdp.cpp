// accelerate_fsdp.cpp — accelerate's fsdp_config block, fsdp_version 1 (see accelerate_fsdp.hpp;
// docs/configs.md has the key-by-key table this file implements).
#include "config/accelerate_fsdp.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "config/accelerate_config.hpp"
#include "runtime/errors.hpp"

namespace zb::config {

namespace {
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// accelerate's utils/constants.py lists: a key takes the name or its 1-based index.
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

const std::vector<std::string> kFsdpShardingStrategies = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                                          "HYBRID_SHARD_ZERO2"};

// accelerate accepts both the enum name and its 1-based index (utils/constants.py lists).
std::string accelerate_name_or_number(const std::string& key, const std::string& value,
                                      const std::vector<std::string>& names) {
  const std::string v = upper(value);
  for (size_t i = 0; i < names.size(); ++i)
    if (v == names[i] || v == std::to_string(i + 1)) return names[i];
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += (i ? ", " : "") + std::to_string(i + 1) + "/" + names[i];
  throw UsageError(key + " '" + value + "' is not one of " + list);
}

std::string accelerate_backward_prefetch(const std::string& key, const std::string& value) {
  if (upper(value) == "NONE") return "NO_PREFETCH";
  return accelerate_name_or_number(key, value, {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"});
}

AccelerateFsdpConfig read_accelerate_fsdp_config(const nlohmann::json& block, int ranks_per_node) {
  AccelerateFsdpConfig c;
  auto& o = c;
  auto& notes = c.notes;
  // Keys as the launcher sees them: `sharding_strategy` inside fsdp_config is fsdp_sharding_strategy.
  std::map<std::string, nlohmann::json> keys;
  std::map<std::string, std::string> spelled;  // launcher name -> as the file wrote it
  if (!block.is_null() && !block.is_object())
    throw UsageError("fsdp_config must be a mapping, got " + block.dump());
  const nlohmann::json empty = nlohmann::json::object();
  for (const auto& [k, v] : (block.is_object() ? block : empty).items()) {
    // commands/launch.py: a key without the fsdp prefix gets "fsdp_" prepended (the launch argument).
    static const std::string kLaunchPrefix = "fsdp_";
    const bool prefixed = k.compare(0, kLaunchPrefix.size() - 1, kLaunchPrefix, 0, kLaunchPrefix.size() - 1) == 0;
    const std::string name = prefixed ? k : kLaunchPrefix + k;
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
  if (c.fsdp_version == 2) return c;  // version 2 is read by config/accelerate_fsdp2.cpp

  // Defaults as accelerate resolves them when a key is absent (FullyShardedDataParallelPlugin.
  // __post_init__ reading the environment prepare_multi_gpu_env wrote): backward prefetch None,
  // auto-wrap NO_WRAP, sync_module_states and use_orig_params true (launch.py's defaults).
  o.backward_prefetch = "NO_PREFETCH";
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
      o.sharding_strategy = accelerate_name_or_number("sharding strategy", value, kFsdpShardingStrategies);
      o.sharding_strategy_key = key;
      notes.apply(key, value, "sharding_strategy " + o.sharding_strategy);
    } else if (name == "fsdp_reshard_after_forward") {
      continue;  // after the loop: it depends on fsdp_sharding_strategy
    } else if (name == "fsdp_backward_prefetch") {
      o.backward_prefetch = accelerate_backward_prefetch("backward prefetch", value);
      notes.apply(key, value, "backward_prefetch " + o.backward_prefetch);
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
      notes.apply(key, value, std::string("cpu_offload CPUOffload(offload_params=") + (o.offload_params ? "True" : "False") +
                                  ")");
    } else if (name == "fsdp_activation_checkpointing_offload") {
      if (flag(name))
        throw UsageError(key + " " + value +
                         ": offloading checkpointed activations is not implemented (accelerate also requires fsdp_version 2)");
      notes.ignore(key, value, "off");
    } else if (name == "fsdp_auto_wrap_policy") {
      o.auto_wrap_policy = accelerate_name_or_number(key, value, kAutoWrapPolicies);
      notes.apply(key, value,
                  o.auto_wrap_policy == "TRANSFORMER_BASED_WRAP"
                      ? "one flat parameter per decoder block, the root holds embedding, final norm and LM head"
                  : o.auto_wrap_policy == "NO_WRAP"
                      ? "one flat parameter, the root's, holds every parameter (no auto-wrap policy)"
                      : "size_based_auto_wrap_policy(min_num_params): the units it makes of the model "
                        "(config.backend.options; backends/fsdp/fsdp_wrap.hpp)");
    } else if (name == "fsdp_transformer_layer_cls_to_wrap") {
      notes.ignore(key, value, "names the model's decoder-layer class; zerobench's decoder has one block class and "
                               "it is the wrapped unit");
    } else if (name == "fsdp_min_num_params") {
      continue;  // after the loop: read only with SIZE_BASED_WRAP
    } else if (name == "fsdp_state_dict_type") {
      o.state_dict_type = accelerate_name_or_number(key, value, kStateDictTypes);
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
    std::string as_strategy;
    try {
      as_strategy = accelerate_name_or_number("sharding strategy", value, kFsdpShardingStrategies);
    } catch (const UsageError& e) {
      throw UsageError(key + ": " + e.what());
    }
    if (as_strategy != o.sharding_strategy)
      throw UsageError(key + " " + value + ": under fsdp_version 1 accelerate 1.6-1.15 runs the sharding strategy " +
                       o.sharding_strategy +
                       " instead (FullyShardedDataParallelPlugin always sets sharding_strategy, which prepare_model "
                       "prefers); set fsdp_sharding_strategy: " + as_strategy + " to run it");
    notes.apply(key, value, "sharding_strategy " + o.sharding_strategy);
  }
  if (!has("fsdp_auto_wrap_policy"))
    notes.apply("fsdp_config.fsdp_auto_wrap_policy", "(absent)",
                "NO_WRAP, accelerate's default: one flat parameter, the root's, holds every parameter");
  // fsdp_min_num_params: launch.py's --fsdp_min_num_params (type int, default 1e8) reaches
  // FullyShardedDataParallelPlugin as int(FSDP_MIN_NUM_PARAMS), read only under SIZE_BASED_WRAP,
  // where a value <= 0 means no policy at all (set_auto_wrap_policy: "If zero, we silently ignore it").
  if (has("fsdp_min_num_params")) {
    const auto& key = spelled.at("fsdp_min_num_params");
    const auto& v = keys.at("fsdp_min_num_params");
    if (o.auto_wrap_policy != "SIZE_BASED_WRAP") {
      notes.ignore(key, scalar_text(v), "read only with SIZE_BASED_WRAP (FullyShardedDataParallelPlugin.__post_init__)");
    } else {
      if (!v.is_number_integer())
        throw UsageError(key + " " + scalar_text(v) +
                         ": accelerate reads it with int() from the environment launch writes, which fails on anything "
                         "but an integer");
      o.min_num_params = v.get<int64_t>();
      notes.apply(key, scalar_text(v),
                  o.min_num_params > 0 ? "min_num_params " + scalar_text(v)
                                       : "min_num_params <= 0: accelerate passes no auto-wrap policy (NO_WRAP)");
    }
  } else if (o.auto_wrap_policy == "SIZE_BASED_WRAP") {
    notes.apply("fsdp_config.fsdp_min_num_params", "(absent)", "min_num_params 100000000 (accelerate launch's default)");
  }
  // utils/launch.py prepare_multi_gpu_env refuses this combination.
  if (o.cpu_ram_efficient_loading && !o.sync_module_states && has("fsdp_cpu_ram_efficient_loading"))
    throw UsageError(spelled.at("fsdp_cpu_ram_efficient_loading") +
                     " true needs fsdp_sync_module_states true (accelerate launch refuses the combination)");
  if ((o.sharding_strategy == "HYBRID_SHARD" || o.sharding_strategy == "HYBRID_SHARD_ZERO2") && ranks_per_node > 0) {
    o.hybrid_shard_group_size = ranks_per_node;  // torch: intra-node shard group
    notes.apply("num_processes / num_machines", std::to_string(ranks_per_node),
                "hybrid_shard_group_size " + std::to_string(ranks_per_node));
  }
  return c;
}

}  // namespace zb::config
