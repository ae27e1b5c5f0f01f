// config_file.cpp — config-file recognition and dispatch (see config_file.hpp; the key-by-key
// decisions are tabled in docs/configs.md).
#include "bench/config_file.hpp"

#include <openssl/evp.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "backends/fsdp/fsdp_options.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "config/bounded_readers.hpp"
#include "runtime/errors.hpp"

namespace zb::bench {

namespace {
using json = nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// At most config::kMaxConfigFileBytes (config/bounded_readers.hpp, docs/configs.md "Limits").
std::string read_bytes(const std::string& path, const std::string& flag) {
  return config::read_file_bounded(path, flag + " " + path + ": ", config::kMaxConfigFileBytes);
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr) != 1)
    throw RunError("SHA-256 failed (OpenSSL EVP_Digest)");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

// A plain (unquoted) YAML scalar typed as PyYAML's safe_load types it (YAML 1.1 resolvers):
// accelerate reads its YAML with yaml.safe_load, so `no` is a boolean and `5e8` a string.
json plain_scalar(const std::string& s) {
  static const std::regex null_re("^(~|null|Null|NULL|)$");
  static const std::regex bool_true("^(yes|Yes|YES|true|True|TRUE|on|On|ON)$");
  static const std::regex bool_false("^(no|No|NO|false|False|FALSE|off|Off|OFF)$");
  static const std::regex int_re("^[-+]?(0|[1-9][0-9_]*)$");
  static const std::regex float_re("^[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+][0-9]+)?$");
  static const std::regex inf_re("^[-+]?\\.(inf|Inf|INF)$");
  static const std::regex nan_re("^\\.(nan|NaN|NAN)$");
  if (std::regex_match(s, null_re)) return nullptr;
  if (std::regex_match(s, bool_true)) return true;
  if (std::regex_match(s, bool_false)) return false;
  auto digits = [](std::string v) {
    v.erase(std::remove(v.begin(), v.end(), '_'), v.end());
    return v;
  };
  if (std::regex_match(s, int_re)) {
    try {
      return std::stoll(digits(s));
    } catch (const std::exception&) {
      return s;
    }
  }
  if (std::regex_match(s, float_re) && s != "." && s != "-." && s != "+.") return std::stod(digits(s));
  if (std::regex_match(s, inf_re)) return s[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  if (std::regex_match(s, nan_re)) return std::nan("");
  return s;
}

// One scalar node as PyYAML types it. Quoted scalars carry the "!" tag and stay strings; so
// does an explicit !!str.
json yaml_scalar(const YAML::Node& n) {
  if (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str") return n.Scalar();
  return plain_scalar(n.Scalar());
}

// The YAML tree as JSON by a counted walk (config/bounded_readers.hpp): this conversion follows
// every alias, so it is where an alias bomb would expand; the walk stops at the node budget.
json yaml_to_json(const YAML::Node& n, const std::string& where) {
  return config::yaml_to_json_bounded(n, yaml_scalar, where);
}

// JSON as DeepSpeed reads it (hjson with dict_raise_error_on_duplicate_keys): comments allowed,
// a key given twice in one object refused.
json parse_json(const std::string& text, const std::string& where) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    else if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() && parsed.is_string() &&
             !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  // Size, depth and value count bounded while parsing (config/bounded_readers.hpp).
  json root = config::parse_json_bounded(text, where, {}, /*ignore_comments=*/true, cb);
  if (!duplicate.empty()) throw UsageError(where + "key \"" + duplicate + "\" appears twice in one object (DeepSpeed refuses duplicate keys)");
  return root;
}

// accelerate's ClusterConfig fields over versions 0.20-1.15 (commands/config/config_args.py),
// plus the two old spellings process_config converts (fp16, dynamo_backend).
const std::set<std::string> kAccelerateKeys = {
    "compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug", "num_processes",
    "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend",
    "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config", "deepspeed_config",
    "fsdp_config", "parallelism_config", "tp_config", "megatron_lm_config", "ipex_config", "mpirun_config",
    "downcast_bf16", "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands",
    "tpu_vm", "tpu_env", "dynamo_config", "fp16", "dynamo_backend"};

// Keys that only say where and how processes are launched, or configure TPUs.
const std::map<std::string, std::string> kLaunchOnly = {
    {"compute_environment", "where accelerate launches (LOCAL_MACHINE)"},
    {"debug", "accelerate's debug checks"},
    {"machine_rank", "multi-node rendezvous"},
    {"main_process_ip", "multi-node rendezvous"},
    {"main_process_port", "multi-node rendezvous"},
    {"rdzv_backend", "multi-node rendezvous"},
    {"same_network", "multi-node rendezvous"},
    {"main_training_function", "names the script's entry point"},
    {"gpu_ids", "which GPUs are visible (CUDA_VISIBLE_DEVICES)"},
    {"enable_cpu_affinity", "process-to-core pinning"},
    {"use_cpu", "device choice; zerobench's is --device"},
    {"downcast_bf16", "TPU only"},
    {"tpu_name", "TPU only"},
    {"tpu_zone", "TPU only"},
    {"tpu_use_cluster", "TPU only"},
    {"tpu_use_sudo", "TPU only"},
    {"tpu_vm", "TPU only"},
    {"tpu_env", "TPU only"},
    {"command_file", "TPU pod commands"},
    {"commands", "TPU pod commands"},
    {"mpirun_config", "the mpirun launcher's host file"},
};

struct Accelerate {
  const json& root;
  const ConfigRequest& req;
  ResolvedConfig& out;
  backends::ConfigNotes& notes;
  bool fsdp2_file = false;  // distributed_type FSDP with fsdp_config.fsdp_version 2 (the fsdp2 backend)

  std::string text(const json& v) const { return backends::fsdp::scalar_text(v); }

  // accelerate's mixed_precision for the run: --precision (accelerate launch --mixed_precision)
  // else the file's, else "no".
  std::string file_mixed_precision() const {
    if (root.contains("mixed_precision") && !root["mixed_precision"].is_null()) {
      const auto& v = root["mixed_precision"];
      if (v.is_boolean())
        throw UsageError("mixed_precision " + text(v) + ": YAML reads an unquoted no/yes as a boolean, which "
                         "accelerate cannot use; write 'no' or 'bf16'");
      const auto mp = lower(text(v));
      if (mp != "no" && mp != "fp16" && mp != "bf16" && mp != "fp8")
        throw UsageError("mixed_precision '" + text(v) + "' is not no, fp16, bf16 or fp8");
      return mp;
    }
    if (root.contains("fp16") && root["fp16"].is_boolean() && root["fp16"].get<bool>()) return "fp16";  // old key
    return "no";
  }

  void top_level(const std::string& dist) {
    for (const auto& [k, v] : root.items()) {
      if (!kAccelerateKeys.count(k))
        throw UsageError(k + ": not an accelerate config key (accelerate refuses the file: \"had unknown keys\")");
      if (kLaunchOnly.count(k)) {
        notes.ignore(k, v.is_primitive() ? text(v) : v.dump(), kLaunchOnly.at(k));
      } else if (k == "dynamo_config" || k == "dynamo_backend") {
        const json backend = k == "dynamo_backend" ? v : (v.is_object() ? v.value("dynamo_backend", json("NO")) : json());
        if (!backend.is_null() && upper(text(backend)) != "NO")
          throw UsageError(k + (k == "dynamo_config" ? ".dynamo_backend " : " ") + text(backend) +
                           ": torch.compile is not implemented in zerobench (it runs eager)");
        notes.ignore(k, v.is_primitive() ? text(v) : v.dump(), "torch.compile off");
      } else if (k == "fp8_config") {
        notes.ignore(k, v.dump(), "read only with mixed_precision fp8");
      } else if (k == "ipex_config") {
        if (v.is_object() && v.contains("ipex") && backends::fsdp::accelerate_bool("ipex_config.ipex", v["ipex"]))
          throw UsageError("ipex_config.ipex true: Intel Extension for PyTorch is not used by zerobench");
        notes.ignore(k, v.dump(), "IPEX off");
      } else if (k == "parallelism_config" && fsdp2_file) {
        // read by the fsdp2 reader: dp_replicate_size / dp_shard_size are FSDP2's HSDP mesh
      } else if (k == "tp_config" || k == "parallelism_config") {
        if (v.is_object())
          for (const auto& [pk, pv] : v.items())
            if (pk.find("size") != std::string::npos && pv.is_number() && pv.get<double>() > 1)
              throw UsageError(k + "." + pk + " " + text(pv) + ": tensor/context/sequence parallelism is not implemented");
        notes.ignore(k, v.dump(), "no extra parallel dimension");
      } else if (k == "megatron_lm_config") {
        notes.ignore(k, v.dump(), "read only with distributed_type MEGATRON_LM");
      } else if (k == "fsdp_config" && dist != "FSDP") {
        notes.ignore(k, v.dump(), "read only with distributed_type FSDP");
      } else if (k == "deepspeed_config" && dist != "DEEPSPEED") {
        notes.ignore(k, v.dump(), "read only with distributed_type DEEPSPEED");
      } else if (k == "num_machines" && !v.is_null() && v.is_number() && v.get<double>() > 1) {
        notes.ignore(k, text(v), "zerobench's launcher runs every rank on this machine (torchrun/srun spread them)");
        notes.warn("num_machines " + text(v) + ": the built-in launcher runs all ranks on this machine");
      } else if (k == "num_machines") {
        notes.ignore(k, text(v), "one machine");
      } else if (k == "fp16" && root.contains("mixed_precision")) {
        notes.ignore(k, text(v), "the old spelling of mixed_precision fp16; accelerate converts it only when "
                                 "mixed_precision is absent (process_config)");
      }
      // distributed_type, mixed_precision, num_processes, fp16: handled by the caller
    }
  }

  void resolve() {
    if (!root.is_object()) throw UsageError("an accelerate config must be a mapping");
    if (root.contains("compute_environment") && upper(text(root["compute_environment"])) != "LOCAL_MACHINE")
      throw UsageError("compute_environment " + text(root["compute_environment"]) +
                       ": zerobench launches locally or under torchrun/srun (LOCAL_MACHINE)");
    if (!root.contains("distributed_type") || root["distributed_type"].is_null())
      throw UsageError("distributed_type is missing (accelerate refuses the file: \"A `distributed_type` must be "
                       "specified\")");
    const std::string dist = upper(text(root["distributed_type"]));
    if (dist == "FSDP" && root.contains("fsdp_config") && root["fsdp_config"].is_object())
      for (const char* k : {"fsdp_version", "version"})
        if (root["fsdp_config"].contains(k) && text(root["fsdp_config"][k]) == "2") fsdp2_file = true;
    top_level(dist);
    const std::string mp_file = file_mixed_precision();
    const bool mp_in_yaml = root.contains("mixed_precision") && !root["mixed_precision"].is_null();
    if (root.contains("num_processes") && !root["num_processes"].is_null())
      notes.apply("num_processes", text(root["num_processes"]), "world size " + std::to_string(req.world_size) +
                                                                     (req.given.count("--nproc") ? " (--nproc)" : ""));
    int ranks_per_node = 0;
    if (root.contains("num_processes") && root["num_processes"].is_number_integer()) {
      const int64_t np = root["num_processes"].get<int64_t>();
      const int64_t nm = root.contains("num_machines") && root["num_machines"].is_number_integer()
                             ? root["num_machines"].get<int64_t>() : 1;
      if (np > 0 && nm > 0 && np % nm == 0) ranks_per_node = int(np / nm);
    }
    if (dist == "FSDP") fsdp(mp_file, ranks_per_node);
    else if (dist == "DEEPSPEED") deepspeed(mp_file, mp_in_yaml);
    else if (dist == "MULTI_GPU" || dist == "MULTI_CPU" || dist == "NO") ddp(mp_file, dist);
    else
      throw UsageError("distributed_type " + text(root["distributed_type"]) +
                       ": zerobench runs FSDP (fsdp), DEEPSPEED (zero3) and MULTI_GPU/MULTI_CPU/NO (ddp)");
  }

  void fsdp(const std::string& mp, int ranks_per_node) {
    auto block = backends::fsdp::read_fsdp_config(root.value("fsdp_config", json::object()), ranks_per_node);
    // accelerate's fsdp_version 2 is the fsdp2 backend (FSDP2, fully_shard), read by its own reader.
    if (block.fsdp_version == 2) return fsdp2(mp);
    notes.append(block.notes);
    out.backend = "fsdp";
    if (mp == "fp16" || mp == "fp8")
      throw UsageError("mixed_precision " + mp + ": " + mp + " is not implemented in zerobench (bf16 or no)");
    // accelerate >= 0.30 keeps the flat parameter in fp32 and computes in bf16: FSDP "mixed".
    out.precision = mp == "bf16" ? "mixed" : "fp32";
    notes.apply("distributed_type", "FSDP", "backend fsdp (FSDP1 semantics)");
    precision_note(mp);
    if (block.fsdp.activation_checkpointing) out.train.activation_checkpointing = true;
    out.options = backends::fsdp::to_json(block.fsdp);
  }

  // fsdp_version 2: backends/fsdp2/fsdp2_options.cpp reads the file as accelerate 1.15 does; here
  // its verdicts become the report's notes (top-level launcher keys are noted by top_level()).
  void fsdp2(const std::string& mp) {
    if (mp == "fp16" || mp == "fp8")
      throw UsageError("mixed_precision " + mp + ": " + mp + " is not implemented in zerobench (bf16 or no)");
    // The file again, bounded as load() read it (a JSON file is YAML too).
    const YAML::Node node = config::load_yaml_bounded(read_bytes(req.path, req.flag), "");
    const auto cfg = backends::fsdp2::read_accelerate_fsdp2_config(node, "");
    out.backend = "fsdp2";
    out.precision = mp == "bf16" ? "mixed" : "fp32";
    notes.apply("distributed_type", "FSDP", "backend fsdp2 (FSDP2 fully_shard semantics)");
    precision_note(mp);
    std::map<std::string, std::string> ignored;  // launcher key name -> reason
    for (const auto& k : cfg.ignored) ignored[k.key] = k.reason;
    const auto& o = cfg.fsdp2;
    for (const auto& [k, v] : root["fsdp_config"].items()) {
      const std::string name = k.rfind("fsdp", 0) == 0 ? k : "fsdp_" + k;
      const std::string key = "fsdp_config." + k, value = text(v);
      if (ignored.count(name)) {
        notes.ignore(key, value, ignored.at(name));
        continue;
      }
      std::string as = "fsdp2 option (config.backend.options)";
      if (name == "fsdp_version") as = "backend fsdp2";
      else if (name == "fsdp_reshard_after_forward") as = "reshard_after_forward " + backends::fsdp2::reshard_after_forward_text(o.reshard_after_forward);
      else if (name == "fsdp_auto_wrap_policy") as = "auto_wrap_policy " + o.auto_wrap_policy;
      else if (name == "fsdp_activation_checkpointing")
        as = std::string("train.activation_checkpointing ") + (o.activation_checkpointing ? "true" : "false");
      else if (name == "fsdp_cpu_ram_efficient_loading")
        as = std::string("cpu_ram_efficient_loading ") + (o.cpu_ram_efficient_loading ? "true" : "false");
      else if (name == "fsdp_offload_params") as = "offload_params false";
      else if (name == "fsdp_activation_checkpointing_offload") as = "activation checkpointing offload off";
      notes.apply(key, value, as);
    }
    if (root.contains("parallelism_config")) {
      for (const auto& k : cfg.ignored)
        if (k.key.rfind("parallelism_config.", 0) == 0) notes.ignore(k.key, k.value, k.reason);
      notes.apply("parallelism_config", root["parallelism_config"].dump(),
                  "dp_replicate_size " + std::to_string(o.dp_replicate_size) + ", dp_shard_size " +
                      std::to_string(o.dp_shard_size) + " (0: world size / the other)");
    }
    for (const auto& w : cfg.warnings) notes.warn(w);
    if (o.activation_checkpointing) out.train.activation_checkpointing = true;
    out.options = backends::fsdp2::to_json(o);
  }

  void ddp(const std::string& mp, const std::string& dist) {
    out.backend = "ddp";
    if (mp == "fp16" || mp == "fp8")
      throw UsageError("mixed_precision " + mp + ": " + mp + " is not implemented in zerobench (bf16 or no)");
    // accelerate's native AMP: fp32 weights, bf16 autocast compute: ddp "mixed".
    out.precision = mp == "bf16" ? "mixed" : "fp32";
    out.options = json::object();
    notes.apply("distributed_type", dist, "backend ddp (DistributedDataParallel, bucket_cap_mb 25 as accelerate's default)");
    precision_note(mp);
  }

  void deepspeed(const std::string& mp_file, bool mp_in_yaml) {
    json block = root.value("deepspeed_config", json::object());
    if (block.is_null()) block = json::object();
    if (!block.is_object()) throw UsageError("deepspeed_config " + block.dump() + " is not a mapping");
    json file_json;
    const json* file_ptr = nullptr;
    if (block.contains("deepspeed_config_file") && !block["deepspeed_config_file"].is_null() &&
        text(block["deepspeed_config_file"]) != "none") {
      // accelerate exports the path as written (ACCELERATE_DEEPSPEED_CONFIG_FILE) and HfDeepSpeedConfig
      // opens it from the training process's working directory: a relative path is relative to
      // where the run starts, not to the YAML.
      std::string path = text(block["deepspeed_config_file"]);
      std::string resolved = path;
      if (!path.empty() && path[0] != '/') {
        char cwd[4096];
        resolved = std::string(getcwd(cwd, sizeof(cwd)) ? cwd : ".") + "/" + path;
      }
      std::ifstream probe(resolved);
      if (!probe)
        throw UsageError("deepspeed_config.deepspeed_config_file " + path + ": no such file " + resolved +
                         " (accelerate opens it relative to the working directory)");
      const auto bytes = read_bytes(resolved, "deepspeed_config_file");
      file_json = parse_json(bytes, "deepspeed_config_file " + path + ": ");
      out.provenance.sources.push_back({resolved, sha256_hex(bytes), "deepspeed"});
      file_ptr = &file_json;
      notes.apply("deepspeed_config.deepspeed_config_file", path, "read " + resolved);
    }
    // accelerate launch's flags override the YAML's plugin fields.
    for (const auto& [field, flag] : {std::pair<const char*, const char*>{"gradient_accumulation_steps", "--grad-accum"},
                                      {"gradient_clipping", "--grad-clip"}})
      if (!file_ptr && block.contains(field) && req.given.count(flag)) {
        notes.apply(std::string("deepspeed_config.") + field, text(block[field]), std::string("overridden by ") + flag);
        block.erase(field);
      }
    std::string mp = mp_file;
    if (req.precision_given) mp = req.precision == "bf16" ? "bf16" : "no";
    const auto ds = backends::zero3::deepspeed_config_from_accelerate(block, file_ptr, mp, mp_in_yaml && !req.precision_given,
                                                                      notes);
    deepspeed_json(ds, backends::zero3::AutoFill::kAccelerate);
    notes.apply("distributed_type", "DEEPSPEED", "backend zero3 (DeepSpeed ZeRO stage 3 semantics)");
    precision_note(mp);
  }

  // mixed_precision: what the run's precision became (the flag, when given, as accelerate
  // launch's --mixed_precision overrides the file).
  void precision_note(const std::string& mp) {
    if (!root.contains("mixed_precision") && !root.contains("fp16")) return;
    const std::string key = root.contains("mixed_precision") ? "mixed_precision" : "fp16";
    notes.apply(key, text(root[key]), "precision " + (req.precision_given ? req.precision + " (--precision)" : out.precision) +
                                          " (accelerate mixed_precision " + mp + ")");
  }

  void deepspeed_json(const json& ds, backends::zero3::AutoFill mode) { read_deepspeed(ds, mode, req, out, notes); }

  static void read_deepspeed(const json& ds, backends::zero3::AutoFill mode, const ConfigRequest& req,
                             ResolvedConfig& out, backends::ConfigNotes& notes) {
    backends::zero3::TrainerArgs args;
    args.train = req.train;
    args.given = req.given;
    args.precision = req.precision_given ? req.precision : "";
    args.world_size = req.world_size;
    args.hidden = req.hidden;
    auto cfg = backends::zero3::read_deepspeed_json(ds, args, mode);
    notes.append(cfg.notes);
    out.backend = "zero3";
    out.precision = cfg.precision;
    out.train = cfg.train;
    out.options = backends::zero3::to_json(cfg.zero);
  }
};

struct Loaded {
  std::string bytes;
  json root;
  bool accelerate = false;
};

Loaded load(const std::string& path, const std::string& flag) {
  Loaded d;
  d.bytes = read_bytes(path, flag);
  const std::string where = flag + " " + path + ": ";
  auto first = d.bytes.find_first_not_of(" \t\r\n");
  const bool looks_json = (first != std::string::npos && d.bytes[first] == '{') ||
                          (path.size() > 5 && path.substr(path.size() - 5) == ".json");
  if (looks_json) {
    d.root = parse_json(d.bytes, where);
  } else {
    YAML::Node node;
    try {
      node = YAML::Load(d.bytes);  // the byte cap is read_bytes'; aliases stay shared here
    } catch (const YAML::Exception& e) {
      throw UsageError(where + "not valid YAML: " + e.what());
    }
    d.root = yaml_to_json(node, where);
  }
  if (!d.root.is_object()) throw UsageError(where + "expected a mapping of settings");
  // accelerate's configs name a distributed_type (or at least its launch settings); DeepSpeed's do not.
  for (const char* k : {"distributed_type", "compute_environment", "num_processes", "fsdp_config", "deepspeed_config"})
    if (d.root.contains(k)) d.accelerate = true;
  if (!looks_json) d.accelerate = true;  // YAML is accelerate's format; DeepSpeed reads JSON
  return d;
}

// A value of the wrong type or range deep in a reader (nlohmann's type_error / out_of_range, a
// yaml-cpp conversion, std::stoi) is the file's fault: exit 2 naming the file, never exit 1.
template <class F>
auto file_fault_is_usage(const std::string& where, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const json::exception& e) {
    throw UsageError(where + "a value of the wrong type or out of range (" + e.what() + ")");
  } catch (const YAML::Exception& e) {
    throw UsageError(where + "a value of the wrong type (" + e.what() + ")");
  } catch (const std::invalid_argument& e) {
    throw UsageError(where + "a value that is not a number (" + e.what() + ")");
  } catch (const std::out_of_range& e) {
    throw UsageError(where + "a number out of range (" + e.what() + ")");
  }
}

// The file read and resolved into `out` (resolve_config adds the file to every message).
void resolve_into(const ConfigRequest& req, ResolvedConfig& out) {
  const auto d = load(req.path, req.flag);
  out.provenance.sources.push_back({req.path, sha256_hex(d.bytes), d.accelerate ? "accelerate" : "deepspeed"});
  if (req.flag == "--deepspeed-config" && d.accelerate)
    throw UsageError("this is an accelerate config, not a DeepSpeed JSON (use --config)");
  if (req.flag == "--accelerate-config" && !d.accelerate)
    throw UsageError("this is a DeepSpeed JSON, not an accelerate config (use --config)");
  if (d.accelerate) {
    Accelerate a{d.root, req, out, out.provenance.notes};
    a.resolve();
  } else {
    Accelerate::read_deepspeed(d.root, backends::zero3::AutoFill::kHfTrainer, req, out, out.provenance.notes);
  }
  // --backend fsdp names FSDP, which an accelerate file runs as version 1 or 2.
  if (req.backend_given && req.backend != out.backend && !(req.backend == "fsdp" && out.backend == "fsdp2"))
    throw UsageError("--backend " + req.backend + " conflicts with the file, which configures " + out.backend);
}
}  // namespace

std::string file_sha256(const std::string& path) { return sha256_hex(read_bytes(path, "config")); }

nlohmann::json provenance_json(const ConfigProvenance& p) {
  json sources = json::array();
  for (const auto& s : p.sources) sources.push_back({{"path", s.path}, {"sha256", s.sha256}, {"kind", s.kind}});
  return {{"source_files", sources},
          {"applied", backends::applied_json(p.notes.applied)},
          {"ignored", backends::ignored_json(p.notes.ignored)},
          {"warnings", p.notes.warnings}};
}

int config_num_processes(const std::string& path, const std::string& flag, bool nproc_given) {
  const auto d = [&] {
    try {
      return file_fault_is_usage(flag + " " + path + ": ", [&] { return load(path, flag); });
    } catch (const UsageError& e) {
      throw UsageError(config::clip_message(e.what()));
    }
  }();
  if (!d.accelerate || !d.root.contains("num_processes") || d.root["num_processes"].is_null()) return 0;
  const auto& v = d.root["num_processes"];
  if (!v.is_number_integer())
    throw UsageError(flag + " " + path + ": num_processes " + v.dump() + " is not an integer");
  const int64_t n = v.get<int64_t>();
  if (n == -1 && !nproc_given)
    throw UsageError(flag + " " + path + ": num_processes -1: accelerate then needs --num_processes; pass --nproc");
  if (n < -1 || n == 0 || n > (1 << 20))
    throw UsageError(flag + " " + path + ": num_processes " + std::to_string(n) + " is not a positive count");
  return n > 0 ? int(n) : 0;
}

nlohmann::json read_config_tree(const std::string& path, const std::string& flag, bool* accelerate) {
  try {
    auto d = file_fault_is_usage(flag + " " + path + ": ", [&] { return load(path, flag); });
    if (accelerate) *accelerate = d.accelerate;
    return std::move(d.root);
  } catch (const UsageError& e) {
    throw UsageError(config::clip_message(e.what()));
  }
}

ResolvedConfig resolve_config(const ConfigRequest& req) {
  const std::string where = req.flag + " " + req.path + ": ";
  ResolvedConfig out;
  out.train = req.train;
  try {
    file_fault_is_usage(where, [&] { resolve_into(req, out); });
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    throw UsageError(config::clip_message(msg.rfind(req.flag, 0) == 0 ? msg : where + msg));
  }
  return out;
}


}  // namespace zb::bench
