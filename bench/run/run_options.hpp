// run_options.hpp — everything `zerobench run` can be told, as one plain struct with defaults,
// registered on a CLI11 app in one place. Owns: flag names, defaults and validation. Must not:
// run anything.
#pragma once
#include <CLI/CLI.hpp>

#include <map>
#include <set>
#include <string>

#include "backends/config_hooks.hpp"
#include "backends/engine.hpp"
#include "bench/run/config_resolve.hpp"

namespace zb::bench {

struct FaultInjection {  // hidden test hook: --fault-inject exit|crash|hang|sigkill|save-sigkill|save-error:RANK:STEP
  std::string kind;      // empty = none
  int rank = -1;
  int64_t step = -1;
};

struct RunOptions {
  int nproc = 1;
  std::string model = "tiny";
  std::string model_dir;      // --model-dir: an HF Llama/Granite folder (shape and initial weights)
  std::string load_strategy;  // --load-strategy (with --model-dir); empty = from the config
  std::string checkpoint_dir, state_dict = "sharded", resume;  // checkpoints (bench/lifecycle)
  int64_t checkpoint_every = 0;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;  // 0 = preset's
  std::string backend = backends::default_backend_name();  // the first registered
  std::string precision = "fp32";
  backends::TrainConfig train;
  std::string device = "cpu";
  std::string out;            // default: out/<backend>-<precision>-<model>-w<W>.json
  double peak_tflops = 0;     // 0 = datasheet (GPU) or a measured GEMM (CPU)
  int threads = 0;            // intra-op threads per rank; 0 = cores / local ranks
  double timeout_s = 0;       // launcher wall limit; 0 = none
  bool quiet = false;
  int emulate_world_size = 0;  // > 0: this one process plays rank emulate_rank of that many
  int emulate_rank = 0;
  std::string fault_inject;
  double plant_lr_scale = 1.0;  // hidden test hook (crossval's planted difference): lr x this
  // Profiling: extra steps after the measured ones, traced (CUPTI on CUDA, the host source on
  // CPU); they are not in steps[] or the summary. --trace implies --profile.
  bool profile = false;
  int profile_steps = 3;
  std::string trace;
  // Any accelerate config (FSDP, DEEPSPEED, MULTI_GPU) or DeepSpeed JSON: the backend that claims it
  // runs it (bench/run/config_resolve.hpp). --accelerate-config / --deepspeed-config are the
  // kind-checked spellings.
  std::string config, accelerate_config, deepspeed_config;
  bool no_memory_check = false;  // skip the pre-flight memory estimate check
  // The backends' own flags (BackendInfo::config.flags), by name, as CLI11 parsed them; only those in
  // `given` are read (backends/config_hooks.hpp FlagValues).
  struct BackendFlagSlot {
    std::string text;
    int64_t count = 0;
    double number = 0;
    bool on = false;
  };
  std::map<std::string, BackendFlagSlot> backend_flags;
  // Which flags the command line gave (mark_given; config files fill the rest).
  bool nproc_given = false, precision_given = false, micro_batch_given = false, grad_accum_given = false,
       grad_clip_given = false, backend_given = false;
  std::set<std::string> given;  // every flag the command line set, "--micro-batch" etc.

  models::ModelConfig model_config() const;  // preset + overrides, validated

  // The run as the command line and its config file define it. Validated (throws UsageError).
  struct Resolved {
    std::string backend;   // --backend, or the one a config file picks
    backends::EngineSpec spec;
    ConfigProvenance provenance;  // the config file's sources, applied/ignored keys, warnings
    std::string load_strategy;    // with --model-dir: all-ranks | rank0-broadcast | sharded
  };
  Resolved resolve() const;
  backends::EngineSpec engine_spec() const { return resolve().spec; }
  // World size: --nproc, else a config file's num_processes, else 1 (this machine's launch).
  int world_size_hint() const;
  // The run's world size: --emulate-world-size, a torchrun/SLURM job's, else world_size_hint().
  int world_size() const;
  // The config file and the flag that named it ("" when none).
  std::pair<std::string, std::string> config_file() const;
  FaultInjection fault() const;
  std::string default_out(int world_size) const;
};

void add_run_options(CLI::App& app, RunOptions& o);
// The --precision help from the registry: "backend: p1|p2; ..." for every backend, or with
// crossval_only for those with a reference framework (crossval's --precision).
std::string precisions_help(bool crossval_only = false);
// Records which flags `app` (after parsing) was given: o.given and the *_given fields.
void mark_given(const CLI::App& app, RunOptions& o);

// --activation-checkpointing [none|full|selective-layer:N|selective-op] into `ac`; bare, it means full.
void add_activation_checkpointing_option(CLI::App& app, models::ActivationCheckpointing& ac, const std::string& help);

// The model-shape flags only (for model-info).
void add_model_options(CLI::App& app, RunOptions& o);

}  // namespace zb::bench
