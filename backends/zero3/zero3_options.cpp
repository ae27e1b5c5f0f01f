// zero3_options.cpp — DeepSpeed option names, JSON round trip, the DeepSpeed config readers
// (see zero3_options.hpp; docs/configs.md has the key-by-key table this file implements).
#include "backends/zero3/zero3_options.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>

#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

namespace {
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
int64_t as_count(const std::string& key, const json& v, int64_t min = 0) {
  double d = 0;
  if (v.is_number()) {
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
  if (d > 9.2e18) throw UsageError(key + " " + text(v) + " is too large");
  return int64_t(d);
}

// pydantic's lax bool.
bool as_bool(const std::string& key, const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) return v.get<int64_t>() == 1;
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

// DeepSpeed's DtypeEnum names (runtime/config.py).
std::string dtype_enum(const std::string& key, const json& v) {
  const auto s = text(v);
  if (s == "torch.bfloat16" || s == "bf16" || s == "bfloat16") return "bf16";
  if (s == "torch.float32" || s == "fp32" || s == "float32" || s == "float") return "fp32";
  if (s == "torch.float16" || s == "fp16" || s == "float16" || s == "half")
    throw UsageError(key + " " + s + ": fp16 is not implemented in zerobench (bf16 or fp32)");
  throw UsageError(key + " '" + s + "' is not a DeepSpeed dtype name");
}

void check_dtype(const std::string& key, const std::string& v) {
  if (!v.empty() && v != "bf16" && v != "fp32") throw UsageError(key + " '" + v + "' is not supported (bf16 or fp32)");
}

// config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS / _REMOVED_ZERO_CONFIG_KEYS: DeepSpeed 0.19.8 refuses them.
const std::set<std::string> kRemovedTopLevel = {
    "nebula",          "compression_training", "amp",     "quantize_training",   "sparse_gradients",
    "eigenvalue",      "sparse_attention",     "elasticity", "graph_harvesting", "curriculum_learning",
    "progressive_layer_drop"};
const std::set<std::string> kRemovedZero = {"mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param"};

// DeepSpeedZeroConfig's alias= names: file spelling -> pydantic field name (populate_by_name
// accepts both).
const std::map<std::string, std::string> kZeroAliases = {
    {"stage3_prefetch_bucket_size", "prefetch_bucket_size"},
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
    {"cpu_offload_use_pin_memory", "pinned host memory for offload; offload is off"},
    {"memory_efficient_linear", "DeepSpeed's linear autograd function saves the same tensors as at::linear (input "
                                "and weight)"},
    {"override_module_apply", "wraps nn.Module.apply at model construction"},
    {"log_trace_cache_warnings", "logging"},
    {"enable_sanity_checks", "debug assertions"},
    {"pipeline_loading_checkpoint", "checkpoint loading under pipeline parallelism"},
    {"save_muon_momentum_buffer_in_memory", "Muon optimizer with NVMe offload only"},
    {"compute_grad_norm", "ZeRO 1/2 switch; stage 3 always computes the global norm"},
};

// Top-level keys that do not change what a stage-3 training step does.
const std::map<std::string, std::string> kTopIgnored = {
    {"steps_per_print", "logging"},
    {"wall_clock_breakdown", "timing logs"},
    {"memory_breakdown", "memory logs"},
    {"dump_state", "prints the config"},
    {"disable_python_gc", "Python garbage-collector pacing; zerobench has no Python"},
    {"zero_allow_untested_optimizer", "lets DeepSpeed accept a client optimizer; zerobench's AdamW is fixed"},
    {"zero_force_ds_cpu_optimizer", "chooses DeepSpeedCPUAdam under optimizer offload; offload is off"},
    {"flops_profiler", "profiler output"},
    {"tensorboard", "monitoring"},
    {"wandb", "monitoring"},
    {"csv_monitor", "monitoring"},
    {"comet", "monitoring"},
    {"comms_logger", "communication logging"},
    {"timers", "timing logs"},
    {"checkpoint", "checkpoint options; zerobench writes no checkpoint"},
    {"datastates", "checkpoint engine"},
    {"log_level", "logging"},
    {"dataloader_drop_last", "DeepSpeed's own dataloader; zerobench generates its batches"},
    {"aio", "NVMe offload I/O; offload is off"},
    {"autotuning", "read by DeepSpeed's autotuner launcher, not by training"},
    {"activation_checkpointing", "configures deepspeed.checkpointing.checkpoint, which HF models do not call "
                                 "(use --activation-checkpointing)"},
    {"pipeline", "PipelineEngine only"},
    {"vocabulary_size", "a tensor-core alignment warning only"},
    {"seq_parallel_communication_data_type", "sequence parallelism is off"},
    {"use_data_before_expert_parallel_", "expert parallelism is off"},
    {"disable_allgather", "ZeRO 1/2 only"},
    {"managed_gradient_accumulation", "engine bookkeeping of accumulation boundaries; zerobench's trainer marks "
                                      "the last micro-batch of each step, as the engine does"},
    {"prescale_gradients", "off"},
};

struct Resolver {
  const TrainerArgs& args;
  AutoFill mode;
  ConfigNotes& notes;

  // An explicit value that differs from a flag the command line gave: HF's fill_match refuses it;
  // accelerate keeps the file's value.
  void explicit_vs_flag(const std::string& key, const std::string& file_value, const std::string& flag,
                        const std::string& flag_value, bool equal) {
    if (equal || !args.given_flag(flag)) return;
    if (mode == AutoFill::kHfTrainer)
      throw UsageError(key + " " + file_value + " in the file but " + flag + " " + flag_value +
                       ": transformers refuses the mismatch (HfTrainerDeepSpeedConfig.fill_match); set the key to "
                       "\"auto\" or drop the flag");
    notes.warn(key + " " + file_value + " from the file is used, not " + flag + " " + flag_value +
               " (accelerate keeps the DeepSpeed file's value: deepspeed_config_process(must_match=False))");
  }
};

void read_precision(const json& root, const TrainerArgs& args, AutoFill mode, DeepSpeedConfig& c, Resolver& r) {
  auto& notes = c.notes;
  // get_bfloat16_config: "bf16", else the old "bfloat16" name.
  const char* bf16_key = root.contains("bf16") ? "bf16" : root.contains("bfloat16") ? "bfloat16" : nullptr;
  if (root.contains("bf16") && root.contains("bfloat16"))
    notes.ignore("bfloat16", root["bfloat16"].dump(), "DeepSpeed reads the bf16 section when both are present");
  bool bf16 = false, bf16_from_file = false;
  if (bf16_key) {
    const auto& b = root[bf16_key];
    if (!b.is_object()) throw UsageError(std::string(bf16_key) + " " + b.dump() + " is not a section");
    for (const auto& [k, v] : b.items()) {
      const std::string key = std::string(bf16_key) + "." + k;
      if (k == "enabled") {
        if (is_auto(v)) {
          bf16 = mode == AutoFill::kHfTrainer ? args.precision == "bf16" : false;
          notes.apply(key, "auto", std::string("precision ") + (bf16 ? "bf16" : "fp32") +
                                       (mode == AutoFill::kHfTrainer ? " (--precision, as HF's args.bf16)"
                                                                     : " (accelerate's mixed_precision)"));
        } else {
          bf16 = as_bool(key, v);
          bf16_from_file = true;
          notes.apply(key, text(v), std::string("precision ") + (bf16 ? "bf16" : "fp32"));
        }
      } else if (k == "bf16_master_weights_and_grads" || k == "bf16_optimizer_states") {
        if (as_bool(key, v)) throw UsageError(key + " true: bf16 master weights/optimizer states are not implemented");
        notes.ignore(key, text(v), "off (DeepSpeed's default)");
      } else if (k == "immediate_grad_update") {
        notes.ignore(key, text(v), "BF16_Optimizer (ZeRO 0/1) setting; stage 3 ignores it");
      } else if (k == "check_grad_overflow" || k == "check_overflow") {
        notes.ignore(key, text(v),
                     "a step whose gradients overflow is skipped by DeepSpeed; zerobench ends such a run as diverged");
      } else {
        throw UsageError(key + ": unknown bf16 setting (DeepSpeedBF16Config forbids extra keys)");
      }
    }
  }
  if (root.contains("fp16")) {
    const auto& f = root["fp16"];
    if (!f.is_object()) throw UsageError("fp16 " + f.dump() + " is not a section");
    bool fp16 = false;
    if (f.contains("enabled")) {
      const auto& v = f["enabled"];
      // "auto": HF's args.fp16 / accelerate's mixed_precision fp16; zerobench has no fp16 mode.
      fp16 = is_auto(v) ? false : as_bool("fp16.enabled", v);
      if (fp16)
        throw UsageError("fp16.enabled " + text(v) +
                         ": fp16 with loss scaling is not implemented in zerobench (use bf16 or fp32)");
      notes.ignore("fp16.enabled", text(v), is_auto(v) ? "\"auto\" resolves to false: zerobench has no fp16 mode"
                                                       : "fp16 is off");
    }
    for (const auto& [k, v] : f.items())
      if (k != "enabled") notes.ignore("fp16." + k, text(v), "fp16 loss-scaling setting; fp16 is off");
  }
  // HF's fill_match on an explicit bf16.enabled, or a flag the file cannot honour.
  if (args.precision == "bf16" || args.precision == "fp32") {
    const bool want = args.precision == "bf16";
    if (bf16_from_file)
      r.explicit_vs_flag(std::string(bf16_key) + ".enabled", bf16 ? "true" : "false", "--precision", args.precision,
                         bf16 == want);
    else if (!bf16_key && want && mode == AutoFill::kHfTrainer)
      throw UsageError("--precision bf16: the DeepSpeed file has no bf16 section, so DeepSpeed would train in fp32 "
                       "(transformers fills only \"auto\"); add \"bf16\": {\"enabled\": \"auto\"}");
  }
  c.precision = bf16 ? "bf16" : "fp32";
}

// train_batch_size / train_micro_batch_size_per_gpu / gradient_accumulation_steps: "auto" as the
// trainer fills it, then DeepSpeedConfig._set_batch_related_parameters and _batch_assertion.
void read_batch(const json& root, const TrainerArgs& args, DeepSpeedConfig& c, Resolver& r) {
  auto& t = c.train;
  auto& notes = c.notes;
  const int W = args.world_size;
  std::optional<int64_t> tb, mb, gas;
  auto read = [&](const char* key, const char* flag, int64_t flag_value, std::optional<int64_t>& out) {
    if (!root.contains(key) || root[key].is_null()) return;
    const auto& v = root[key];
    if (is_auto(v)) {
      out = flag_value;
      return;
    }
    out = as_count(key, v, 1);
    r.explicit_vs_flag(key, text(v), flag, std::to_string(flag_value), *out == flag_value);
  };
  read("train_micro_batch_size_per_gpu", "--micro-batch", args.train.micro_batch, mb);
  read("gradient_accumulation_steps", "--grad-accum", args.train.grad_accum, gas);
  if (root.contains("train_batch_size") && !root["train_batch_size"].is_null()) {
    const auto& v = root["train_batch_size"];
    if (is_auto(v)) {
      tb = (mb ? *mb : args.train.micro_batch) * (gas ? *gas : args.train.grad_accum) * W;
    } else {
      tb = as_count("train_batch_size", v, 1);
    }
  }
  // _set_batch_related_parameters
  if (tb && mb && gas) {
  } else if (tb && mb) {
    gas = *tb / *mb / W;
  } else if (tb && gas) {
    mb = *tb / W / *gas;
  } else if (mb && gas) {
    tb = *mb * *gas * W;
  } else if (tb) {
    gas = 1;
    mb = *tb / W;
  } else if (mb) {
    gas = 1;
    tb = *mb * W;
  } else {
    throw UsageError("train_batch_size and train_micro_batch_size_per_gpu are both missing: DeepSpeed needs one "
                     "(DeepSpeedConfig._set_batch_related_parameters)");
  }
  if (*mb <= 0 || *gas <= 0 || *tb != *mb * *gas * W)
    throw UsageError("train_batch_size " + std::to_string(*tb) + " != train_micro_batch_size_per_gpu " +
                     std::to_string(*mb) + " * gradient_accumulation_steps " + std::to_string(*gas) +
                     " * world size " + std::to_string(W) + " (DeepSpeedConfig._batch_assertion)");
  // A derived value against a flag the command line gave.
  if (args.given_flag("--micro-batch") && *mb != args.train.micro_batch)
    throw UsageError("--micro-batch " + std::to_string(args.train.micro_batch) + " but the DeepSpeed config gives " +
                     std::to_string(*mb) + " per GPU (train_batch_size " + std::to_string(*tb) + ", world size " +
                     std::to_string(W) + ")");
  if (args.given_flag("--grad-accum") && *gas != args.train.grad_accum)
    throw UsageError("--grad-accum " + std::to_string(args.train.grad_accum) + " but the DeepSpeed config gives " +
                     std::to_string(*gas) + " (train_batch_size " + std::to_string(*tb) + ", world size " +
                     std::to_string(W) + ")");
  t.micro_batch = *mb;
  t.grad_accum = *gas;
  for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
    if (root.contains(key))
      notes.apply(key, text(root[key]),
                  "micro_batch " + std::to_string(*mb) + ", grad_accum " + std::to_string(*gas) + ", " +
                      std::to_string(*tb) + " samples per step over " + std::to_string(W) + " ranks");
}

void read_clipping(const json& root, const TrainerArgs& args, DeepSpeedConfig& c, Resolver& r) {
  auto& t = c.train;
  if (!root.contains("gradient_clipping") || root["gradient_clipping"].is_null()) {
    if (args.given_flag("--grad-clip")) {
      c.notes.warn("the DeepSpeed config has no gradient_clipping (DeepSpeed's default 0: off); --grad-clip " +
                   fmt(args.train.grad_clip) + " applies");
    } else {
      t.grad_clip = 0;  // GRADIENT_CLIPPING_DEFAULT
      c.notes.apply("gradient_clipping", "(absent)", "grad_clip 0 (DeepSpeed's default: no clipping)");
    }
    return;
  }
  const auto& v = root["gradient_clipping"];
  if (is_auto(v)) {
    t.grad_clip = args.train.grad_clip;  // HF: args.max_grad_norm; accelerate: 1.0 unless the launcher sets it
    c.notes.apply("gradient_clipping", "auto", "grad_clip " + fmt(t.grad_clip) + " (--grad-clip)");
    return;
  }
  const double clip = as_number("gradient_clipping", v);
  if (clip < 0) throw UsageError("gradient_clipping " + text(v) + " must be >= 0");
  r.explicit_vs_flag("gradient_clipping", text(v), "--grad-clip", fmt(args.train.grad_clip), clip == args.train.grad_clip);
  t.grad_clip = clip;
  c.notes.apply("gradient_clipping", text(v), "grad_clip " + fmt(clip));
}

// optimizer: DeepSpeedEngine._configure_basic_optimizer / get_optimizer_configuration. Adam and
// AdamW become AdamW unless adam_w_mode is false (then L2 Adam, the same as AdamW when
// weight_decay is 0); torch_adam picks torch.optim.AdamW (default weight_decay 0.01) over FusedAdam
// (default 0).
void read_optimizer(const json& root, const TrainerArgs& args, DeepSpeedConfig& c, Resolver& r) {
  if (!root.contains("optimizer") || root["optimizer"].is_null()) return;  // HF Trainer's own AdamW: the flags
  const auto& o = root["optimizer"];
  auto& t = c.train;
  auto& notes = c.notes;
  if (!o.is_object()) throw UsageError("optimizer " + o.dump() + " is not a section");
  const std::string type = o.contains("type") ? text(o["type"]) : "";
  const std::string name = lower(type);
  if (name != "adam" && name != "adamw")
    throw UsageError("optimizer.type " + (type.empty() ? std::string("(missing)") : type) +
                     ": zerobench runs AdamW only (DeepSpeed's Adam/AdamW)");
  for (const auto& [k, v] : o.items())
    if (k != "type" && k != "params") {
      if (k == "legacy_fusion") notes.ignore("optimizer." + k, text(v), "fp16 optimizer fusion; fp16 is off");
      else notes.ignore("optimizer." + k, text(v), "not read by DeepSpeed");
    }
  json p = o.value("params", json::object());
  if (!p.is_object()) throw UsageError("optimizer.params " + p.dump() + " is not a mapping");
  const bool torch_adam = p.contains("torch_adam") && as_bool("optimizer.params.torch_adam", p["torch_adam"]);
  const bool adam_w_mode = !p.contains("adam_w_mode") || as_bool("optimizer.params.adam_w_mode", p["adam_w_mode"]);
  const bool decoupled = name == "adamw" || adam_w_mode;
  // The constructor's defaults for keys the section leaves out.
  t.lr = 1e-3;
  t.beta1 = 0.9;
  t.beta2 = 0.999;
  t.eps = 1e-8;
  t.weight_decay = torch_adam && decoupled ? 1e-2 : 0.0;
  const std::string impl = torch_adam ? (decoupled ? "torch.optim.AdamW" : "torch.optim.Adam") : "FusedAdam";
  notes.apply("optimizer.type", type, impl + (decoupled ? " (decoupled weight decay)" : " (L2 weight decay)"));
  for (const auto& [k, v] : p.items()) {
    const std::string key = "optimizer.params." + k;
    if (k == "lr") {
      if (is_auto(v)) {
        t.lr = args.train.lr;
      } else {
        t.lr = as_number(key, v);
        if (t.lr < 0) throw UsageError(key + " " + text(v) + " must be >= 0");
        r.explicit_vs_flag(key, text(v), "--lr", fmt(args.train.lr), t.lr == args.train.lr);
      }
      notes.apply(key, text(v), "lr " + fmt(t.lr));
    } else if (k == "betas") {
      if (is_auto(v)) {
        t.beta1 = args.train.beta1;
        t.beta2 = args.train.beta2;
      } else {
        if (!v.is_array() || v.size() != 2) throw UsageError(key + " " + v.dump() + " is not [beta1, beta2]");
        t.beta1 = as_number(key, v[0]);
        t.beta2 = as_number(key, v[1]);
        if (t.beta1 < 0 || t.beta1 >= 1 || t.beta2 < 0 || t.beta2 >= 1)
          throw UsageError(key + " " + v.dump() + ": each beta must be in [0, 1)");
      }
      notes.apply(key, text(v), "betas [" + fmt(t.beta1) + ", " + fmt(t.beta2) + "]");
    } else if (k == "eps") {
      t.eps = is_auto(v) ? args.train.eps : as_number(key, v);
      if (t.eps < 0) throw UsageError(key + " " + text(v) + " must be >= 0");
      notes.apply(key, text(v), "eps " + fmt(t.eps));
    } else if (k == "weight_decay") {
      if (is_auto(v)) {
        t.weight_decay = args.train.weight_decay;
      } else {
        t.weight_decay = as_number(key, v);
        if (t.weight_decay < 0) throw UsageError(key + " " + text(v) + " must be >= 0");
        r.explicit_vs_flag(key, text(v), "--weight-decay", fmt(args.train.weight_decay),
                           t.weight_decay == args.train.weight_decay);
      }
      notes.apply(key, text(v), "weight_decay " + fmt(t.weight_decay));
    } else if (k == "torch_adam" || k == "adam_w_mode") {
      notes.apply(key, text(v), impl);
    } else if (k == "bias_correction") {
      if (!as_bool(key, v)) throw UsageError(key + " false: Adam without bias correction is not implemented");
      notes.apply(key, text(v), "bias correction on");
    } else if (k == "amsgrad" || k == "maximize") {
      if (as_bool(key, v)) throw UsageError(key + " true is not implemented (plain AdamW)");
      notes.apply(key, text(v), "off");
    } else if (k == "foreach" || k == "fused" || k == "capturable" || k == "differentiable") {
      notes.ignore(key, text(v), "kernel choice of torch's optimizer; the update arithmetic is the same");
    } else if (k == "fp32_optimizer_states") {
      notes.ignore(key, text(v), "DeepSpeedCPUAdam (optimizer offload) only; offload is off");
    } else if (k == "max_grad_norm") {
      throw UsageError(key + " " + text(v) + ": DeepSpeed refuses it as an optimizer parameter (use gradient_clipping)");
    } else {
      throw UsageError(key + " " + text(v) + ": not a parameter of DeepSpeed's Adam/AdamW");
    }
  }
  if (!decoupled && t.weight_decay != 0)
    throw UsageError("optimizer.params.adam_w_mode false with weight_decay " + fmt(t.weight_decay) +
                     ": Adam with L2 weight decay is not implemented (zerobench runs AdamW)");
}

// scheduler: runtime/lr_schedules.py, filled as trainer_config_process/finalize fill "auto".
void read_scheduler(const json& root, const TrainerArgs& args, DeepSpeedConfig& c, Resolver& r) {
  if (!root.contains("scheduler") || root["scheduler"].is_null()) return;
  const auto& s = root["scheduler"];
  auto& t = c.train;
  auto& notes = c.notes;
  if (!s.is_object()) throw UsageError("scheduler " + s.dump() + " is not a section");
  const std::string type = s.contains("type") ? text(s["type"]) : "";
  if (type != "WarmupLR" && type != "WarmupDecayLR" && type != "WarmupCosineLR")
    throw UsageError("scheduler.type " + (type.empty() ? std::string("(missing)") : type) +
                     ": zerobench implements WarmupLR, WarmupDecayLR and WarmupCosineLR");
  if (args.given_flag("--lr-schedule"))
    throw UsageError("--lr-schedule " + args.train.lr_schedule + " conflicts with the DeepSpeed scheduler " + type);
  for (const auto& [k, v] : s.items())
    if (k != "type" && k != "params") notes.ignore("scheduler." + k, text(v), "not read by DeepSpeed");
  const json p = s.value("params", json::object());
  if (!p.is_object()) throw UsageError("scheduler.params " + p.dump() + " is not a mapping");
  t.lr_schedule = type;
  t.warmup_min_lr = 0;
  t.warmup_min_ratio = 0;
  t.cos_min_ratio = 1e-4;
  t.warmup_type = "log";
  t.lr_warmup_steps = 1000;
  const double optimizer_lr = t.lr;
  if (type == "WarmupDecayLR") t.lr = 0.001;  // the constructor's warmup_max_lr default
  bool has_total = false;
  for (const auto& [k, v] : p.items()) {
    const std::string key = "scheduler.params." + k;
    if (k == "warmup_min_lr" && type != "WarmupCosineLR") {
      t.warmup_min_lr = is_auto(v) ? 0.0 : as_number(key, v);  // fill_only(0): "not a trainer arg"
      notes.apply(key, text(v), "warmup_min_lr " + fmt(t.warmup_min_lr));
    } else if (k == "warmup_max_lr" && type != "WarmupCosineLR") {
      if (is_auto(v)) {
        t.lr = args.train.lr;
      } else {
        t.lr = as_number(key, v);
        r.explicit_vs_flag(key, text(v), "--lr", fmt(args.train.lr), t.lr == args.train.lr);
      }
      notes.apply(key, text(v), "lr " + fmt(t.lr) + " (the schedule's peak)");
    } else if (k == "warmup_num_steps") {
      if (is_auto(v)) {
        t.lr_warmup_steps = std::max<int64_t>(1, args.train.lr_warmup_steps);
      } else {
        t.lr_warmup_steps = as_count(key, v, 1);  // DeepSpeed >= 0.19.6 refuses <= 0
        r.explicit_vs_flag(key, text(v), "--lr-warmup-steps", std::to_string(args.train.lr_warmup_steps),
                           t.lr_warmup_steps == args.train.lr_warmup_steps);
      }
      notes.apply(key, text(v), "warmup_num_steps " + std::to_string(t.lr_warmup_steps) + " (DeepSpeed uses at least 2)");
    } else if (k == "total_num_steps" && type != "WarmupLR") {
      has_total = true;
      // An explicit value stands even beside --steps: the schedule spans the whole training, of
      // which the benchmark runs its first --steps steps.
      t.total_num_steps = is_auto(v) ? args.train.steps : as_count(key, v, 0);
      notes.apply(key, text(v), "total_num_steps " + std::to_string(t.total_num_steps) +
                                    (is_auto(v) ? " (--steps)" : " (the benchmark runs the first --steps of it)"));
    } else if (k == "warmup_type") {
      const auto w = text(v);
      t.warmup_type = w == "linear" ? "linear" : "log";  // DeepSpeed falls back to log for unknown names
      if (w != "linear" && w != "log") notes.warn(key + " '" + w + "' is unknown; DeepSpeed uses log");
      notes.apply(key, w, "warmup_type " + t.warmup_type);
    } else if (k == "warmup_min_ratio" && type == "WarmupCosineLR") {
      t.warmup_min_ratio = as_number(key, v);
      notes.apply(key, text(v), "warmup_min_ratio " + fmt(t.warmup_min_ratio));
    } else if (k == "cos_min_ratio" && type == "WarmupCosineLR") {
      t.cos_min_ratio = as_number(key, v);
      notes.apply(key, text(v), "cos_min_ratio " + fmt(t.cos_min_ratio));
    } else if (k == "last_batch_iteration") {
      if (as_number(key, v) != -1) throw UsageError(key + " " + text(v) + ": resuming a schedule is not implemented");
      notes.apply(key, text(v), "a fresh schedule");
    } else {
      throw UsageError(key + " " + text(v) + ": not a parameter of DeepSpeed's " + type);
    }
  }
  if (type == "WarmupCosineLR") t.lr = optimizer_lr;  // the optimizer's lr scaled by the ratio
  if (type != "WarmupLR" && !has_total)
    throw UsageError("scheduler.params.total_num_steps is missing: DeepSpeed's " + type + " requires it");
}

void read_zero(const json& root, const TrainerArgs& args, DeepSpeedConfig& c) {
  auto& notes = c.notes;
  if (!root.contains("zero_optimization"))
    throw UsageError("zero_optimization is missing: DeepSpeed then runs ZeRO stage 0; zerobench's zero3 backend is "
                     "ZeRO stage 3");
  const auto& z = root["zero_optimization"];
  if (z.is_boolean())
    throw UsageError("zero_optimization " + z.dump() + ": the deprecated boolean form means stage " +
                     (z.get<bool>() ? "1" : "0") + "; zerobench's zero3 backend is ZeRO stage 3");
  if (!z.is_object()) throw UsageError("zero_optimization " + z.dump() + " is not a section");
  for (const auto& [k, v] : z.items())
    if (kRemovedZero.count(k))
      throw UsageError("zero_optimization." + k + ": removed from DeepSpeed 0.19.8, which refuses the file");
  // stage: "auto" is dropped by DeepSpeedConfigModel (default 0).
  const int64_t stage = z.contains("stage") && !is_auto(z["stage"]) ? as_count("zero_optimization.stage", z["stage"]) : 0;
  if (stage != 3)
    throw UsageError("zero_optimization.stage " + (z.contains("stage") ? text(z["stage"]) : std::string("(absent: 0)")) +
                     ": ZeRO stage " + std::to_string(stage) +
                     " is not implemented; zerobench's zero3 backend is ZeRO stage 3");
  notes.apply("zero_optimization.stage", text(z["stage"]), "ZeRO stage 3");
  auto& o = c.zero;
  const int64_t H = args.hidden;
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
    const bool hf_auto = is_auto(v) && (spelled == "reduce_bucket_size" || spelled == "stage3_prefetch_bucket_size" ||
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
    if (field == "reduce_bucket_size") {
      count(o.reduce_bucket_size, H * H, 1);
      notes.apply(key, text(v), note_default("reduce_bucket_size " + std::to_string(o.reduce_bucket_size)));
    } else if (field == "prefetch_bucket_size") {
      count(o.stage3_prefetch_bucket_size, int64_t(0.9 * double(H) * double(H)), 0);
      notes.apply(key, text(v), note_default("stage3_prefetch_bucket_size " + std::to_string(o.stage3_prefetch_bucket_size)));
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
    } else if (field == "overlap_comm" || field == "contiguous_gradients" || field == "reduce_scatter") {
      const bool b = dropped_auto ? true : as_bool(key, v);
      if (field == "overlap_comm") o.overlap_comm = b;
      if (field == "contiguous_gradients") o.contiguous_gradients = b;
      if (field == "reduce_scatter" && !b)
        throw UsageError(key + " false: stage 3 then all-reduces contiguous buckets (stage3.py "
                         "__reduce_and_partition_ipg_grads); zerobench implements the reduce-scatter path only");
      notes.apply(key, text(v), field + " " + (b ? "true" : "false"));
    } else if (field == "offload_param" || field == "offload_optimizer") {
      std::string device = "none";
      if (v.is_object() && v.contains("device") && !v["device"].is_null()) device = lower(text(v["device"]));
      else if (!v.is_null() && !v.is_object()) throw UsageError(key + " " + v.dump() + " is not a section");
      if (device != "none")
        throw UsageError(key + ".device " + device + ": offload to " + device + " is not implemented in zerobench");
      notes.ignore(key, v.dump(), "device none: no offload");
    } else if (field == "cpu_offload" || field == "cpu_offload_param") {
      if (!v.is_null() && as_bool(key, v))
        throw UsageError(key + " true (deprecated offload switch): CPU offload is not implemented in zerobench");
      notes.ignore(key, text(v), "off");
    } else if (field == "zero_hpz_partition_size") {
      if (as_count(key, v, 0) > 1) throw UsageError(key + " " + text(v) + ": ZeRO++ hierarchical partitioning is not implemented");
      notes.ignore(key, text(v), "ZeRO++ hpZ off");
    } else if (field == "zero_quantized_weights" || field == "zero_quantized_nontrainable_weights" ||
               field == "zero_quantized_gradients") {
      if (as_bool(key, v)) throw UsageError(key + " true: ZeRO++ quantized communication is not implemented");
      notes.ignore(key, text(v), "ZeRO++ quantization off");
    } else if (field == "module_granularity_threshold") {
      if (!dropped_auto && as_count(key, v, 0) > 0)
        throw UsageError(key + " " + text(v) + ": fetching fine-grained modules as one unit is not implemented");
      notes.ignore(key, text(v), "0: per-module fetch");
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
  if (o.reduce_bucket_size <= 0) throw UsageError("reduce_bucket_size must be positive");  // Field(gt=0)
  return o;
}

DeepSpeedConfig read_deepspeed_json(const json& root, const TrainerArgs& args, AutoFill mode) {
  if (!root.is_object()) throw UsageError("a DeepSpeed config must be a JSON object");
  DeepSpeedConfig c;
  c.train = args.train;
  auto& notes = c.notes;
  Resolver r{args, mode, notes};
  for (const auto& [k, v] : root.items())
    if (kRemovedTopLevel.count(k))
      throw UsageError(k + ": removed from DeepSpeed 0.19.8, which refuses a config that still has it");
  read_zero(root, args, c);
  read_precision(root, args, mode, c, r);
  read_batch(root, args, c, r);
  read_clipping(root, args, c, r);
  read_optimizer(root, args, c, r);
  read_scheduler(root, args, c, r);
  static const std::set<std::string> handled = {
      "zero_optimization", "bf16", "bfloat16", "fp16", "train_batch_size", "train_micro_batch_size_per_gpu",
      "gradient_accumulation_steps", "gradient_clipping", "optimizer", "scheduler"};
  for (const auto& [k, v] : root.items()) {
    if (handled.count(k)) continue;
    if (k == "communication_data_type") {
      if (v.is_null()) continue;
      const auto s = lower(text(v));  // get_communication_data_type: fp32 | fp16 | bf16
      if (s == "fp16") throw UsageError(k + " fp16 is not implemented in zerobench (bf16 or fp32)");
      if (s != "fp32" && s != "bf16")
        throw UsageError(k + " '" + text(v) + "' is not fp16, bf16 or fp32 (DeepSpeed refuses it)");
      c.zero.communication_data_type = s;
      notes.apply(k, text(v), "communication_data_type " + s);
    } else if (k == "data_types") {
      if (!v.is_object()) throw UsageError("data_types " + v.dump() + " is not a section");
      for (const auto& [dk, dv] : v.items()) {
        const std::string key = "data_types." + dk;
        if (dk == "grad_accum_dtype") {
          if (dv.is_null()) continue;
          c.zero.grad_accum_dtype = dtype_enum(key, dv);
          notes.apply(key, text(dv), "grad_accum_dtype " + c.zero.grad_accum_dtype);
        } else if (dk == "param_dtype") {
          if (!dv.is_null()) throw UsageError(key + " " + text(dv) + ": a parameter dtype apart from the precision mode is not implemented");
        } else if (dk == "buffer_dtype" || dk == "keep_in_fp32_modules") {
          notes.ignore(key, text(dv), "zerobench's decoder has no buffers or fp32-kept modules");
        } else {
          notes.ignore(key, text(dv), "not read by DeepSpeed");
          notes.warn(key + " is not a DeepSpeed data_types setting; DeepSpeed ignores it");
        }
      }
    } else if (k == "gradient_predivide_factor") {
      if (as_number(k, v) != 1.0)
        throw UsageError(k + " " + text(v) + ": DeepSpeed's ZeRO-3 refuses a factor other than 1.0 with reduce-scatter");
      notes.apply(k, text(v), "1.0");
    } else if (k == "prescale_gradients" && as_bool(k, v)) {
      throw UsageError(k + " true: DeepSpeed's ZeRO-3 refuses pre-scaled gradients with reduce-scatter");
    } else if (k == "gradient_allreduce_op") {
      const auto s = lower(text(v));
      if (s == "sum") throw UsageError(k + " sum: DeepSpeed refuses it with ZeRO stage 3");
      if (s != "mean" && s != "avg") throw UsageError(k + " '" + text(v) + "' is not mean or sum");
      notes.apply(k, text(v), "gradients averaged over ranks");
    } else if (k == "torch_autocast") {
      if (v.is_object() && v.contains("enabled") && as_bool("torch_autocast.enabled", v["enabled"]))
        throw UsageError("torch_autocast.enabled true: DeepSpeed's autocast mode is not implemented (use bf16)");
      notes.ignore(k, v.dump(), "off");
    } else if (k == "compile") {
      if (v.is_object() && v.contains("deepcompile") && as_bool("compile.deepcompile", v["deepcompile"]))
        throw UsageError("compile.deepcompile true: DeepCompile is not implemented");
      notes.ignore(k, v.dump(), "applies only when the training script calls engine.compile(); zerobench runs eager");
      notes.warn("compile: DeepSpeed's engine.compile() settings are not applied; zerobench runs eager");
    } else if (k == "tensor_parallel") {
      const int64_t tp = v.is_object() && v.contains("autotp_size") ? as_count("tensor_parallel.autotp_size", v["autotp_size"]) : 0;
      if (tp > 1) throw UsageError("tensor_parallel.autotp_size " + std::to_string(tp) + ": tensor parallelism is not implemented");
      notes.ignore(k, v.dump(), "no tensor parallelism");
    } else if (k == "sequence_parallel_size") {
      if (as_count(k, v) > 1) throw UsageError(k + " " + text(v) + ": sequence parallelism is not implemented");
      notes.ignore(k, text(v), "no sequence parallelism");
    } else if (k == "hybrid_engine" || k == "data_efficiency") {
      if (v.is_object() && v.contains("enabled") && as_bool(k + ".enabled", v["enabled"]))
        throw UsageError(k + ".enabled true is not implemented");
      notes.ignore(k, v.dump(), "off");
    } else if (k == "weight_quantization" || k == "expert_parallel" || k == "moe" || k == "msamp" || k == "fp8") {
      throw UsageError(k + ": not implemented in zerobench");
    } else if (kTopIgnored.count(k)) {
      notes.ignore(k, text(v), kTopIgnored.at(k));
    } else {
      // DeepSpeedConfig reads the keys it knows and never looks at others.
      notes.ignore(k, text(v), "not a DeepSpeed 0.19.8 setting: DeepSpeed ignores it too");
      notes.warn(k + " is not a DeepSpeed setting; DeepSpeed ignores it");
    }
  }
  zero3_options_from_json(to_json(c.zero));  // validates ranges and dtypes
  return c;
}

json deepspeed_config_from_accelerate(const json& block, const json* file_json, const std::string& mixed_precision,
                                      bool mixed_precision_in_yaml, ConfigNotes& notes) {
  if (!block.is_object()) throw UsageError("deepspeed_config " + block.dump() + " is not a mapping");
  // Keys accelerate launch turns into plugin fields; with a deepspeed_config_file these must live
  // in the file (DeepSpeedPlugin._deepspeed_config_checks refuses them in the YAML).
  static const std::set<std::string> plugin_fields = {
      "gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
      "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path", "zero3_save_16bit_model"};
  static const std::map<std::string, std::string> launcher_keys = {
      {"deepspeed_config_file", "the DeepSpeed config it names is read instead"},
      {"deepspeed_multinode_launcher", "multi-node launcher choice"},
      {"deepspeed_hostfile", "multi-node launcher host list"},
      {"deepspeed_exclusion_filter", "multi-node launcher host filter"},
      {"deepspeed_inclusion_filter", "multi-node launcher host filter"},
      {"zero3_init_flag", "builds the model under deepspeed.zero.Init (weights partitioned at construction); "
                          "zerobench creates each unit's weights and partitions them at once either way"},
      {"zero3_save_16bit_model", "checkpoint saving; zerobench writes no checkpoint"},
      {"offload_optimizer_nvme_path", "NVMe offload path; offload is off"},
      {"offload_param_nvme_path", "NVMe offload path; offload is off"},
  };
  for (const auto& [k, v] : block.items()) {
    const std::string key = "deepspeed_config." + k;
    if (k == "deepspeed_moe_layer_cls_names" && !v.is_null())
      throw UsageError(key + " " + text(v) + ": zerobench's dense decoder has no MoE layer classes (accelerate "
                       "would fail to find them)");
    if (file_json && plugin_fields.count(k))
      throw UsageError(key + " beside deepspeed_config_file: accelerate refuses it "
                       "(DeepSpeedPlugin._deepspeed_config_checks); set it in the DeepSpeed file");
    if (launcher_keys.count(k)) notes.ignore(key, text(v), launcher_keys.at(k));
    else if (!plugin_fields.count(k) && k != "deepspeed_moe_layer_cls_names") {
      notes.ignore(key, text(v), "not an accelerate DeepSpeed setting: accelerate ignores it too");
      notes.warn(key + " is not an accelerate DeepSpeed setting; ignored as accelerate ignores it");
    }
  }
  json config;
  if (file_json) {
    if (mixed_precision_in_yaml)
      throw UsageError("mixed_precision beside deepspeed_config_file: accelerate refuses it "
                       "(DeepSpeedPlugin._deepspeed_config_checks); set bf16/fp16 in the DeepSpeed file");
    config = *file_json;
    if (!config.is_object()) throw UsageError("the deepspeed_config_file is not a JSON object");
    if (!config.contains("gradient_accumulation_steps")) config["gradient_accumulation_steps"] = 1;
    if (!config.contains("zero_optimization"))
      throw UsageError("zero_optimization is missing from the deepspeed_config_file (accelerate refuses it: "
                       "\"Please specify the ZeRO optimization config\")");
    // fill_match of the plugin fields (environment defaults): only "auto" is replaced.
    auto& z = config["zero_optimization"];
    if (z.is_object()) {
      if (z.contains("stage") && is_auto(z["stage"])) z["stage"] = 2;  // ACCELERATE_DEEPSPEED_ZERO_STAGE default
      for (const char* off : {"offload_optimizer", "offload_param"})
        if (z.contains(off) && z[off].is_object() && z[off].contains("device") && is_auto(z[off]["device"]))
          z[off]["device"] = "none";
    }
  } else {
    // DeepSpeedPlugin.__post_init__ without a file: the config it builds from the plugin fields.
    auto field = [&](const char* k) { return block.contains(k) && !block[k].is_null() ? block[k] : json(); };
    json gas = field("gradient_accumulation_steps");
    json clip = field("gradient_clipping");
    json stage = field("zero_stage");
    const std::string opt_dev = field("offload_optimizer_device").is_null() ? "none" : lower(text(field("offload_optimizer_device")));
    const std::string par_dev = field("offload_param_device").is_null() ? "none" : lower(text(field("offload_param_device")));
    config = {{"train_batch_size", "auto"},
              {"train_micro_batch_size_per_gpu", "auto"},
              {"gradient_accumulation_steps", gas.is_null() ? json("auto") : gas},
              {"zero_optimization",
               {{"stage", stage.is_null() ? json(2) : stage},  // ACCELERATE_DEEPSPEED_ZERO_STAGE default 2
                {"offload_optimizer", {{"device", opt_dev}}},
                {"offload_param", {{"device", par_dev}}},
                {"stage3_gather_16bit_weights_on_model_save",
                 field("zero3_save_16bit_model").is_null() ? json(false) : field("zero3_save_16bit_model")}}}};
    // gradient_clipping: the plugin's value, else "auto" (filled with 1.0 by _prepare_deepspeed).
    config["gradient_clipping"] = clip.is_null() ? json("auto") : clip;
    const std::string stage_text = stage.is_null() ? "2" : text(stage);
    if (stage_text != "3")
      throw UsageError("deepspeed_config.zero_stage " + (stage.is_null() ? std::string("(absent: accelerate's default 2)") : stage_text) +
                       ": ZeRO stage " + stage_text + " is not implemented; zerobench's zero3 backend is ZeRO stage 3");
    notes.apply("deepspeed_config.zero_stage", stage_text, "zero_optimization.stage 3");
    if (!gas.is_null()) notes.apply("deepspeed_config.gradient_accumulation_steps", text(gas), "gradient_accumulation_steps " + text(gas));
    if (!clip.is_null()) notes.apply("deepspeed_config.gradient_clipping", text(clip), "gradient_clipping " + text(clip));
    for (const auto& [k, dev] : {std::pair<const char*, std::string>{"offload_optimizer_device", opt_dev},
                                 {"offload_param_device", par_dev}})
      if (block.contains(k)) {
        if (dev != "none")
          throw UsageError("deepspeed_config." + std::string(k) + " " + dev + ": offload to " + dev +
                           " is not implemented in zerobench");
        notes.ignore("deepspeed_config." + std::string(k), dev, "none: no offload");
      }
  }
  // set_mixed_precision: the run's mixed_precision fills the bf16/fp16 sections.
  const std::string mp = lower(mixed_precision);
  if (mp == "fp16") throw UsageError("mixed_precision fp16: fp16 with loss scaling is not implemented in zerobench");
  if (mp == "fp8") throw UsageError("mixed_precision fp8 is not implemented in zerobench");
  if (mp != "no" && mp != "bf16") throw UsageError("mixed_precision '" + mixed_precision + "' is not no, fp16, bf16 or fp8");
  if (mp == "bf16" && !config.contains("bf16")) config["bf16"] = {{"enabled", true}};
  if (mp == "bf16" && config.contains("fp16") && config["fp16"].is_object() && config["fp16"].contains("enabled") &&
      lower(text(config["fp16"]["enabled"])) == "true")
    throw UsageError("mixed_precision bf16 while the DeepSpeed config enables fp16: accelerate refuses it");
  for (const char* dt : {"fp16", "bf16"})
    if (!config.contains(dt)) config[dt] = {{"enabled", false}};
  for (const char* dt : {"fp16", "bf16"}) {
    auto& sec = config[dt];
    if (sec.is_object() && sec.contains("enabled") && is_auto(sec["enabled"]))
      sec["enabled"] = std::string(dt) == "bf16" ? mp == "bf16" : false;
  }
  return config;
}

}  // namespace zb::backends::zero3
