// run_options.cpp — CLI11 registration and validation of run options (see run_options.hpp).
#include "backends/backend_info.hpp"
#include "bench/run/run_options.hpp"

#include <cmath>
#include <map>

#include "bench/flag_checks.hpp"
#include "config/hf_scheduler.hpp"
#include "models/checkpoint/weight_loader.hpp"
#include "models/token_data.hpp"
#include "runtime/dist_env.hpp"
#include "runtime/errors.hpp"

namespace zb::bench {

void add_model_options(CLI::App& app, RunOptions& o) {
  app.add_option("--model", o.model, "model preset: granite-7b, llama2-7b, llama2-13b, llama2-70b, small, tiny")
      ->capture_default_str();
  app.add_option("--layers", o.layers, "override: decoder blocks")->check(AtLeastOne());
  app.add_option("--hidden", o.hidden, "override: hidden size")->check(AtLeastOne());
  app.add_option("--heads", o.heads, "override: attention heads")->check(AtLeastOne());
  app.add_option("--kv-heads", o.kv_heads, "override: key/value heads (GQA)")->check(AtLeastOne());
  app.add_option("--ffn", o.ffn, "override: SwiGLU inner size")->check(AtLeastOne());
  app.add_option("--vocab", o.vocab, "override: vocabulary size")->check(AtLeastOne());
  app.add_option("--model-dir", o.model_dir,
                 "a Hugging Face Llama/Granite folder (config.json + model.safetensors or its index): "
                 "its shape, and its weights as the starting point");
}

namespace {
// Each registered backend's own flags (BackendInfo::config.flags), once per name (the first declaration's
// help), bound to o.backend_flags.
void add_backend_flags(CLI::App& app, RunOptions& o) {
  using Kind = backends::BackendFlag::Kind;
  for (const auto& b : backends::registered_backends())
    for (const auto& f : b.config.flags) {
      if (app.get_option_no_throw(f.name)) continue;  // declared by an earlier backend
      auto& slot = o.backend_flags[f.name];
      CLI::Option* opt = nullptr;
      switch (f.kind) {
        case Kind::kText:
          opt = app.add_option(f.name, slot.text, f.help);
          if (!f.choices.empty()) opt->check(CLI::IsMember(f.choices));
          break;
        case Kind::kCount:
          opt = app.add_option(f.name, slot.count, f.help)->check(f.min_count >= 1 ? AtLeastOne() : NonNegative());
          break;
        case Kind::kPositive:
          if (!f.default_text.empty()) slot.number = std::stod(f.default_text);
          opt = app.add_option(f.name, slot.number, f.help)->check(Positive());
          break;
        case Kind::kSwitch:
          opt = app.add_flag(f.name, slot.on, f.help);
          break;
      }
      if (!f.default_text.empty()) opt->capture_default_str();
    }
}

// The backend flags the command line gave, with their values.
backends::FlagValues given_backend_flags(const RunOptions& o) {
  backends::FlagValues out;
  for (const auto& [name, slot] : o.backend_flags) {
    if (!o.given.count(name)) continue;
    auto& v = out[name];
    v.count = slot.count;
    v.number = slot.number;
    v.text = slot.on ? "true" : slot.text;
  }
  return out;
}

// A flag of another backend given with this one: "<title> options (--a, --b, ...) need --backend X".
void refuse_foreign_flags(const backends::FlagValues& given, const std::string& backend) {
  const auto& all = backends::registered_backends();
  auto declares = [](const backends::BackendInfo& b, const std::string& name) -> const backends::BackendFlag* {
    for (const auto& f : b.config.flags)
      if (f.name == name) return &f;
    return nullptr;
  };
  const backends::BackendInfo* running = nullptr;
  for (const auto& b : all)
    if (b.name == backend) running = &b;
  for (const auto& [name, value] : given) {
    if (running && declares(*running, name)) continue;
    for (const auto& owner : all) {
      const auto* f = declares(owner, name);
      if (!f) continue;
      if (!f->refused_elsewhere) break;
      std::string some;
      for (size_t i = 0; i < owner.config.flags.size() && i < 2; ++i) some += owner.config.flags[i].name + ", ";
      throw UsageError(owner.config.flags_title + " options (" + some + "...) need --backend " + owner.name);
    }
  }
}

// The --backend and --precision help, from what the backends registered (never typed by hand: a
// backend's precisions are its descriptor's).
std::string backends_help() {
  std::string names;
  for (const auto& b : backends::registered_backends()) names += (names.empty() ? "" : "|") + b.name;
  return "training engine: " + names;
}
}  // namespace

std::string precisions_help(bool crossval_only) {
  std::string help;
  for (const auto& b : backends::registered_backends()) {
    if (crossval_only && !b.crossval) continue;
    std::string p;
    for (const auto& x : b.precisions) p += (p.empty() ? "" : "|") + x;
    help += (help.empty() ? "" : "; ") + b.name + ": " + p;
  }
  return help;
}

namespace {

// What transformers' get_scheduler refuses of an --lr-scheduler-type run, refused here (exit 2):
// --min-lr-ratio is its min_lr_rate (scheduler_specific_kwargs), required by the two min-lr types
// and a TypeError for every type but "constant" (for which get_scheduler drops the kwargs).
void check_hf_schedule(const backends::TrainConfig& t, const std::set<std::string>& given) {
  const std::string type = config::hf_schedule_type(t.lr_schedule);
  const bool ratio = given.count("--min-lr-ratio") > 0;
  if (config::hf_schedule_takes_min_lr_rate(type) && !ratio)
    throw UsageError("--lr-scheduler-type " + type + " needs --min-lr-ratio (transformers: \"One of min_lr or "
                     "min_lr_rate should be set through the `lr_scheduler_kwargs`\")");
  if (!config::hf_schedule_takes_min_lr_rate(type) && type != "constant" && ratio)
    throw UsageError("--min-lr-ratio " + std::to_string(t.min_lr_ratio) + " with --lr-scheduler-type " + type +
                     ": transformers' schedule takes no min_lr_rate (get_scheduler raises TypeError); only "
                     "cosine_with_min_lr and cosine_warmup_with_min_lr do");
  const auto error = config::hf_schedule_error({type, t.lr, t.lr_warmup_steps, t.steps, t.min_lr_ratio});
  if (!error.empty()) throw UsageError(error);
}
}  // namespace

void add_activation_checkpointing_option(CLI::App& app, models::ActivationCheckpointing& ac, const std::string& help) {
  // A bare flag gives CLI11's "true" (an option that may take no value is flag-like): full.
  app.add_option_function<std::string>(
         "--activation-checkpointing",
         [&ac](const std::string& v) { ac = *models::parse_activation_checkpointing(v); }, help)
      ->expected(0, 1)
      ->check(CLI::Validator(models::activation_checkpointing_problem, "MODE", "AC"));
}

void add_run_options(CLI::App& app, RunOptions& o) {
  auto& t = o.train;
  app.add_option("--nproc", o.nproc, "ranks to launch on this machine (built-in launcher)")
      ->check(FiniteRange(1, 1024))
      ->capture_default_str();
  add_model_options(app, o);
  app.add_option("--backend", o.backend, backends_help())->capture_default_str();
  app.add_option("--precision", o.precision, precisions_help())->capture_default_str();
  app.add_option("--micro-batch", t.micro_batch, "samples per rank per micro-batch")
      ->check(AtLeastOne())
      ->capture_default_str();
  app.add_option("--seq-len", t.seq_len, "tokens per sample")->check(AtLeastOne())->capture_default_str();
  app.add_option("--grad-accum", t.grad_accum, "micro-batches per optimizer step")
      ->check(AtLeastOne())
      ->capture_default_str();
  app.add_flag("--sync-each-batch", t.sync_each_batch,
               "reduce gradients after every micro-batch (accelerate GradientAccumulationPlugin(sync_each_batch=True)); "
               "default: only after the last, the others under no_sync (zero3 reduces every micro-batch either way)");
  app.add_option("--steps", t.steps, "optimizer steps (warm-up included)")->check(AtLeastOne())->capture_default_str();
  app.add_option("--warmup", t.warmup, "steps excluded from timing statistics")
      ->check(NonNegative())
      ->capture_default_str();
  app.add_option("--lr", t.lr, "peak learning rate")->check(NonNegative())->capture_default_str();
  app.add_option("--lr-schedule", t.lr_schedule, "constant|cosine")
      ->check(CLI::IsMember({"constant", "cosine"}))
      ->capture_default_str();
  // transformers' TrainingArguments.lr_scheduler_type (HF's default: linear), carried as "hf:NAME".
  app.add_option_function<std::string>(
         "--lr-scheduler-type", [&t](const std::string& name) { t.lr_schedule = "hf:" + name; },
         "an HF Trainer schedule, transformers' get_scheduler (linear, cosine, constant, constant_with_warmup, "
         "inverse_sqrt, polynomial, cosine_with_restarts, cosine_with_min_lr and cosine_warmup_with_min_lr with "
         "--min-lr-ratio as min_lr_rate), over --lr-warmup-steps/--lr-warmup-ratio and --steps")
      ->check(CLI::Validator([](std::string& name) { return config::hf_scheduler_type_error(name); }, "NAME"))
      ->excludes("--lr-schedule");
  app.add_option("--lr-warmup-steps", t.lr_warmup_steps,
                 "LR warm-up steps (HF's warmup_steps: zerobench's schedule, a DeepSpeed warmup_num_steps \"auto\")")
      ->check(NonNegative())
      ->capture_default_str();
  app.add_option("--lr-warmup-ratio", t.lr_warmup_ratio,
                 "LR warm-up as a fraction of --steps, in [0, 1): ceil(steps x ratio) warm-up steps (HF's "
                 "warmup_steps < 1, get_warmup_steps)")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes("--lr-warmup-steps");
  app.add_option("--min-lr-ratio", t.min_lr_ratio, "cosine floor as a fraction of --lr")
      ->check(FiniteRange(0, 1))
      ->capture_default_str();
  app.add_option("--weight-decay", t.weight_decay, "AdamW decoupled weight decay")
      ->check(NonNegative())
      ->capture_default_str();
  app.add_option("--optim", t.adamw_impl,
                 "adamw_torch_fused|adamw_torch: HF TrainingArguments' optim, torch.optim.AdamW with fused=True (HF's "
                 "default) or torch's default (foreach on CUDA, the for-loop on CPU); a DeepSpeed optimizer section "
                 "decides for itself")
      ->transform(CLI::CheckedTransformer(std::map<std::string, config::AdamWImpl>{
          {"adamw_torch_fused", config::AdamWImpl::kFused}, {"adamw_torch", config::AdamWImpl::kTorchDefault}}))
      ->default_str("adamw_torch_fused");
  app.add_option("--grad-clip", t.grad_clip, "max global gradient norm (0 = off)")
      ->check(NonNegative())
      ->capture_default_str();
  add_activation_checkpointing_option(app, t.activation_checkpointing,
                                      "blocks recomputed in backward: none, full (the bare flag: every block), "
                                      "selective-layer:N (blocks N, 2N, ...: torchtitan's selective AC), selective-op (every block, keeping "
                                      "torchtitan's op-SAC save list: every other matmul, SDPA on CUDA; docs/metrics.md)");
  app.add_flag("--measure-lost-updates", t.measure_lost_updates,
               "record per step the fraction of weights whose AdamW update rounded away");
  app.add_option("--data", t.data, "random|markov|megatron:PREFIX|tokens:PATH:uint16|uint32:eos=ID|lengths:FILE.json|csv (docs/data.md)")
      ->check(CLI::Validator(models::data_spec_problem, "DATA", "DATA"))
      ->capture_default_str();
  app.add_option("--batching", t.batching,
                 "pad|pad-longest|pack|pack-naive: documents padded a row each (to --seq-len, or to the "
                 "micro-batch's longest), packed with per-document attention, or concatenated under one causal "
                 "mask (the default for a file; docs/data.md)")
      ->check(CLI::IsMember({"pad", "pad-longest", "pack", "pack-naive"}));
  app.add_option("--seed", t.seed, "seed for weights and data")->capture_default_str();
  app.add_option("--device", o.device, "cpu|cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--out", o.out, "report path (default out/<backend>-<precision>-<model>-w<W>.json)");
  app.add_option("--peak-tflops", o.peak_tflops, "peak dense TFLOP/s for MFU (default: datasheet or measured GEMM)")
      ->check(NonNegative());
  app.add_option("--threads", o.threads, "intra-op threads per rank (default cores / local ranks)")
      ->check(NonNegative());
  app.add_option("--timeout", o.timeout_s, "stop all ranks after this many seconds (0 = no limit)")
      ->check(NonNegative());
  app.add_option("--config", o.config,
                 "an accelerate config (FSDP: fsdp, or fsdp2 with fsdp_version 2; DEEPSPEED; MULTI_GPU) or a DeepSpeed "
                 "JSON: picks the backend and "
                 "reads its settings as accelerate/DeepSpeed would (docs/configs.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--accelerate-config", o.accelerate_config, "an accelerate config (YAML or JSON); see --config")
      ->check(CLI::ExistingFile);
  app.add_option("--deepspeed-config", o.deepspeed_config, "a DeepSpeed JSON config (its zero_optimization.stage picks zero0|zero1|zero2|zero3); see --config")
      ->check(CLI::ExistingFile);
  add_backend_flags(app, o);
  app.add_option("--emulate-world-size", o.emulate_world_size,
                 "one process plays one rank of a job of this many ranks (shapes and bytes exact, no data moved)")
      ->check(FiniteRange(1, 1 << 20));
  app.add_option("--emulate-rank", o.emulate_rank, "with --emulate-world-size: the rank to play (default 0)")
      ->check(NonNegative());
  app.add_flag("--profile", o.profile,
               "trace extra steps after the measured ones (CUPTI on CUDA, collectives and the training thread on "
               "CPU): overlap, exposed communication, temporal breakdown, top kernels in the report's profile");
  app.add_option("--profile-steps", o.profile_steps, "with --profile: how many steps to trace")
      ->check(FiniteRange(1, 1000))
      ->capture_default_str();
  app.add_option("--trace", o.trace, "write a Chrome/Perfetto trace of the profiled steps to FILE (implies --profile)");
  app.add_flag("--no-memory-check", o.no_memory_check,
               "start even when the pre-flight estimate of a rank's peak memory exceeds what is available");
  app.add_option("--load-strategy", o.load_strategy,
                 "with --model-dir: all-ranks | rank0-broadcast (sync_module_states) | sharded "
                 "(default: rank0-broadcast when the config syncs module states, else all-ranks)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "write checkpoints here (docs/lifecycle.md)");
  app.add_option("--checkpoint-every", o.checkpoint_every, "with --checkpoint-dir: save after every N optimizer steps")
      ->check(AtLeastOne());
  app.add_option("--state-dict", o.state_dict,
                 "checkpoint type: sharded (each rank its own files) | full (gathered to rank 0, an HF folder)")
      ->capture_default_str();
  app.add_option("--resume", o.resume, "continue exactly from a checkpoint (a --checkpoint-dir, or one tag dir in it)");
  app.add_flag("--quiet", o.quiet, "print only errors");
  app.add_option("--fault-inject", o.fault_inject, "test hook: exit|crash|hang|sigkill|save-sigkill|save-error:RANK:STEP")->group("");
  app.add_option("--plant-lr-scale", o.plant_lr_scale, "test hook: multiply the lr schedule (crossval's planted difference)")
      ->check(CLI::PositiveNumber)
      ->group("");
}

models::ModelConfig RunOptions::model_config() const {
  if (!model_dir.empty()) {
    for (const char* f : {"--model", "--layers", "--hidden", "--heads", "--kv-heads", "--ffn", "--vocab"})
      if (given.count(f)) throw UsageError(std::string(f) + " conflicts with --model-dir (its config.json sets the model)");
    return models::checkpoint::read_model_dir_config(model_dir);
  }
  auto cfg = models::preset(model);
  if (layers) cfg.layers = layers;
  if (hidden) cfg.hidden = hidden;
  if (heads) cfg.heads = heads;
  if (kv_heads) cfg.kv_heads = kv_heads;
  if (ffn) cfg.ffn = ffn;
  if (vocab) cfg.vocab = vocab;
  if (layers || hidden || heads || kv_heads || ffn || vocab) cfg.preset = model + "+overrides";
  cfg.validate();
  return cfg;
}

void mark_given(const CLI::App& app, RunOptions& o) {
  o.given.clear();
  for (const CLI::Option* opt : app.get_options())
    if (opt->count() > 0) o.given.insert(opt->get_name());
  auto has = [&](const char* f) { return o.given.count(f) > 0; };
  o.nproc_given = has("--nproc");
  o.precision_given = has("--precision");
  o.micro_batch_given = has("--micro-batch");
  o.grad_accum_given = has("--grad-accum");
  o.grad_clip_given = has("--grad-clip");
  o.backend_given = has("--backend");
}

std::pair<std::string, std::string> RunOptions::config_file() const {
  const int n = int(!config.empty()) + int(!accelerate_config.empty()) + int(!deepspeed_config.empty());
  if (n > 1) throw UsageError("give one of --config, --accelerate-config and --deepspeed-config");
  if (!config.empty()) return {config, "--config"};
  if (!accelerate_config.empty()) return {accelerate_config, "--accelerate-config"};
  if (!deepspeed_config.empty()) return {deepspeed_config, "--deepspeed-config"};
  return {"", ""};
}

int RunOptions::world_size_hint() const {
  const auto [path, flag] = config_file();
  const int from_file = path.empty() ? 0 : config_num_processes(path, flag, nproc_given);
  if (nproc_given || from_file == 0) return nproc;
  return from_file;
}

int RunOptions::world_size() const {
  if (emulate_world_size > 0) return emulate_world_size;
  const auto env = runtime::discover_dist_env(runtime::process_env());
  if (env.source != "single") return env.world_size;
  return world_size_hint();
}

RunOptions::Resolved RunOptions::resolve() const {
  Resolved r;
  auto& spec = r.spec;
  auto& notes = r.provenance.notes;
  spec.model = model_config();
  spec.train = train;
  // transformers' TrainingArguments.get_warmup_steps: a warmup_steps below 1 is a ratio of the
  // training steps, ceil(num_training_steps * warmup_steps).
  if (given.count("--lr-warmup-ratio")) {
    if (!(train.lr_warmup_ratio < 1.0))
      throw UsageError("--lr-warmup-ratio " + std::to_string(train.lr_warmup_ratio) + " must be below 1 (use --lr-warmup-steps)");
    spec.train.lr_warmup_steps = int64_t(std::ceil(double(train.steps) * train.lr_warmup_ratio));
  }
  if (config::is_hf_schedule(spec.train.lr_schedule)) check_hf_schedule(spec.train, given);
  spec.precision = precision;
  r.backend = backend;
  const auto [path, flag] = config_file();
  bool file_options = false;
  if (!path.empty()) {
    ConfigRequest req;
    req.path = path;
    req.flag = flag;
    req.backend = backend;
    req.backend_given = backend_given;
    req.precision = precision;
    req.precision_given = precision_given;
    req.train = spec.train;
    req.given = given;
    req.world_size = world_size();
    req.hidden = spec.model.hidden;
    auto cfg = resolve_config(req);
    r.backend = cfg.backend;
    r.provenance = cfg.provenance;
    spec.train = cfg.train;
    if (!precision_given && !cfg.precision.empty()) spec.precision = cfg.precision;
    spec.options = cfg.options;
    file_options = true;
  }
  // The backend's own flags, over the file's options (as accelerate launch's flags override its
  // config); another backend's flags are refused.
  const auto flags = given_backend_flags(*this);
  refuse_foreign_flags(flags, r.backend);
  for (const auto& b : backends::registered_backends())
    if (b.name == r.backend && b.config.apply_flags) b.config.apply_flags(flags, file_options, spec, notes);
  if (emulate_world_size > 0 && nproc_given && nproc > 1)
    throw UsageError("--emulate-world-size runs one process; drop --nproc " + std::to_string(nproc));
  if (emulate_world_size > 0 && emulate_rank >= emulate_world_size)
    throw UsageError("--emulate-rank " + std::to_string(emulate_rank) + " must be below --emulate-world-size " +
                     std::to_string(emulate_world_size));
  if (spec.train.warmup >= spec.train.steps)
    throw UsageError("--warmup " + std::to_string(spec.train.warmup) + " must be below --steps " +
                     std::to_string(spec.train.steps) + " (no step would be measured)");
  // lr_at is linear in these: every step's lr scales (1.0 unless planted).
  spec.train.lr *= plant_lr_scale;
  spec.train.deepspeed_scheduler.scale_lrs(plant_lr_scale);
  backends::validate_precision(r.backend, spec.precision);  // validates both names
  fault();                     // validates the hook
  // --model-dir's load strategy; by default the one the config's options imply: FSDP1's
  // sync_module_states / FSDP2's cpu_ram_efficient_loading broadcast from rank 0.
  if (!load_strategy.empty() && model_dir.empty()) throw UsageError("--load-strategy needs --model-dir");
  if (state_dict != "full" && state_dict != "sharded")
    throw UsageError("--state-dict '" + state_dict + "' must be full or sharded");
  if (checkpoint_every > 0 && checkpoint_dir.empty()) throw UsageError("--checkpoint-every needs --checkpoint-dir");
  if (!checkpoint_dir.empty() && checkpoint_every <= 0) throw UsageError("--checkpoint-dir needs --checkpoint-every N");
  if (!resume.empty() && !model_dir.empty())
    throw UsageError("--resume restores the weights: drop --model-dir " + model_dir);
  if (!model_dir.empty()) {
    if (!load_strategy.empty()) {
      r.load_strategy = models::checkpoint::load_strategy_name(models::checkpoint::load_strategy_from_name(load_strategy));
    } else {
      bool syncs = false;
      for (const auto& b : backends::registered_backends())
        if (b.name == r.backend && b.training.broadcasts_initial_weights)
          syncs = b.training.broadcasts_initial_weights(spec.options);
      // An emulated rank has no rank 0 to receive from: it reads for itself.
      r.load_strategy = syncs && emulate_world_size == 0 ? "rank0-broadcast" : "all-ranks";
    }
    if (r.load_strategy == "rank0-broadcast" && emulate_world_size > 0 && emulate_rank != 0)
      throw UsageError("--load-strategy rank0-broadcast: emulated rank " + std::to_string(emulate_rank) +
                       " receives no broadcast (its collectives are local copies); use all-ranks or sharded");
  }
  return r;
}

FaultInjection RunOptions::fault() const {
  FaultInjection f;
  if (fault_inject.empty()) return f;
  auto first = fault_inject.find(':'), second = fault_inject.rfind(':');
  try {
    if (first == std::string::npos || second == first) throw std::invalid_argument(fault_inject);
    f.kind = fault_inject.substr(0, first);
    f.rank = std::stoi(fault_inject.substr(first + 1, second - first - 1));
    f.step = std::stoll(fault_inject.substr(second + 1));
  } catch (const std::exception&) {
    throw UsageError("--fault-inject '" + fault_inject + "' is not KIND:RANK:STEP");
  }
  if (f.kind != "exit" && f.kind != "crash" && f.kind != "hang" && f.kind != "sigkill" && f.kind != "save-sigkill" &&
      f.kind != "save-error")
    throw UsageError("--fault-inject kind '" + f.kind + "' must be exit, crash, hang, sigkill, save-sigkill or save-error");
  return f;
}

std::string RunOptions::default_out(int world_size) const {
  return "out/" + backend + "-" + precision + "-" + model + "-w" + std::to_string(world_size) + ".json";
}

}  // namespace zb::bench
