// accelerate_fsdp2.cpp — the accelerate `fsdp_version: 2` reader (see accelerate_fsdp2.hpp).
// Every rule below cites where accelerate 1.15 (or PyTorch 2.11) decides it.
#include "config/accelerate_fsdp2.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "config/bounded_readers.hpp"
#include "config/config_file.hpp"
#include "runtime/errors.hpp"

namespace zb::config {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// accelerate utils/environment.py str_to_bool: y/yes/t/true/on/1 and n/no/f/false/off/0.
bool str_to_bool(const std::string& key, const std::string& value) {
  const auto v = lower(value);
  if (v == "y" || v == "yes" || v == "t" || v == "true" || v == "on" || v == "1") return true;
  if (v == "n" || v == "no" || v == "f" || v == "false" || v == "off" || v == "0") return false;
  throw UsageError(key + " '" + value + "' is not a truth value (true/false, yes/no, on/off, 1/0)");
}

}  // namespace

nlohmann::json to_json(const IgnoredKey& k) { return {{"key", k.key}, {"value", k.value}, {"reason", k.reason}}; }

int accelerate_fsdp_version(const YAML::Node& root) {
  const auto f = root["fsdp_config"];
  if (!f || !f.IsMap()) return 1;
  for (const char* key : {"fsdp_version", "version"}) {
    if (!f[key]) continue;
    const auto v = f[key].as<std::string>();
    if (v == "1") return 1;
    if (v == "2") return 2;
    // accelerate commands/launch.py: --fsdp_version choices ["1", "2"].
    throw UsageError(std::string("fsdp_config.") + key + " '" + v + "' must be 1 or 2");
  }
  return 1;  // launch.py --fsdp_version default "1"
}

AccelerateFsdp2Config read_accelerate_fsdp2_config(const YAML::Node& root, const std::string& where) {
  AccelerateFsdp2Config c;
  auto& o = c;
  // The layout accelerate 1.15 builds (utils/fsdp_utils.py fsdp2_prepare_model) and the values its
  // launcher passes when a key is absent (commands/launch.py defaults; FullyShardedDataParallelPlugin
  // __post_init__ reads them from FSDP_* variables).
  bool sync_module_states = true;      // --fsdp_sync_module_states default "true"
  std::optional<YAML::Node> min_num_params;  // fsdp_min_num_params as the file spells it
  try {
    if (!root.IsMap()) throw UsageError(where + "not a YAML mapping");
    if (root["distributed_type"] && upper(root["distributed_type"].as<std::string>()) != "FSDP")
      throw UsageError(where + "distributed_type '" + root["distributed_type"].as<std::string>() + "' is not FSDP");
    if (accelerate_fsdp_version(root) != 2) throw UsageError(where + "fsdp_config.fsdp_version is not 2");
    if (root["mixed_precision"]) {
      const auto mp = lower(root["mixed_precision"].as<std::string>());
      if (mp == "bf16")
        c.precision = "mixed";  // fsdp2_prepare_model upcasts to fp32; MixedPrecisionPolicy(bf16, bf16, bf16)
      else if (mp == "fp16")
        c.precision = "fp16";  // MixedPrecisionPolicy(fp16, fp16, fp16) and a ShardedGradScaler
      else if (mp != "no" && !(root["mixed_precision"].Tag() == "?" && is_pyyaml_bool(root["mixed_precision"].as<std::string>())))
        // An unquoted yes/true/on/off/false is a boolean to PyYAML: config/accelerate_config.cpp
        // (the launcher keys) refuses it, or lists it as ignored under --precision, as accelerate
        // launch --mixed_precision never reads the file's value.
        throw UsageError(where + "mixed_precision '" + root["mixed_precision"].as<std::string>() +
                         "' is not supported (bf16, fp16 or no)");
    }
    if (root["num_processes"]) c.num_processes = root["num_processes"].as<int>();
    if (const auto d = root["dynamo_config"];
        d && d["dynamo_backend"] && upper(d["dynamo_backend"].as<std::string>()) != "NO")
      throw UsageError(where + "dynamo_config.dynamo_backend '" + d["dynamo_backend"].as<std::string>() +
                       "' (torch.compile) is not supported; set NO");
    if (const auto p = root["parallelism_config"]; p && p.IsMap() && p.size() > 0) {
      // accelerate parallelism_config.py ParallelismConfig: mesh (dp_replicate, dp_shard, cp, sp, tp);
      // a size not given is 1 (commands/launch.py defaults).
      o.dp_replicate_size = 1;
      o.dp_shard_size = 1;
      for (const auto& kv : p) {
        auto key = kv.first.as<std::string>();
        const auto value = kv.second.as<std::string>();
        const std::string name = key.rfind("parallelism_config_", 0) == 0 ? key.substr(19) : key;
        if (name == "dp_replicate_size") {
          o.dp_replicate_size = kv.second.as<int>();
        } else if (name == "dp_shard_size") {
          o.dp_shard_size = kv.second.as<int>();
        } else if (name == "tp_size" || name == "cp_size" || name == "sp_size") {
          if (kv.second.as<int>() > 1)
            throw UsageError(where + "parallelism_config." + key + " " + value +
                             " is not supported (data parallelism only: tp/cp/sp size 1)");
        } else {
          c.ignored.push_back(
              {"parallelism_config." + key, value, "only dp_replicate_size and dp_shard_size are read"});
        }
      }
      if (o.dp_replicate_size < 1 || o.dp_shard_size < 1)
        throw UsageError(where + "parallelism_config: dp_replicate_size and dp_shard_size must be >= 1, got " +
                         std::to_string(o.dp_replicate_size) + " and " + std::to_string(o.dp_shard_size));
      // ParallelismConfig._validate_accelerator: total size 1 -> dp_replicate_size = num_processes.
      if (o.dp_replicate_size * o.dp_shard_size == 1) o.dp_replicate_size = 0;
    }
    for (const auto& kv : root) {  // top-level keys other than those read here
      const auto key = kv.first.as<std::string>();
      if (key == "distributed_type" || key == "mixed_precision" || key == "num_processes" || key == "fsdp_config" ||
          key == "parallelism_config" || key == "dynamo_config")
        continue;
      c.ignored.push_back(
          {key,
           kv.second.IsScalar() ? kv.second.as<std::string>() : "(" + std::to_string(kv.second.size()) + " entries)",
           "launcher setting: does not change what a training step does"});
    }
    const auto f = root["fsdp_config"];
    if (f && f.IsMap()) {
      for (const auto& kv : f) {
        auto key = kv.first.as<std::string>();
        // commands/launch.py: fsdp_config.x and fsdp_config.fsdp_x are the same argument.
        if (key.rfind("fsdp_", 0) != 0) key = "fsdp_" + key;
        const auto& v = kv.second;
        const std::string value = v.IsScalar() ? v.as<std::string>() : "(" + std::to_string(v.size()) + " entries)";
        if (key == "fsdp_version") {
          // checked above
        } else if (key == "fsdp_reshard_after_forward") {
          // __post_init__: str_to_bool for version 2, then "not a bool" raises ValueError.
          try {
            o.reshard_after_forward = str_to_bool(key, value);
          } catch (const UsageError&) {
            throw UsageError(where + key + " '" + value +
                             "' must be true or false with fsdp_version 2 (accelerate accepts only a bool; "
                             "use --reshard-after-forward N for an int)");
          }
        } else if (key == "fsdp_auto_wrap_policy") {
          const auto p = upper(value);
          if (p == "TRANSFORMER_BASED_WRAP" || p == "NO_WRAP" || p == "SIZE_BASED_WRAP")
            o.auto_wrap_policy = p;
          else
            throw UsageError(where + key + " '" + value +
                             "' is not one of TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP");
        } else if (key == "fsdp_transformer_layer_cls_to_wrap") {
          o.transformer_layer_cls_to_wrap = value;
          c.ignored.push_back({key, value,
                               "class name not checked: the decoder block (LlamaDecoderLayer) is the model's only "
                               "transformer layer class and is what TRANSFORMER_BASED_WRAP wraps"});
        } else if (key == "fsdp_activation_checkpointing") {
          o.activation_checkpointing = str_to_bool(key, value);
        } else if (key == "fsdp_activation_checkpointing_offload") {
          if (str_to_bool(key, value)) throw UsageError(where + key + " true is not supported yet");
        } else if (key == "fsdp_cpu_ram_efficient_loading") {
          o.cpu_ram_efficient_loading = str_to_bool(key, value);
        } else if (key == "fsdp_sync_module_states") {
          sync_module_states = str_to_bool(key, value);
          c.ignored.push_back({key, value,
                               "obsolete in FSDP2: accelerate sets it to None (FullyShardedDataParallel"
                               "Plugin.__post_init__); only its launch-time check is applied"});
        } else if (key == "fsdp_use_orig_params") {
          c.ignored.push_back({key, value,
                               "obsolete in FSDP2: fully_shard always uses the original parameters "
                               "(accelerate sets it to None)"});
        } else if (key == "fsdp_state_dict_type") {
          const auto t = upper(value);
          if (t == "LOCAL_STATE_DICT" || t == "1")
            throw UsageError(where + key + " LOCAL_STATE_DICT is not supported by FSDP2 (accelerate raises)");
          if (t != "FULL_STATE_DICT" && t != "SHARDED_STATE_DICT" && t != "2" && t != "3")
            throw UsageError(where + key + " '" + value + "' is not FULL_STATE_DICT or SHARDED_STATE_DICT");
          o.state_dict_type = (t == "FULL_STATE_DICT" || t == "2") ? "FULL_STATE_DICT" : "SHARDED_STATE_DICT";
          c.ignored.push_back({key, value, "checkpoint format only: zerobench saves no checkpoints in a run"});
        } else if (key == "fsdp_offload_params") {
          o.offload_params = str_to_bool(key, value);  // set_cpu_offload: CPUOffloadPolicy() / OffloadPolicy()
        } else if (key == "fsdp_forward_prefetch") {
          c.ignored.push_back({key, value,
                               "not read for fsdp_version 2 (FullyShardedDataParallelPlugin reads "
                               "FSDP_FORWARD_PREFETCH only for version 1)"});
        } else if (key == "fsdp_backward_prefetch") {
          c.ignored.push_back({key, value, "FSDP2 has no backward_prefetch policy: accelerate sets it to None"});
          if (upper(value) != "NO_PREFETCH")
            c.warnings.push_back("backward_prefetch is not supported in FSDP2. Setting backward prefetch to None.");
        } else if (key == "fsdp_sharding_strategy") {
          c.ignored.push_back({key, value,
                               "not read for fsdp_version 2 (use fsdp_reshard_after_forward; HSDP "
                               "comes from parallelism_config)"});
        } else if (key == "fsdp_min_num_params") {
          min_num_params = v;  // read below, once the policy is known (keys come in any order)
        } else if (key == "fsdp_ignored_modules") {
          throw UsageError(where + key + " is not supported yet (every parameter is sharded)");
        } else {
          c.ignored.push_back({key, value, "not an accelerate 1.15 FSDP plugin key"});
        }
      }
    }
    // fsdp_min_num_params: launch.py's --fsdp_min_num_params (type int, default 1e8) reaches the
    // plugin as int(FSDP_MIN_NUM_PARAMS), read only under SIZE_BASED_WRAP, where a value <= 0 means
    // no policy at all (set_auto_wrap_policy: "If zero, we silently ignore it").
    if (o.auto_wrap_policy == "SIZE_BASED_WRAP") {
      o.min_num_params = 100000000;
      if (min_num_params) {
        int64_t n = 0;
        if (!min_num_params->IsScalar() || !YAML::convert<int64_t>::decode(*min_num_params, n))
          throw UsageError(where + "fsdp_config.fsdp_min_num_params " +
                           (min_num_params->IsScalar() ? min_num_params->as<std::string>() : std::string("(not a scalar)")) +
                           ": accelerate reads it with int() from the environment launch writes, which fails on "
                           "anything but an integer");
        o.min_num_params = n;
      }
    } else if (min_num_params) {
      c.ignored.push_back({"fsdp_min_num_params", min_num_params->IsScalar() ? min_num_params->as<std::string>() : "",
                           "used only by SIZE_BASED_WRAP"});
    }
    // accelerate utils/launch.py prepare_multi_gpu_env: raises at launch time.
    if (o.cpu_ram_efficient_loading && !sync_module_states)
      throw UsageError(where +
                       "fsdp_cpu_ram_efficient_loading true needs fsdp_sync_module_states true "
                       "(accelerate launch raises ValueError)");
  } catch (const YAML::Exception& e) {
    throw UsageError(where + e.what());
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    throw UsageError(msg.rfind(where, 0) == 0 ? msg : where + msg);
  }
  return c;
}

AccelerateFsdp2Config read_accelerate_fsdp2_bytes(const std::string& bytes, const std::string& where) {
  // Bounded as config_file.cpp's load_config read it.
  return read_accelerate_fsdp2_config(load_yaml_bounded(bytes, ""), where);
}

// The file through the bounded reader (config/bounded_readers.hpp): size, depth and alias
// expansion capped, exit 2 naming the limit.
namespace {
YAML::Node load_accelerate_yaml(const std::string& path) {
  const std::string where = "--accelerate-config " + path + ": ";
  return load_yaml_bounded(read_file_bounded(path, where, kMaxConfigFileBytes), where);
}
}  // namespace

AccelerateFsdp2Config read_accelerate_fsdp2_config(const std::string& path) {
  return read_accelerate_fsdp2_config(load_accelerate_yaml(path), "--accelerate-config " + path + ": ");
}

bool is_accelerate_fsdp2_config(const std::string& path) {
  const YAML::Node root = load_accelerate_yaml(path);
  try {
    return accelerate_fsdp_version(root) == 2;
  } catch (const YAML::Exception& e) {
    throw UsageError("--accelerate-config " + path + ": " + e.what());
  } catch (const UsageError& e) {
    throw UsageError("--accelerate-config " + path + ": " + e.what());
  }
}

}  // namespace zb::config
