// accelerate_config.cpp — the top level of an accelerate config (see accelerate_config.hpp;
// docs/configs.md tables every key).
#include "config/accelerate_config.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "runtime/errors.hpp"

namespace zb::config {

namespace {
using json = nlohmann::json;

std::string text(const json& v) { return scalar_text(v); }
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
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

// accelerate's mixed_precision in the file, else the old fp16 key, else "no".
std::string file_mixed_precision(const json& root) {
  if (root.contains("mixed_precision") && !root["mixed_precision"].is_null()) {
    const auto& v = root["mixed_precision"];
    if (v.is_boolean())  // launch.py then calls args.mixed_precision.lower() on a bool (AttributeError)
      throw UsageError("mixed_precision " + text(v) + ": YAML reads an unquoted no/yes as a boolean, which "
                       "accelerate cannot use; write 'no' or 'bf16', or give --precision (accelerate launch "
                       "--mixed_precision, which never reads the file's value)");
    const auto mp = lower(text(v));
    if (mp != "no" && mp != "fp16" && mp != "bf16" && mp != "fp8")
      throw UsageError("mixed_precision '" + text(v) + "' is not no, fp16, bf16 or fp8");
    return mp;
  }
  if (root.contains("fp16") && root["fp16"].is_boolean() && root["fp16"].get<bool>()) return "fp16";  // old key
  return "no";
}

void top_level(const json& root, const std::string& dist, bool fsdp2_file, ConfigNotes& notes) {
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
      if (v.is_object() && v.contains("ipex") && accelerate_bool("ipex_config.ipex", v["ipex"]))
        throw UsageError("ipex_config.ipex true: Intel Extension for PyTorch is not used by zerobench");
      notes.ignore(k, v.dump(), "IPEX off");
    } else if (k == "parallelism_config" && fsdp2_file) {
      // read with fsdp_version 2 (config/accelerate_fsdp2.cpp): dp_replicate_size / dp_shard_size are
      // FSDP2's HSDP mesh
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
}  // namespace

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "null";
  return v.dump();
}

bool accelerate_bool(const std::string& key, const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  const std::string s = upper(scalar_text(v));
  if (s == "Y" || s == "YES" || s == "T" || s == "TRUE" || s == "ON" || s == "1") return true;
  if (s == "N" || s == "NO" || s == "F" || s == "FALSE" || s == "OFF" || s == "0") return false;
  throw UsageError(key + " '" + scalar_text(v) + "' is not a boolean (accelerate's str_to_bool)");
}

AccelerateLaunch read_accelerate_launch(const json& root, int world_size, bool nproc_given, ConfigNotes& notes,
                                        bool precision_given) {
  if (!root.is_object()) throw UsageError("an accelerate config must be a mapping");
  if (root.contains("compute_environment") && upper(text(root["compute_environment"])) != "LOCAL_MACHINE")
    throw UsageError("compute_environment " + text(root["compute_environment"]) +
                     ": zerobench launches locally or under torchrun/srun (LOCAL_MACHINE)");
  if (!root.contains("distributed_type") || root["distributed_type"].is_null())
    throw UsageError("distributed_type is missing (accelerate refuses the file: \"A `distributed_type` must be "
                     "specified\")");
  AccelerateLaunch l;
  l.distributed_type = upper(text(root["distributed_type"]));
  if (l.distributed_type == "FSDP") {
    l.fsdp_version = 1;
    if (root.contains("fsdp_config") && root["fsdp_config"].is_object())
      for (const char* k : {"fsdp_version", "version"})
        if (root["fsdp_config"].contains(k) && text(root["fsdp_config"][k]) == "2") l.fsdp_version = 2;
  }
  top_level(root, l.distributed_type, l.fsdp_version == 2, notes);
  // accelerate launch's `if not args.mixed_precision` reads the file's value only without the flag.
  if (precision_given && root.contains("mixed_precision") && root["mixed_precision"].is_boolean()) {
    l.mixed_precision_unread = true;
    notes.ignore("mixed_precision", text(root["mixed_precision"]),
                 "a YAML boolean (an unquoted no/yes) accelerate cannot use; --precision decides, as accelerate launch "
                 "--mixed_precision does without reading the file's value");
  } else {
    l.mixed_precision = file_mixed_precision(root);
    l.mixed_precision_in_file = root.contains("mixed_precision") && !root["mixed_precision"].is_null();
  }
  if (root.contains("num_processes") && !root["num_processes"].is_null())
    notes.apply("num_processes", text(root["num_processes"]),
                "world size " + std::to_string(world_size) + (nproc_given ? " (--nproc)" : ""));
  // Ranks per node as accelerate launch computes torchrun's --nproc_per_node: num_processes //
  // num_machines, where --num_processes (zerobench: --nproc) replaces the file's num_processes.
  if (nproc_given || (root.contains("num_processes") && root["num_processes"].is_number_integer())) {
    const int64_t np = nproc_given ? world_size : root["num_processes"].get<int64_t>();
    const int64_t nm = root.contains("num_machines") && root["num_machines"].is_number_integer()
                           ? root["num_machines"].get<int64_t>() : 1;
    if (np > 0 && nm > 0 && np % nm == 0) l.ranks_per_node = int(np / nm);
  }
  return l;
}

void note_mixed_precision(const json& root, const std::string& precision_as, const std::string& mixed_precision,
                          ConfigNotes& notes) {
  if (!root.contains("mixed_precision") && !root.contains("fp16")) return;
  if (root.contains("mixed_precision") && root["mixed_precision"].is_boolean()) return;  // noted as ignored
  const std::string key = root.contains("mixed_precision") ? "mixed_precision" : "fp16";
  notes.apply(key, text(root[key]), "precision " + precision_as + " (accelerate mixed_precision " + mixed_precision + ")");
}

}  // namespace zb::config
