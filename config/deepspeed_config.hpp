// deepspeed_config.hpp — a DeepSpeed config read as DeepSpeed 0.19.8 reads it (runtime/config.py
// DeepSpeedConfig: precision, batch sizes, gradient clipping, optimizer, scheduler, top-level
// keys; zero_optimization through config/deepspeed_zero_config.hpp), with "auto" resolved as
// transformers' HfTrainerDeepSpeedConfig or accelerate's _prepare_deepspeed resolves it.
// Owns: the typed result (DeepSpeedConfig), key aliases, "auto" resolution, validation, and the
// decision per key: honoured, refused (UsageError naming key, value and why) or ignored
// (docs/configs.md). Must not: name a backend, decide which ZeRO stage runs (the backend that
// claims the file passes a StageGate), run anything, or resolve file paths.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>

#include "config/adamw_impl.hpp"
#include "config/config_notes.hpp"
#include "config/deepspeed_scheduler.hpp"
#include "config/deepspeed_zero_config.hpp"

namespace zb::config {

// The training settings a DeepSpeed config can set (transformers' TrainingArguments side): the
// command line's values going in, the file's applied coming out.
struct TrainingArguments {
  int64_t micro_batch = 4, grad_accum = 1, steps = 10;
  double lr = 3e-3;                     // the optimizer's lr
  std::string lr_schedule = "cosine";  // or a scheduler section's type (or "none": a section without one)
  int64_t lr_warmup_steps = 0;         // HF's get_warmup_steps (--lr-warmup-steps, or from --lr-warmup-ratio)
  DeepSpeedScheduler deepspeed_scheduler;
  double weight_decay = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double grad_clip = 1.0;
  AdamWImpl adamw_impl = AdamWImpl::kFused;  // --optim, or torch_adam's foreach/fused (adamw_impl.hpp)
};

// What HF's Trainer would hold as TrainingArguments: zerobench's flags. "auto" takes their values
// (transformers integrations/deepspeed.py trainer_config_process / trainer_config_finalize).
struct TrainerArgs {
  TrainingArguments train;       // the flags' values (defaults where not given)
  std::set<std::string> given;   // flags the command line set: "--micro-batch", "--lr", ...
  std::string precision;         // "bf16", "fp16" or "fp32" when --precision was given, else ""
  int world_size = 1;
  int64_t hidden = 0;            // model hidden size, for the bucket "auto"s
  bool given_flag(const std::string& f) const { return given.count(f) > 0; }
};

// Who feeds the DeepSpeed config to DeepSpeed, which decides what an explicit value that differs
// from a flag given on the command line means.
enum class AutoFill {
  kHfTrainer,   // a DeepSpeed JSON on its own: HfTrainerDeepSpeedConfig.fill_match refuses a mismatch
  kAccelerate,  // through accelerate: deepspeed_config_process(must_match=False) keeps the file's value
};

// The `fp16` section's loss-scaling keys (runtime/precision_config.py DeepSpeedFP16Config; its
// defaults), read when fp16 is enabled. loss_scale 0: dynamic (DynamicLossScaler), > 0: static.
struct DeepSpeedFP16 {
  double loss_scale = 0;
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  int64_t min_loss_scale = 1;
};

struct DeepSpeedConfig {
  DeepSpeedZeroConfig zero;
  DeepSpeedFP16 fp16;                   // meaningful when precision == "fp16"
  std::string communication_data_type;  // "" = model dtype; bf16 | fp32 (top-level key)
  std::string grad_accum_dtype;         // "" = model dtype; bf16 | fp32 (data_types.grad_accum_dtype)
  std::string precision;                // "bf16", "fp16" or "fp32"
  TrainingArguments train;              // args.train with the file's batch, clipping, optimizer and scheduler
  // Which optimizer DeepSpeed builds (engine.py _configure_optimizer / get_optimizer_configuration):
  // an "optimizer" section (else the trainer's own AdamW is the client optimizer), its
  // params.torch_adam, and the top-level zero_force_ds_cpu_optimizer (default true) that, under
  // optimizer offload, makes accelerate replace a client optimizer by DeepSpeedCPUAdam.
  bool optimizer_section = false;
  bool torch_adam = false;
  bool zero_force_ds_cpu_optimizer = true;
  ConfigNotes notes;
};

// Reads a DeepSpeed config (the parsed JSON); every key is honoured, refused or listed in notes.
// `accept_stage` is asked about the ZeRO stage before zero_optimization's keys are read (it throws
// for a stage its backend does not run). Throws UsageError naming the key, its value and why.
DeepSpeedConfig read_deepspeed_json(const nlohmann::json& root, const TrainerArgs& args, AutoFill mode,
                                    const StageGate& accept_stage);

}  // namespace zb::config
