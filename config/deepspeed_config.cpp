// deepspeed_config.cpp — a DeepSpeed config as runtime/config.py reads it (see deepspeed_config.hpp;
// docs/configs.md has the key-by-key table this file implements).
#include "config/deepspeed_config.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "config/deepspeed_fp16.hpp"
#include "config/deepspeed_scheduler.hpp"
#include "config/hf_scheduler.hpp"
#include "runtime/errors.hpp"

namespace zb::config {

namespace {
using json = nlohmann::json;
using namespace deepspeed_values;

// DeepSpeed's DtypeEnum names (runtime/config.py).
std::string dtype_enum(const std::string& key, const json& v) {
  const auto s = text(v);
  if (s == "torch.bfloat16" || s == "bf16" || s == "bfloat16") return "bf16";
  if (s == "torch.float32" || s == "fp32" || s == "float32" || s == "float") return "fp32";
  if (s == "torch.float16" || s == "fp16" || s == "float16" || s == "half") return "fp16";
  if (s == "torch.int8" || s == "int8") return "int8";
  throw UsageError(key + " '" + s + "' is not a DeepSpeed dtype name");
}

// config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS / _REMOVED_ZERO_CONFIG_KEYS: DeepSpeed 0.19.8 refuses them.
const std::set<std::string> kRemovedTopLevel = {
    "nebula",          "compression_training", "amp",     "quantize_training",   "sparse_gradients",
    "eigenvalue",      "sparse_attention",     "elasticity", "graph_harvesting", "curriculum_learning",
    "progressive_layer_drop"};
// Top-level keys that do not change what a stage-3 training step does.
const std::map<std::string, std::string> kTopIgnored = {
    {"steps_per_print", "logging"},
    {"wall_clock_breakdown", "timing logs"},
    {"memory_breakdown", "memory logs"},
    {"dump_state", "prints the config"},
    {"disable_python_gc", "Python garbage-collector pacing; zerobench has no Python"},
    {"zero_allow_untested_optimizer", "lets DeepSpeed accept a client optimizer; zerobench's AdamW is fixed"},
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
    {"aio", "async I/O for NVMe offload only; nothing is offloaded to NVMe (device nvme is refused)"},
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
  // get_bfloat16_config: "bf16", else the old "bfloat16" name. Under HF's Trainer (kHfTrainer) given
  // a --precision, accelerate's DeepSpeedPlugin.set_mixed_precision (AcceleratorState, on a GPU)
  // adds {"bf16": {"enabled": <mixed precision is bf16>}} to a file without a "bf16" section, so
  // the old name is never read: the flag decides (accelerate 1.15 utils/dataclasses.py).
  const bool bfloat16_shadowed =
      mode == AutoFill::kHfTrainer && !args.precision.empty() && !root.contains("bf16") && root.contains("bfloat16");
  if (bfloat16_shadowed)
    notes.ignore("bfloat16", root["bfloat16"].dump(),
                 "accelerate adds a bf16 section for --precision " + args.precision +
                     " (DeepSpeedPlugin.set_mixed_precision) and DeepSpeed reads bf16 before the old bfloat16 name");
  const char* bf16_key = root.contains("bf16") ? "bf16" : root.contains("bfloat16") && !bfloat16_shadowed ? "bfloat16" : nullptr;
  if (root.contains("bf16") && root.contains("bfloat16"))
    notes.ignore("bfloat16", root["bfloat16"].dump(), "DeepSpeed reads the bf16 section when both are present");
  bool bf16 = false, bf16_from_file = false;
  if (bf16_key) {
    const auto& b = root[bf16_key];
    if (!b.is_object()) throw UsageError(std::string(bf16_key) + " " + b.dump() + " is not a section");
    for (const auto& [k, v] : b.items()) {
      const std::string key = std::string(bf16_key) + "." + k;
      if (k != "enabled" && is_auto(v)) {  // DeepSpeedConfigModel(strict=False) drops "auto": the default
        notes.ignore(key, "auto", "DeepSpeed drops \"auto\" here: its default");
        continue;
      }
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
  FP16Section fp16;
  if (root.contains("fp16")) fp16 = read_fp16_section(root["fp16"], args, mode, notes);  // deepspeed_fp16.cpp
  // A file without an fp16 section under HF's Trainer with --precision fp16: set_mixed_precision adds
  // {"enabled": true, "auto_cast": true} (DeepSpeed's loss-scaling defaults).
  const bool fp16_added = mode == AutoFill::kHfTrainer && args.precision == "fp16" && !root.contains("fp16");
  if (fp16_added) {
    fp16.enabled = true;
    notes.apply("fp16", "(none in the file)",
                "fp16 with DeepSpeed's default loss scaling: accelerate adds {\"enabled\": true, \"auto_cast\": true} "
                "for --precision fp16 (DeepSpeedPlugin.set_mixed_precision); auto_cast casts floating-point inputs, "
                "zerobench's are token ids");
  }
  if (fp16.enabled && bf16)  // DeepSpeedConfig._do_error_check
    throw UsageError("fp16.enabled and bf16.enabled are both true: DeepSpeed refuses it (bfloat16 and fp16 modes "
                     "cannot be simultaneously enabled)");
  if (args.precision == "fp16") {
    if (fp16.from_file)
      r.explicit_vs_flag("fp16.enabled", fp16.enabled ? "true" : "false", "--precision", args.precision, fp16.enabled);
    else if (!fp16.enabled && mode == AutoFill::kHfTrainer)  // an fp16 section without "enabled": off
      throw UsageError("--precision fp16: the DeepSpeed file's fp16 section has no \"enabled\", so DeepSpeed "
                       "would not train in fp16 (transformers fills only \"auto\"; accelerate adds only a missing "
                       "section); add \"enabled\": \"auto\"");
  } else if ((args.precision == "bf16" || args.precision == "fp32") && fp16.from_file && fp16.enabled) {
    r.explicit_vs_flag("fp16.enabled", "true", "--precision", args.precision, false);  // fill_match: args.fp16 false
  }
  // HF's fill_match on an explicit bf16.enabled, or a flag the file cannot honour.
  if (args.precision == "bf16" || args.precision == "fp32") {
    const bool want = args.precision == "bf16";
    if (bf16_from_file)
      r.explicit_vs_flag(std::string(bf16_key) + ".enabled", bf16 ? "true" : "false", "--precision", args.precision,
                         bf16 == want);
    else if (!bf16_key && want && mode == AutoFill::kHfTrainer) {
      bf16 = true;  // accelerate's set_mixed_precision adds the section (above)
      notes.apply("bf16", "(none in the file)",
                  "precision bf16: accelerate adds {\"enabled\": true} for --precision bf16 (DeepSpeedPlugin.set_mixed_precision)");
    }
  }
  c.precision = bf16 ? "bf16" : fp16.enabled ? "fp16" : "fp32";
  if (fp16.enabled) c.fp16 = fp16.scaler;
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
  r.explicit_vs_flag("gradient_clipping", text(v), "--grad-clip", fmt(args.train.grad_clip), clip == args.train.grad_clip);
  // DeepSpeed clips only when gradient_clipping > 0 (engine.py, the ZeRO optimizers' clip_grad):
  // 0 or below is no clipping.
  t.grad_clip = clip > 0 ? clip : 0;
  c.notes.apply("gradient_clipping", text(v), clip > 0 ? "grad_clip " + fmt(clip) : "no clipping (DeepSpeed clips only when > 0)");
}

// DeepSpeed's own switches in optimizer.params (torch_adam, adam_w_mode) are popped from a plain
// dict and tested with Python's truthiness (`if torch_adam:`, `... or adam_w_mode`), not parsed by
// pydantic: any non-empty string is true — "torch_impl", and "false" too — and 0, "", null, [] and
// {} are false. Where a value is not a JSON bool the note says how DeepSpeed reads it.
bool python_truthy(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return false;  // null
}
std::string truthiness_note(const json& v) {
  if (v.is_boolean()) return "";
  return std::string(" (DeepSpeed tests ") + v.dump() + " with Python's truthiness: " +
         (python_truthy(v) ? "true" : "false") + ")";
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
  const bool torch_adam = p.contains("torch_adam") && python_truthy(p["torch_adam"]);
  c.optimizer_section = true;
  c.torch_adam = torch_adam;
  const auto& off = c.zero.offload_optimizer;
  const bool cpu_adam = !torch_adam && off.device != "none";  // get_optimizer_configuration: zero_use_cpu_optimizer
  const bool adam_w_mode = !p.contains("adam_w_mode") || python_truthy(p["adam_w_mode"]);
  const bool decoupled = name == "adamw" || adam_w_mode;
  // The constructor's defaults for keys the section leaves out.
  t.lr = 1e-3;
  t.beta1 = 0.9;
  t.beta2 = 0.999;
  t.eps = 1e-8;
  t.weight_decay = torch_adam && decoupled ? 1e-2 : 0.0;
  // Which torch.optim.AdamW implementation (adamw_impl.hpp). torch_adam: foreach from the params
  // (get_optimizer_configuration pops it, default None) and fused (passed on to the constructor);
  // torch refuses both true. Otherwise DeepSpeed's own optimizer, whose arithmetic zerobench runs
  // with the fused AdamW (FusedAdam; DeepSpeedCPUAdam under offload is the engine's own).
  t.adamw_impl = AdamWImpl::kFused;
  if (torch_adam) {
    const bool fused = p.contains("fused") && python_truthy(p["fused"]);
    const bool foreach_given = p.contains("foreach") && !p["foreach"].is_null();
    if (fused && foreach_given && python_truthy(p["foreach"]))
      throw UsageError("optimizer.params.fused and foreach both true: torch.optim.AdamW refuses it "
                       "(`fused` and `foreach` cannot be `True` together.)");
    t.adamw_impl = fused            ? AdamWImpl::kFused
                   : !foreach_given ? AdamWImpl::kTorchDefault
                   : python_truthy(p["foreach"]) ? AdamWImpl::kForeach
                                                 : AdamWImpl::kForLoop;
  }
  const std::string torch_class = decoupled ? "torch.optim.AdamW" : "torch.optim.Adam";
  const std::string impl = torch_adam ? torch_class + "(" + adamw_kwargs(t.adamw_impl) + ")"
                           : cpu_adam ? "DeepSpeedCPUAdam (optimizer offload)"
                                      : "FusedAdam";
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
      notes.apply(key, text(v), impl + truthiness_note(v));
    } else if (k == "bias_correction") {
      if (!as_bool(key, v)) throw UsageError(key + " false: Adam without bias correction is not implemented");
      notes.apply(key, text(v), "bias correction on");
    } else if (k == "amsgrad" || k == "maximize") {
      if (as_bool(key, v)) throw UsageError(key + " true is not implemented (plain AdamW)");
      notes.apply(key, text(v), "off");
    } else if (k == "foreach" || k == "fused" || k == "capturable" || k == "differentiable") {
      // Only torch.optim.AdamW takes them: FusedAdam and DeepSpeedCPUAdam have no such parameter
      // (engine.py passes the remaining params to the constructor: a TypeError).
      if (!torch_adam)
        throw UsageError(key + " " + text(v) + ": DeepSpeed passes it to " +
                         (cpu_adam ? "DeepSpeedCPUAdam" : "FusedAdam") + ", which fails: __init__() got an unexpected "
                         "keyword argument '" + k + "' (it is torch.optim.AdamW's, with torch_adam: true)");
      if (k == "capturable" && python_truthy(v))
        throw UsageError(key + " " + text(v) + ": AdamW's capturable (graph-capture) update is not implemented");
      if (k == "differentiable")
        notes.ignore(key, text(v), "autograd through the update: the same arithmetic, no second-order use here");
      else if (k == "capturable")
        notes.apply(key, text(v), "off");
      else
        notes.apply(key, text(v), impl + " (torch's rule for foreach and fused)");
    } else if (k == "fp32_optimizer_states") {
      if (!cpu_adam) {
        notes.ignore(key, text(v), "read by DeepSpeedCPUAdam (optimizer offload) only");
      } else if (!as_bool(key, v)) {
        throw UsageError(key + " false: DeepSpeedCPUAdam with bf16 optimizer states is not implemented");
      } else {
        notes.apply(key, text(v), "DeepSpeedCPUAdam keeps fp32 exp_avg / exp_avg_sq");
      }
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

// "linear" for --lr-scheduler-type linear ("hf:linear"), else the --lr-schedule value.
std::string hf_or_own_schedule(const std::string& s) { return is_hf_schedule(s) ? hf_schedule_type(s) : s; }

// scheduler: config/deepspeed_scheduler.cpp (runtime/lr_schedules.py; "auto" as
// trainer_config_process / trainer_config_finalize fill it).
void read_scheduler(const json& root, const TrainerArgs& args, DeepSpeedConfig& c, Resolver& r) {
  if (!root.contains("scheduler") || root["scheduler"].is_null()) {
    // No section: the file does not say what the lr does, the training script does. Said in the
    // report, beside the flags that pick each framework's behaviour.
    const std::string schedule = hf_or_own_schedule(args.train.lr_schedule);
    const std::string used = args.given_flag("--lr-scheduler-type") ? "--lr-scheduler-type " + schedule
                             : args.given_flag("--lr-schedule")     ? "--lr-schedule " + schedule
                                                                    : "zerobench's default --lr-schedule " + schedule;
    c.notes.apply("scheduler", "(absent)",
                  "lr follows " + used + "; DeepSpeed without a scheduler keeps the optimizer's lr constant "
                  "(--lr-schedule constant), an HF Trainer builds its lr_scheduler_type (default linear: "
                  "--lr-scheduler-type linear)");
    return;
  }
  const auto& s = root["scheduler"];
  auto& t = c.train;
  for (const char* flag : {"--lr-schedule", "--lr-scheduler-type"})
    if (args.given_flag(flag))
      throw UsageError(std::string(flag) + " " + hf_or_own_schedule(args.train.lr_schedule) +
                       " conflicts with the DeepSpeed scheduler section " +
                       "(transformers then hands DeepSpeed the section and builds no scheduler of its own)");
  SchedulerFill fill;
  fill.learning_rate = args.train.lr;
  fill.warmup_steps = args.train.lr_warmup_steps;
  const bool ratio = args.given_flag("--lr-warmup-ratio");
  fill.warmup_flag = ratio ? "--lr-warmup-ratio" : "--lr-warmup-steps";
  fill.warmup_flag_value = ratio ? "(ceil(--steps x ratio) = " + std::to_string(fill.warmup_steps) + " steps)"
                                 : std::to_string(fill.warmup_steps);
  fill.num_training_steps = args.train.steps;
  const auto check = [&](const std::string& key, const std::string& file_value, const std::string& flag,
                         const std::string& flag_value, bool equal) {
    r.explicit_vs_flag(key, file_value, flag, flag_value, equal);
  };
  t.deepspeed_scheduler = read_deepspeed_scheduler(s, t.lr, fill, check, c.notes);
  t.lr_schedule = t.deepspeed_scheduler.active() ? t.deepspeed_scheduler.type : "none";
}

}  // namespace

DeepSpeedConfig read_deepspeed_json(const json& root, const TrainerArgs& args, AutoFill mode,
                                    const StageGate& accept_stage) {
  if (!root.is_object()) throw UsageError("a DeepSpeed config must be a JSON object");
  DeepSpeedConfig c;
  c.train = args.train;
  auto& notes = c.notes;
  Resolver r{args, mode, notes};
  for (const auto& [k, v] : root.items())
    if (kRemovedTopLevel.count(k))
      throw UsageError(k + ": removed from DeepSpeed 0.19.8, which refuses a config that still has it");
  read_deepspeed_zero(root, args.hidden, accept_stage, c.zero, notes);
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
      if (s != "fp32" && s != "bf16" && s != "fp16")
        throw UsageError(k + " '" + text(v) + "' is not fp16, bf16 or fp32 (DeepSpeed refuses it)");
      c.communication_data_type = s;
      notes.apply(k, text(v), "communication_data_type " + s);
    } else if (k == "data_types") {
      if (!v.is_object()) throw UsageError("data_types " + v.dump() + " is not a section");
      for (const auto& [dk, dv] : v.items()) {
        const std::string key = "data_types." + dk;
        if (dk == "grad_accum_dtype") {
          if (dv.is_null()) continue;
          c.grad_accum_dtype = dtype_enum(key, dv);
          if (c.grad_accum_dtype == "int8")
            throw UsageError(key + " " + text(dv) + ": int8 gradient accumulation is not implemented");
          notes.apply(key, text(dv), "grad_accum_dtype " + c.grad_accum_dtype);
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
        throw UsageError(k + " " + text(v) + (c.zero.stage == 3 ? std::string(": DeepSpeed's ZeRO-3 refuses a factor other than 1.0 with reduce-scatter")
                                                                : ": a factor other than 1.0 is not implemented in zerobench"));
      notes.apply(k, text(v), "1.0");
    } else if (k == "prescale_gradients" && as_bool(k, v)) {
      throw UsageError(k + " true: " + (c.zero.stage == 3 ? std::string("DeepSpeed's ZeRO-3 refuses pre-scaled gradients with reduce-scatter")
                                                          : "pre-scaled gradients are not implemented in zerobench"));
    } else if (k == "gradient_allreduce_op") {
      const auto s = lower(text(v));  // get_gradient_allreduce_op: mean | sum
      if (s == "sum") throw UsageError(k + " sum: DeepSpeed refuses it with ZeRO stage 3");
      if (s != "mean") throw UsageError(k + " '" + text(v) + "' is not mean or sum (DeepSpeed refuses it)");
      notes.apply(k, text(v), "gradients averaged over ranks");
    } else if (k == "zero_force_ds_cpu_optimizer") {
      c.zero_force_ds_cpu_optimizer = as_bool(k, v);
      notes.apply(k, text(v), c.zero_force_ds_cpu_optimizer
                                  ? "under optimizer offload a client optimizer becomes DeepSpeedCPUAdam (accelerate)"
                                  : "under optimizer offload the client torch.optim.AdamW steps on the host");
    } else if (k == "torch_autocast") {
      if (v.is_object() && v.contains("enabled") && as_bool("torch_autocast.enabled", v["enabled"]))
        throw UsageError("torch_autocast.enabled true: DeepSpeed's autocast mode is not implemented (use bf16)");
      notes.ignore(k, v.dump(), "off");
    } else if (k == "compile") {
      // deepspeed/compile/config.py CompileConfig (extra="forbid", "auto" dropped): DeepSpeedConfig
      // refuses any other key, e.g. the torch.compile-style "backend" / "disable".
      static const std::set<std::string> kCompileFields = {
          "deepcompile", "autoep_non_moe", "free_activation", "free_activation_threshold", "offload_activation",
          "offload_activation_pin_memory", "offload_opt_states", "double_buffer", "symmetric_memory", "debug_log",
          "offload_parameters", "sync_before_reduce", "sync_after_reduce", "sync_before_allgather",
          "sync_after_allgather", "keep_int_input_tensors", "keep_all_input_tensors", "passes"};
      if (!v.is_object()) throw UsageError("compile " + v.dump() + " is not a section");
      for (const auto& [ck, cv] : v.items())
        if (!kCompileFields.count(ck) && !is_auto(cv))
          throw UsageError("compile." + ck + ": not a DeepSpeed 0.19.8 compile setting (CompileConfig forbids extra "
                           "keys; DeepSpeed refuses the file)");
      if (v.contains("deepcompile") && !is_auto(v["deepcompile"]) && as_bool("compile.deepcompile", v["deepcompile"]))
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
    } else if (k == "weight_quantization" || k == "expert_parallel" || k == "moe" || k == "msamp") {
      throw UsageError(k + ": not implemented in zerobench");
    } else if (k == "fp8") {
      // DeepSpeedConfig has no fp8 setting (runtime/config.py never reads the key): DeepSpeed trains
      // in the precision the bf16/fp16 sections give, as for any key it does not know. accelerate's
      // fp8 is its own mixed_precision fp8, refused in an accelerate file.
      notes.ignore(k, v.dump(), "not a DeepSpeed 0.19.8 setting (DeepSpeedConfig reads no fp8 key): DeepSpeed ignores "
                                "the block and trains in the bf16/fp16 sections' precision");
      notes.warn("fp8: DeepSpeed 0.19.8 has no fp8 setting and ignores the block; this run is not fp8");
    } else if (kTopIgnored.count(k)) {
      notes.ignore(k, text(v), kTopIgnored.at(k));
    } else {
      // DeepSpeedConfig reads the keys it knows and never looks at others.
      notes.ignore(k, text(v), "not a DeepSpeed 0.19.8 setting: DeepSpeed ignores it too");
      notes.warn(k + " is not a DeepSpeed setting; DeepSpeed ignores it");
    }
  }
  return c;
}

}  // namespace zb::config
