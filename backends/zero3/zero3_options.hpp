// zero3_options.hpp — ZeRO3-mode options, named and defaulted as DeepSpeed's
// runtime/zero/config.py names them, and the readers for a DeepSpeed config: a DeepSpeed JSON on
// its own (as transformers' HF Trainer feeds it to DeepSpeed) and accelerate's DeepSpeed plugin
// (the YAML's deepspeed_config block, or the deepspeed_config_file it names).
// Owns: defaults, key aliases (DeepSpeedZeroConfig's pydantic aliases), "auto" resolution (as
// transformers' HfTrainerDeepSpeedConfig and accelerate's _prepare_deepspeed resolve it),
// validation, and the decision per key: honoured, refused (UsageError naming key, value and why)
// or ignored (docs/configs.md). Must not: run anything, or resolve file paths.
#pragma once
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "backends/config_notes.hpp"
#include "backends/engine.hpp"

namespace zb::backends::zero3 {

struct Zero3Options {
  int64_t reduce_bucket_size = 500000000;           // elements per gradient reduce bucket
  int64_t stage3_prefetch_bucket_size = 50000000;   // elements prefetched ahead (trace-based)
  int64_t stage3_param_persistence_threshold = 100000;  // numel <= this: never released
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;   // keep a param if reused within this many elements
  int64_t sub_group_size = 1000000000;              // fp32 master / optimizer step granularity (0: one per param)
  bool overlap_comm = true;                         // stage 3 turns it on by default
  bool contiguous_gradients = true;
  std::string communication_data_type;              // "" = model dtype; bf16 | fp32
  std::string grad_accum_dtype;                     // "" = model dtype; bf16 | fp32
};

nlohmann::json to_json(const Zero3Options& o);
Zero3Options zero3_options_from_json(const nlohmann::json& j);  // keys as in to_json; throws UsageError

// What HF's Trainer would hold as TrainingArguments: zerobench's flags. "auto" takes their values
// (transformers integrations/deepspeed.py trainer_config_process / trainer_config_finalize).
struct TrainerArgs {
  TrainConfig train;             // the flags' values (defaults where not given)
  std::set<std::string> given;   // flags the command line set: "--micro-batch", "--lr", ...
  std::string precision;         // "bf16" or "fp32" when --precision was given, else ""
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

struct DeepSpeedConfig {
  Zero3Options zero;
  std::string precision;  // "bf16" or "fp32"
  TrainConfig train;      // args.train with the file's batch, clipping, optimizer and scheduler applied
  ConfigNotes notes;
};

// Reads a DeepSpeed config (the parsed JSON); every key is honoured, refused or listed in notes.
// Throws UsageError naming the key, its value and why.
DeepSpeedConfig read_deepspeed_json(const nlohmann::json& root, const TrainerArgs& args, AutoFill mode);

// accelerate's DeepSpeedPlugin: the config it hands DeepSpeed. `block` is the YAML's
// deepspeed_config mapping; `file_json` the content of its deepspeed_config_file (nullptr when it
// names none); `mixed_precision` the run's accelerate mixed_precision (no|bf16|fp16|fp8) and
// `mixed_precision_in_yaml` whether the YAML set it (accelerate refuses it beside a file).
// Follows DeepSpeedPlugin.__post_init__ / _deepspeed_config_checks / set_mixed_precision.
nlohmann::json deepspeed_config_from_accelerate(const nlohmann::json& block, const nlohmann::json* file_json,
                                                const std::string& mixed_precision, bool mixed_precision_in_yaml,
                                                ConfigNotes& notes);

}  // namespace zb::backends::zero3
