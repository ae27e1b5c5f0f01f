// translate.cpp — a source config's raw keys -> the concepts the guide maps (sharding, precision,
// offload, prefetch, granularity, loading, checkpointing) -> the target file, and the mapping
// table with one entry per source leaf key (see translate.hpp). Values are read raw, so a file
// zerobench refuses to run (offload, ZeRO-1/2, fp16, ZeRO++) still translates; whether zerobench
// runs the source and the target is asked of `zerobench run --config`'s own resolution.
#include "bench/translate/translate.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "bench/run/config_resolve.hpp"
#include "bench/run/run_options.hpp"
#include "bench/translate/mapping.hpp"
#include "config/deepspeed_zero_config.hpp"
#include "runtime/errors.hpp"

namespace zb::bench::translate {

namespace {
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}
template <class J>
std::string text(const J& v) {
  if (v.is_string()) return v.template get<std::string>();
  if (v.is_null()) return "null";
  return v.dump();
}
// accelerate's str_to_bool spellings (utils/environment.py), YAML/JSON booleans, numbers.
bool truthy(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) {
    const auto s = upper(v.get<std::string>());
    return s == "Y" || s == "YES" || s == "T" || s == "TRUE" || s == "ON" || s == "1";
  }
  return false;
}
// An integer value (JSON number, "5e8"-style lax int, numeric string); `fallback` otherwise.
int64_t as_int(const json& v, int64_t fallback) {
  if (v.is_number()) return int64_t(v.get<double>());
  if (v.is_string()) try {
      size_t pos = 0;
      const double d = std::stod(v.get<std::string>(), &pos);
      if (pos == v.get<std::string>().size()) return int64_t(d);
    } catch (const std::exception&) {
    }
  return fallback;
}
const json& at(const json& j, const std::string& key) {
  static const json null;
  return j.is_object() && j.contains(key) ? j[key] : null;
}

// What the guide maps, as the source sets it.
struct Concepts {
  int stage = 3;
  int hpz = 0;                       // ZeRO++ hpZ / FSDP2 reshard-to-N / HYBRID_SHARD ranks per node
  std::string strategy = "FULL_SHARD";  // the FSDP sharding strategy (FSDP sources)
  std::string precision = "no";      // bf16 | fp16 | fp8 | no | auto
  bool offload_param = false, offload_optimizer = false;
  bool prefetch = true, forward_prefetch = true;
  int full_state_dict = -1;          // -1 unset, 0 sharded, 1 full
  bool efficient_loading = true;
  json num_processes;
};

// What a source configures: accelerate FSDP version 1 or 2, DeepSpeed (a JSON, or accelerate's
// DEEPSPEED plugin), or accelerate's plain data parallel (MULTI_GPU/MULTI_CPU/NO).
enum class Format { kFsdp1, kFsdp2, kDeepSpeed, kDataParallel };

// What zerobench calls a format in `--to` and `source_kind`: DeepSpeed by its own name, an
// accelerate format by the backend that runs such a file (BackendInfo::config.claim, asked
// through bench/config_resolve), so that translate's names are the backends' names.
std::string format_name(Format f) {
  if (f == Format::kDeepSpeed) return "deepspeed";
  backends::ConfigIdentity id;
  id.accelerate = true;
  id.distributed_type = f == Format::kDataParallel ? "MULTI_GPU" : "FSDP";
  id.fsdp_version = f == Format::kFsdp1 ? 1 : f == Format::kFsdp2 ? 2 : 0;
  const std::string name = claiming_backend(id);
  if (name.empty()) throw UsageError("translate: no registered backend runs accelerate " + id.distributed_type + " files");
  return name;
}

// accelerate's fsdp_config keys, with the prefix accelerate adds to a bare key (commands/config/
// fsdp.py writes fsdp_*; utils/dataclasses.py FullyShardedDataParallelPlugin reads both).
std::string fsdp_key(const std::string& k) {
  static const std::string prefix = "fsdp_";
  return k.compare(0, prefix.size() - 1, prefix, 0, prefix.size() - 1) == 0 ? k : prefix + k;
}

struct Source {
  std::string path, dist;  // dist: accelerate distributed_type
  Format format = Format::kDeepSpeed;
  json root;
  bool accelerate = false;
  json fsdp;    // fsdp_config with the fsdp_ prefix on every key
  json plugin;  // deepspeed_config
  json ds;      // the DeepSpeed JSON (the file itself, or the deepspeed_config_file it names); null if none
  std::vector<std::string> notes;
};

Source read_source(const std::string& path) {
  Source s;
  s.path = path;
  s.root = read_config_tree(path, "translate", &s.accelerate);
  if (!s.accelerate) {
    s.format = Format::kDeepSpeed;
    s.ds = s.root;
    return s;
  }
  const auto& dist = at(s.root, "distributed_type");
  if (dist.is_null()) throw UsageError("translate " + path + ": distributed_type is missing (accelerate refuses the file)");
  s.dist = upper(text(dist));
  if (s.dist == "FSDP") {
    s.fsdp = json::object();
    const auto& block = at(s.root, "fsdp_config");
    if (block.is_object())
      for (const auto& [k, v] : block.items()) s.fsdp[fsdp_key(k)] = v;
    s.format = text(at(s.fsdp, "fsdp_version")) == "2" ? Format::kFsdp2 : Format::kFsdp1;
  } else if (s.dist == "DEEPSPEED") {
    s.format = Format::kDeepSpeed;
    s.plugin = at(s.root, "deepspeed_config").is_object() ? at(s.root, "deepspeed_config") : json::object();
    const auto& file = at(s.plugin, "deepspeed_config_file");
    if (!file.is_null() && text(file) != "none") {
      // accelerate exports the path unchanged and HfDeepSpeedConfig opens it from the working
      // directory (utils/launch.py prepare_deepspeed_cmd_env), so a relative path is cwd's.
      std::string p = text(file);
      if (!p.empty() && p[0] != '/') {
        char cwd[4096];
        p = std::string(getcwd(cwd, sizeof(cwd)) ? cwd : ".") + "/" + p;
      }
      if (std::ifstream(p)) {
        s.ds = read_config_tree(p, "deepspeed_config_file");
      } else {
        s.notes.push_back("deepspeed_config_file " + text(file) + ": no such file " + p +
                          " (accelerate opens it relative to the working directory); its settings are NOT translated "
                          "- translate that JSON itself");
      }
    }
  } else if (s.dist == "MULTI_GPU" || s.dist == "MULTI_CPU" || s.dist == "NO") {
    s.format = Format::kDataParallel;
  } else {
    throw UsageError("translate " + path + ": distributed_type " + text(dist) +
                     " is not FSDP, DEEPSPEED or MULTI_GPU/MULTI_CPU/NO (nothing to translate)");
  }
  return s;
}

// FSDP strategy names by accelerate's 1-based numbers (utils/constants.py FSDP_SHARDING_STRATEGY).
std::string strategy_name(const json& v) {
  static const char* names[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
  const auto n = as_int(v, 0);
  if (n >= 1 && n <= 5) return names[n - 1];
  return upper(text(v));
}

Concepts fsdp_concepts(const Source& s) {
  Concepts c;
  const auto& f = s.fsdp;
  c.num_processes = at(s.root, "num_processes");
  const int64_t np = as_int(c.num_processes, 0), nm = as_int(at(s.root, "num_machines"), 1);
  const bool v2 = s.format == Format::kFsdp2;
  if (f.contains("fsdp_sharding_strategy")) {
    c.strategy = strategy_name(f["fsdp_sharding_strategy"]);
  } else if (f.contains("fsdp_reshard_after_forward")) {
    const auto& r = f["fsdp_reshard_after_forward"];
    if (!v2) c.strategy = strategy_name(r);
    else if (r.is_number_integer() && r.get<int64_t>() > 1) c.strategy = "HYBRID_SHARD", c.hpz = int(r.get<int64_t>());
    else c.strategy = truthy(r) ? "FULL_SHARD" : "SHARD_GRAD_OP";
  }
  if (c.strategy == "FULL_SHARD") c.stage = 3;
  else if (c.strategy == "SHARD_GRAD_OP" || c.strategy == "HYBRID_SHARD_ZERO2") c.stage = 2;
  else if (c.strategy == "NO_SHARD") c.stage = 0;
  else if (c.strategy == "HYBRID_SHARD") {
    c.stage = 3;
    if (c.hpz == 0 && np > 0 && nm > 0 && np % nm == 0 && nm > 1) c.hpz = int(np / nm);
  }
  const json mp = at(s.root, "mixed_precision");
  c.precision = mp.is_null() ? (truthy(at(s.root, "fp16")) ? "fp16" : "no") : text(mp);
  c.offload_param = c.offload_optimizer = truthy(at(f, "fsdp_offload_params"));
  if (v2) {
    c.prefetch = c.forward_prefetch = true;  // FSDP2's implicit one-group prefetch
  } else {
    const std::string bp = upper(text(at(f, "fsdp_backward_prefetch")));
    c.prefetch = bp == "BACKWARD_PRE" || bp == "BACKWARD_POST" || bp == "1" || bp == "2";
    c.forward_prefetch = truthy(at(f, "fsdp_forward_prefetch"));
    c.prefetch = c.prefetch || c.forward_prefetch;
  }
  if (f.contains("fsdp_state_dict_type")) c.full_state_dict = upper(text(f["fsdp_state_dict_type"])) == "FULL_STATE_DICT";
  return c;
}

std::string device_of(const json& v) {
  if (v.is_object()) return text(at(v, "device"));
  return v.is_null() ? "none" : text(v);
}

Concepts deepspeed_concepts(const Source& s) {
  Concepts c;
  c.num_processes = at(s.root, "num_processes");
  const json& ds = s.ds;
  const json& zo = at(ds, "zero_optimization");
  const bool has_file = !ds.is_null();
  // Stage: the JSON's (DeepSpeed default 0), else the plugin's zero_stage (accelerate default 2).
  c.stage = has_file ? int(as_int(at(zo, "stage"), 0)) : int(as_int(at(s.plugin, "zero_stage"), 2));
  c.hpz = int(as_int(at(zo, "zero_hpz_partition_size"), 1));
  if (c.hpz <= 1) c.hpz = 0;
  c.strategy = c.stage == 3 ? (c.hpz ? "HYBRID_SHARD" : "FULL_SHARD") : c.stage == 0 ? "NO_SHARD" : "SHARD_GRAD_OP";
  // Precision: the JSON's bf16 / fp16 sections ("auto": the script decides), else the YAML's mixed_precision.
  const json& bf = at(ds, "bf16").is_null() ? at(ds, "bfloat16") : at(ds, "bf16");
  const json& bfe = at(bf, "enabled");
  const json& fpe = at(at(ds, "fp16"), "enabled");
  const auto is_auto = [](const json& v) { return v.is_string() && v.get<std::string>() == "auto"; };
  const json& mp = at(s.root, "mixed_precision");
  if (!is_auto(bfe) && truthy(bfe)) c.precision = "bf16";
  else if (!is_auto(fpe) && truthy(fpe)) c.precision = "fp16";
  else if (!mp.is_null()) c.precision = text(mp);
  else if (is_auto(bfe) || is_auto(fpe)) c.precision = "auto";
  else c.precision = "no";
  // Offload.
  const auto off = [](const std::string& d) { return !d.empty() && d != "none" && d != "null" && d != "false"; };
  c.offload_param = off(device_of(at(zo, "offload_param"))) || truthy(at(zo, "cpu_offload_param")) ||
                    off(text(at(s.plugin, "offload_param_device")));
  c.offload_optimizer = off(device_of(at(zo, "offload_optimizer"))) || truthy(at(zo, "cpu_offload")) ||
                        off(text(at(s.plugin, "offload_optimizer_device")));
  // Prefetch: on unless the budget is 0 (partitioned_param_coordinator.py fetch_sub_module).
  json pf = at(zo, config::zero_keys::kPrefetchBucketSize);
  if (pf.is_null()) pf = at(zo, "prefetch_bucket_size");
  c.prefetch = c.forward_prefetch = pf.is_null() || is_auto(pf) || as_int(pf, 1) > 0;
  // Checkpoint: gather 16-bit weights on save (any alias), or the plugin's zero3_save_16bit_model.
  for (const char* k : {"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                        "stage3_gather_fp16_weights_on_model_save"})
    if (zo.contains(k)) c.full_state_dict = !is_auto(zo[k]) && truthy(zo[k]);
  if (s.plugin.is_object() && s.plugin.contains("zero3_save_16bit_model"))
    c.full_state_dict = truthy(s.plugin["zero3_save_16bit_model"]);
  // Loading: zero3_init_flag, else transformers' zero.Init whenever stage 3 (the guide).
  c.efficient_loading = s.plugin.is_object() && s.plugin.contains("zero3_init_flag") ? truthy(s.plugin["zero3_init_flag"])
                                                                                     : c.stage == 3;
  return c;
}

Concepts ddp_concepts(const Source& s) {
  Concepts c;
  c.num_processes = at(s.root, "num_processes");
  c.stage = 0;
  c.strategy = "NO_SHARD";
  const json mp = at(s.root, "mixed_precision");
  c.precision = mp.is_null() ? (truthy(at(s.root, "fp16")) ? "fp16" : "no") : text(mp);
  c.prefetch = c.forward_prefetch = false;  // nothing to gather
  c.full_state_dict = 1;                    // DDP's state dict is the full model
  c.efficient_loading = false;              // DDP broadcasts rank 0's states at construction (sync_module_states)
  return c;
}

ojson build_deepspeed(const Source& s, const Concepts& c) {
  ojson ds = ojson::object();
  if (c.precision == "bf16") ds["bf16"]["enabled"] = true;
  else if (c.precision == "fp16") ds["fp16"]["enabled"] = true;
  else if (c.precision == "no") ds["bf16"]["enabled"] = false;
  ojson zo = ojson::object();
  zo["stage"] = c.stage;
  if (c.hpz > 1) zo["zero_hpz_partition_size"] = c.hpz;
  if (s.format != Format::kDataParallel || c.offload_param || c.offload_optimizer) {
    zo["offload_param"]["device"] = c.offload_param ? "cpu" : "none";
    zo["offload_optimizer"]["device"] = c.offload_optimizer ? "cpu" : "none";
  }
  if (s.format != Format::kDataParallel) {
    zo["overlap_comm"] = true;
    zo["reduce_bucket_size"] = "auto";
    zo[config::zero_keys::kPrefetchBucketSize] = c.prefetch ? ojson("auto") : ojson(0);
    zo["stage3_param_persistence_threshold"] = 0;
  }
  if (c.full_state_dict >= 0) zo["stage3_gather_16bit_weights_on_model_save"] = c.full_state_dict == 1;
  ds["zero_optimization"] = zo;
  for (const char* k : {"train_micro_batch_size_per_gpu", "train_batch_size", "gradient_accumulation_steps", "gradient_clipping"})
    ds[k] = "auto";
  return ds;
}

// Top-level accelerate keys that are not about the framework: carried into an FSDP config as is.
bool carried(const std::string& k) {
  static const std::set<std::string> framework = {"distributed_type", "mixed_precision", "fp16", "deepspeed_config",
                                                  "fsdp_config", "megatron_lm_config"};
  return !framework.count(k);
}

ojson build_fsdp(const Source& s, const Concepts& c, int version) {
  ojson y = ojson::object();
  y["distributed_type"] = "FSDP";
  if (c.precision != "auto") y["mixed_precision"] = c.precision;
  if (s.accelerate)
    for (const auto& [k, v] : s.root.items())
      if (carried(k)) y[k] = ojson::parse(v.dump());
  ojson f = ojson::object();
  f["fsdp_version"] = version;
  if (version == 1) {
    f["fsdp_sharding_strategy"] = c.strategy;
  } else {
    // to_fsdp2.py ARGUMENT_VALUE_MAPPING: FULL_SHARD/HYBRID_SHARD -> true, the others -> false. hpZ N
    // stays true: accelerate's FSDP2 plugin refuses an int (the hpZ row of the mapping says so).
    f["fsdp_reshard_after_forward"] = c.stage == 3;
  }
  f["fsdp_auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP";
  if (version == 1) {
    f["fsdp_backward_prefetch"] = c.prefetch ? "BACKWARD_PRE" : "NO_PREFETCH";
    f["fsdp_forward_prefetch"] = c.forward_prefetch;
  }
  f["fsdp_offload_params"] = c.offload_param || c.offload_optimizer;
  f["fsdp_state_dict_type"] = c.full_state_dict == 1 ? "FULL_STATE_DICT" : "SHARDED_STATE_DICT";
  f["fsdp_cpu_ram_efficient_loading"] = c.efficient_loading;
  if (version == 1) {
    f["fsdp_sync_module_states"] = true;
    f["fsdp_use_orig_params"] = true;
  }
  y["fsdp_config"] = f;
  return y;
}

// What `zerobench run --config FILE --model tiny` says of a file: "" if it resolves, else why not.
std::string run_refusal(const std::string& path) {
  try {
    RunOptions o;
    o.config = path;
    o.nproc = o.world_size_hint();
    (void)o.resolve();
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

// Target keys the current zerobench refuses to run, and why (docs/configs.md); `config` is the
// whole target (a key's refusal may depend on the ZeRO stage beside it).
std::string static_refusal(Target to, const std::string& key, const ojson& v, const ojson& config) {
  if (to == Target::kDeepSpeed) {
    (void)config;  // no refusal depends on the stage any more (stage 0 runs as zero0; stages 1/2 run offload and fp16)
    if (key.find("offload_") != std::string::npos && key.size() > 7 && key.substr(key.size() - 7) == ".device") {
      if (v == "nvme") return "NVMe offload is not implemented in zerobench (cpu offload is)";
      // cpu with stage 1/2: offload_optimizer runs (zero12_offload.cpp); offload_param is ignored, as DeepSpeed does.
    }
  } else {
    if (key == "mixed_precision" && v == "fp8") return "fp8 is not implemented in zerobench";
  }
  return "";
}

// One source leaf key: where it sits (scope) and its normalized name for the rule table.
struct SourceKey {
  std::string shown, normalized;
  Scope scope;
  json value;
};

std::vector<SourceKey> source_keys(const Source& s) {
  std::vector<SourceKey> out;
  auto value_at = [](const json& root, const std::string& dotted) {
    const json* cur = &root;
    size_t start = 0;
    while (true) {
      const auto dot = dotted.find('.', start);
      const auto part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!cur->is_object() || !cur->contains(part)) return json();
      cur = &(*cur)[part];
      if (dot == std::string::npos) return *cur;
      start = dot + 1;
    }
  };
  if (!s.accelerate) {
    for (const auto& k : leaf_keys(s.root)) out.push_back({k, canonical_ds_key(k), Scope::kDs, value_at(s.root, k)});
    return out;
  }
  for (const auto& k : leaf_keys(s.root)) {
    const auto top = k.substr(0, k.find('.'));
    const bool inside = k.size() > top.size();
    if (inside && top == "fsdp_config" && s.dist == "FSDP") {
      const auto sub = k.substr(top.size() + 1);
      out.push_back({k, fsdp_key(sub), Scope::kFsdp, value_at(s.root, k)});
    } else if (inside && top == "deepspeed_config" && s.dist == "DEEPSPEED") {
      out.push_back({k, k.substr(top.size() + 1), Scope::kPlugin, value_at(s.root, k)});
    } else {
      out.push_back({k, k, Scope::kTop, value_at(s.root, k)});
    }
  }
  if (!s.ds.is_null())
    for (const auto& k : leaf_keys(s.ds))
      out.push_back({"deepspeed_config_file:" + k, canonical_ds_key(k), Scope::kDs, value_at(s.ds, k)});
  return out;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    const auto c = s.find(',', start);
    out.push_back(s.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return out;
}

const ojson* target_at(const ojson& doc, const std::string& dotted) {
  const ojson* cur = &doc;
  size_t start = 0;
  while (true) {
    const auto dot = dotted.find('.', start);
    const auto part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!cur->is_object() || !cur->contains(part)) return nullptr;
    cur = &(*cur)[part];
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Value-dependent verdicts the static table cannot give (mapping.hpp: "refined here").
void refine(MappingEntry& e, const SourceKey& k, const Concepts& c, const Source& s, Target to) {
  const auto approx = [&](const std::string& why) {
    e.kind = Kind::kApproximate;
    e.reason = why + "; " + e.reason;
  };
  if (k.scope == Scope::kFsdp && (k.normalized == "fsdp_sharding_strategy" || k.normalized == "fsdp_reshard_after_forward")) {
    if (c.strategy == "HYBRID_SHARD" && c.hpz > 1) e.target_key += ",zero_optimization.zero_hpz_partition_size";
    if (c.strategy == "HYBRID_SHARD")
      approx(c.hpz > 1 ? "HYBRID_SHARD -> ZeRO++ hpZ (a secondary param copy per " + std::to_string(c.hpz) +
                             " ranks; grads and optimizer states stay sharded over all ranks)"
                       : "HYBRID_SHARD -> stage 3; hpZ needs ranks per node (num_processes/num_machines), which the file "
                         "does not give");
    else if (c.strategy == "HYBRID_SHARD_ZERO2") approx("HYBRID_SHARD_ZERO2 -> stage 2 (ZeRO++ hpZ is stage 3 only)");
    else if (s.format == Format::kFsdp2 && c.stage == 2) approx("FSDP2 reshard_after_forward false keeps params gathered from forward to backward, as SHARD_GRAD_OP");
  }
  if ((k.scope == Scope::kDs && k.normalized == "zero_optimization.stage") ||
      (k.scope == Scope::kPlugin && k.normalized == "zero_stage")) {
    if (c.stage == 1) approx("stage 1 shards optimizer states only; FSDP has no such strategy");
    else if (to == Target::kFsdp2 && c.stage != 3) approx("FSDP2 has no NO_SHARD/SHARD_GRAD_OP; false still shards at rest");
    else if (c.hpz > 1) approx("with ZeRO++ hpZ");
  }
  // A DDP source has no sharding key: its distributed_type is what gives stage 0.
  if (k.scope == Scope::kTop && k.normalized == "distributed_type" && to == Target::kDeepSpeed &&
      s.format == Format::kDataParallel) {
    e.target_key = "zero_optimization.stage";
    e.reason = s.dist + " (DDP) replicates params, grads and optimizer states -> stage 0 (the sharding table: NO_SHARD "
               "is ZeRO stage 0); a DeepSpeed JSON configures DeepSpeed by kind";
  }
  if (k.scope == Scope::kTop && k.normalized == "distributed_type" && to == Target::kFsdp2 && s.format == Format::kDataParallel)
    approx("FSDP2 has no NO_SHARD: reshard_after_forward false (to_fsdp2.py's NO_SHARD mapping) still shards at rest");
  if (k.scope == Scope::kTop && (k.normalized == "mixed_precision" || k.normalized == "fp16") && to == Target::kDeepSpeed) {
    if (c.precision == "fp8") {
      e.kind = Kind::kNoCounterpart;
      e.target_key.clear();
      e.reason = "fp8 (Transformer Engine / MS-AMP through accelerate) has no DeepSpeed JSON key";
    } else if (s.format == Format::kDataParallel) {
      e.reason = "DDP mixed (native AMP) keeps fp32 params; DeepSpeed bf16 keeps bf16 params + fp32 masters";
    }
  }
  const bool offload_key = e.target_key == "fsdp_config.fsdp_offload_params";
  if (offload_key && c.offload_param != c.offload_optimizer)
    approx("only the " + std::string(c.offload_param ? "params are" : "optimizer is") +
           " offloaded; FSDP offloads params, grads and optimizer together");
  if (offload_key && (text(k.value) == "nvme")) approx("nvme -> CPU: FSDP offloads to CPU memory only");
}
}  // namespace

Target parse_target(const std::string& to) {
  for (const Target t : {Target::kDeepSpeed, Target::kFsdp, Target::kFsdp2})
    if (to == to_string(t)) return t;
  throw UsageError("--to " + to + ": not " + to_string(Target::kDeepSpeed) + ", " + to_string(Target::kFsdp) + " or " +
                   to_string(Target::kFsdp2));
}

std::string to_string(Target t) {
  return format_name(t == Target::kDeepSpeed ? Format::kDeepSpeed : t == Target::kFsdp ? Format::kFsdp1 : Format::kFsdp2);
}

std::string to_string(Kind k) {
  switch (k) {
    case Kind::kMapped: return "mapped";
    case Kind::kApproximate: return "approximate";
    case Kind::kNoCounterpart: return "no counterpart";
    case Kind::kIgnored: return "ignored by zerobench already";
    case Kind::kAdded: return "added";
  }
  return "?";
}

std::vector<std::string> leaf_keys(const nlohmann::json& tree, const std::string& prefix) {
  std::vector<std::string> out;
  if (!tree.is_object() || tree.empty()) {
    if (!prefix.empty()) out.push_back(prefix);
    return out;
  }
  for (const auto& [k, v] : tree.items()) {
    auto sub = leaf_keys(v, prefix.empty() ? k : prefix + "." + k);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::string> unmapped_keys(const std::vector<MappingEntry>& mapping, const std::vector<std::string>& expected) {
  std::set<std::string> named;
  for (const auto& e : mapping)
    if (e.kind != Kind::kAdded) named.insert(e.source_key);
  std::vector<std::string> out;
  for (const auto& k : expected)
    if (!named.count(k)) out.push_back(k);
  return out;
}

Translation translate_file(const std::string& path, Target to) {
  const Source s = read_source(path);
  const bool fsdp_source = s.format == Format::kFsdp1 || s.format == Format::kFsdp2;
  if (fsdp_source && to != Target::kDeepSpeed)
    throw UsageError("--to " + to_string(to) + ": " + path + " is already an FSDP config (translate maps between FSDP and "
                     "DeepSpeed; accelerate to-fsdp2 converts FSDP1 to FSDP2)");
  if (s.format == Format::kDeepSpeed && to == Target::kDeepSpeed)
    throw UsageError("--to deepspeed: " + path + " is already a DeepSpeed config");
  Translation t;
  t.source_path = path;
  t.source_kind = format_name(s.format);
  t.target = to;
  t.notes = s.notes;
  const Concepts c = fsdp_source ? fsdp_concepts(s) : s.format == Format::kDataParallel ? ddp_concepts(s) : deepspeed_concepts(s);
  t.config = to == Target::kDeepSpeed ? build_deepspeed(s, c) : build_fsdp(s, c, to == Target::kFsdp ? 1 : 2);

  std::set<std::string> covered;  // target keys some source entry names
  for (const auto& k : source_keys(s)) {
    const Rule& r = find_rule(k.scope, k.normalized, to);
    MappingEntry e;
    e.source_key = k.shown;
    e.source_value = text(k.value);
    e.kind = r.kind;
    e.reason = r.reason;
    e.target_key = std::string(r.target) == "(same key)" ? k.shown : r.target;
    refine(e, k, c, s, to);
    std::vector<std::string> values;
    for (const auto& tk : split(e.target_key)) {
      if (tk.empty() || tk[0] == '(') continue;
      const ojson* v = target_at(t.config, tk);
      covered.insert(tk);
      values.push_back(v ? text(*v) : "(not written)");
      const auto why = v ? static_refusal(to, tk, *v, t.config) : "";
      if (!why.empty()) e.refused += (e.refused.empty() ? "" : "; ") + why;
    }
    for (size_t i = 0; i < values.size(); ++i) e.target_value += (i ? ", " : "") + values[i];
    t.mapping.push_back(e);
  }
  for (const auto& tk : leaf_keys(json::parse(t.config.dump()))) {
    if (covered.count(tk)) continue;
    bool under = false;  // a carried key's children are covered by the key itself
    for (const auto& cv : covered)
      if (tk.rfind(cv + ".", 0) == 0) under = true;
    if (under) continue;
    const ojson* v = target_at(t.config, tk);
    MappingEntry e;
    e.target_key = tk;
    e.target_value = v ? text(*v) : "";
    e.kind = Kind::kAdded;
    e.reason = added_reason(to, tk);
    if (v) e.refused = static_refusal(to, tk, *v, t.config);
    t.mapping.push_back(e);
  }
  t.source_refusal = run_refusal(path);
  // The target as `zerobench run --config` would read it, from a scratch file of the right kind.
  const std::string tmp = "/tmp/zb_translate_" + std::to_string(getpid()) + (to == Target::kDeepSpeed ? ".json" : ".yaml");
  {
    std::ofstream(tmp) << render_config(t);
  }
  t.target_refusal = run_refusal(tmp);
  std::remove(tmp.c_str());
  for (size_t at_pos; (at_pos = t.target_refusal.find(tmp)) != std::string::npos;)
    t.target_refusal.replace(at_pos, tmp.size(), "(the translation)");
  return t;
}

}  // namespace zb::bench::translate
