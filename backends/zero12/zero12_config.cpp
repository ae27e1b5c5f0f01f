// zero12_config.cpp — zero1/zero2's config/CLI hooks (see zero12_config.hpp; docs/configs.md).
#include "backends/zero12/zero12_config.hpp"

#include <algorithm>

#include "backends/deepspeed_family/deepspeed_option_effects.hpp"
#include "config/accelerate_deepspeed.hpp"
#include "config/deepspeed_config.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero12 {

Zero12Options options_from_deepspeed(const config::DeepSpeedConfig& c, int stage) {
  Zero12Options o;
  o.stage = stage;
  o.reduce_bucket_size = c.zero.reduce_bucket_size;
  o.allgather_bucket_size = c.zero.allgather_bucket_size;
  o.overlap_comm = c.zero.overlap_comm;  // false unless the file sets it (overlap_comm_valid)
  o.contiguous_gradients = c.zero.contiguous_gradients;
  o.reduce_scatter = c.zero.reduce_scatter;
  o.round_robin_gradients = c.zero.round_robin_gradients;
  o.allgather_partitions = c.zero.allgather_partitions;
  o.use_multi_rank_bucket_allreduce = c.zero.use_multi_rank_bucket_allreduce;
  o.communication_data_type = c.communication_data_type;
  o.grad_accum_dtype = c.grad_accum_dtype;
  o.offload_optimizer = c.zero.offload_optimizer.device;
  o.offload_pin_memory = c.zero.offload_optimizer.pin_memory;
  // Who steps the host partition under offload_optimizer, as zero3_config.cpp decides it (engine.py
  // get_optimizer_configuration: an "optimizer" section gives DeepSpeedCPUAdam unless torch_adam;
  // accelerate replaces the trainer's AdamW by DeepSpeedCPUAdam while zero_force_ds_cpu_optimizer).
  o.host_optimizer = (c.optimizer_section ? !c.torch_adam : c.zero_force_ds_cpu_optimizer) ? kCpuAdam : kTorchAdamW;
  // The fp16 section's loss scaling (CreateLossScaler in stage_1_and_2.py __init__), as zero3_config.cpp.
  o.fp16 = {c.fp16.loss_scale, int(c.fp16.initial_scale_power), c.fp16.loss_scale_window, int(c.fp16.hysteresis),
            c.fp16.consecutive_hysteresis, double(c.fp16.min_loss_scale)};
  // offload_param: engine.py _configure_zero_optimizer passes offload_param_config only to stage
  // 3; DeepSpeedZeroOptimizer never reads it (read_deepspeed notes it as ignored).
  return validated(std::move(o));
}

void accept_stage(const config::DeepSpeedStage& s, int stage) {
  if (s.stage != stage)
    throw UsageError(s.key + " " + s.shown + ": zerobench's zero" + std::to_string(stage) + " backend is ZeRO stage " +
                     std::to_string(stage));
}

// A DeepSpeed JSON (or an accelerate DEEPSPEED file whose stage is known) of this stage: claimed
// with 2, above zero3's 1 for every DeepSpeed file; the zero3 backend keeps its own stage 3 at 2.
std::function<int(const ConfigIdentity&)> config_claim_for(int stage) {
  return [stage](const ConfigIdentity& id) {
    const bool deepspeed = !id.accelerate || id.distributed_type == "DEEPSPEED";
    return deepspeed && id.zero_stage == stage ? 2 : 0;
  };
}

namespace {
void read_deepspeed(const nlohmann::json& ds, config::AutoFill mode, const ConfigRequest& req, int stage,
                    ResolvedConfig& out) {
  auto gate = [stage](const config::DeepSpeedStage& s) { accept_stage(s, stage); };
  auto cfg = config::read_deepspeed_json(ds, trainer_args(req), mode, gate);
  out.provenance.notes.append(cfg.notes);
  const Zero12Options z = options_from_deepspeed(cfg, stage);
  auto& notes = out.provenance.notes;
  if (cfg.zero.offload_param.device != "none") {  // the reader's "applied" line for it is stage 3's
    auto& a = notes.applied;
    a.erase(std::remove_if(a.begin(), a.end(),
                           [](const config::ConfigKey& k) { return k.key.rfind("zero_optimization.offload_param", 0) == 0; }),
            a.end());
    notes.ignore("zero_optimization.offload_param.device", cfg.zero.offload_param.device,
                 "DeepSpeed offloads parameters only in ZeRO stage 3 (engine.py _configure_zero_optimizer does not pass "
                 "offload_param to DeepSpeedZeroOptimizer)");
  }
  if (z.offload() && !cfg.zero.contiguous_gradients)
    notes.apply("zero_optimization.contiguous_gradients", "false",
                "true: DeepSpeedZeroOptimizer forces contiguous gradients with CPU offload (stage_1_and_2.py __init__)");
  out.precision = cfg.precision;
  apply_training_arguments(cfg.train, out.train);
  out.options = z;
}
}  // namespace

std::function<void(const ConfigInput&, ResolvedConfig&)> read_config_for(int stage) {
  return [stage](const ConfigInput& in, ResolvedConfig& out) {
    const auto& req = in.request;
    if (!in.launch) return read_deepspeed(in.file.root, config::AutoFill::kHfTrainer, req, stage, out);
    auto& notes = out.provenance.notes;
    auto gate = [stage](const config::DeepSpeedStage& s) { accept_stage(s, stage); };
    const auto ds = config::read_accelerate_deepspeed(in.file.root, in.launch->mixed_precision,
                                                      in.launch->mixed_precision_in_file,
                                                      req.precision_given ? req.precision : "", req.given, gate,
                                                      out.provenance);
    read_deepspeed(ds.config, config::AutoFill::kAccelerate, req, stage, out);
    notes.apply("distributed_type", "DEEPSPEED",
                "backend zero" + std::to_string(stage) + " (DeepSpeed ZeRO stage " + std::to_string(stage) + " semantics)");
    config::note_mixed_precision(in.file.root, req.precision_given ? req.precision + " (--precision)" : out.precision,
                                 ds.mixed_precision, notes);
  };
}

std::vector<BackendFlag> cli_flags(int stage) {
  using K = BackendFlag::Kind;
  auto flag = [](const char* name, const char* help, K kind, std::vector<std::string> choices = {}, int64_t min = 0) {
    BackendFlag f;
    f.name = name;
    f.help = help;
    f.kind = kind;
    f.choices = std::move(choices);
    f.min_count = min;
    return f;
  };
  const std::vector<std::string> tf = {"true", "false"};
  (void)stage;
  return {flag("--zero-stage", "zero1|zero2|zero3: the ZeRO stage (each backend runs its own)", K::kText, {"1", "2", "3"}),
          flag("--zero-reduce-bucket-size", "zero1/zero2: reduce_bucket_size (IPG bucket elements)", K::kCount, {}, 1),
          flag("--zero-allgather-bucket-size", "zero1/zero2: allgather_bucket_size (elements; unused with "
               "all_gather_into_tensor, as upstream)", K::kCount),
          flag("--zero-overlap-comm", "zero1/zero2: overlap_comm (default false)", K::kText, tf),
          flag("--zero-contiguous-gradients", "zero1/zero2: contiguous_gradients (default true)", K::kText, tf),
          flag("--zero-reduce-scatter", "zero1/zero2: reduce_scatter (default true)", K::kText, tf),
          flag("--zero-round-robin-gradients", "zero1/zero2: round_robin_gradients (default false)", K::kText, tf),
          flag("--zero-offload-optimizer", "zero1/zero2: offload_optimizer.device none|cpu (nvme refused)", K::kText,
               {"none", "cpu", "nvme"}),
          flag("--zero-offload-pin-memory", "zero1/zero2: offload_optimizer.pin_memory (default true)", K::kText, tf),
          flag("--zero-host-optimizer", "zero1/zero2: optimizer on the host under offload_optimizer: DeepSpeedCPUAdam "
               "(default) or torch.optim.AdamW", K::kText, {kCpuAdam, kTorchAdamW})};
}

void check_zero_stage_flag(const FlagValues& given, int stage, const std::string& backend) {
  const auto it = given.find("--zero-stage");
  if (it == given.end() || it->second.text == std::to_string(stage)) return;
  const std::string s = it->second.text;
  throw UsageError("--zero-stage " + s + " with --backend " + backend + ": ZeRO stage " + s + " runs as --backend zero" + s);
}

std::function<void(const FlagValues&, bool, EngineSpec&, config::ConfigNotes&)> apply_flags_for(int stage) {
  return [stage](const FlagValues& given, bool from_file, EngineSpec& spec, config::ConfigNotes& notes) {
    check_zero_stage_flag(given, stage, "zero" + std::to_string(stage));
    auto overridden = [&](const std::string& flag_name, const std::string& value) {
      if (from_file) notes.apply(flag_name, value, "command line, over the config file");
    };
    Zero12Options z;
    z.stage = stage;
    if (from_file) z = zero12_options(spec.options, stage);
    for (const auto& [name, field] : {std::pair<const char*, int64_t*>{"--zero-reduce-bucket-size", &z.reduce_bucket_size},
                                      {"--zero-allgather-bucket-size", &z.allgather_bucket_size}}) {
      const auto it = given.find(name);
      if (it == given.end()) continue;
      *field = it->second.count;
      overridden(name, std::to_string(it->second.count));
    }
    for (const auto& [name, field] : {std::pair<const char*, bool*>{"--zero-overlap-comm", &z.overlap_comm},
                                      {"--zero-contiguous-gradients", &z.contiguous_gradients},
                                      {"--zero-reduce-scatter", &z.reduce_scatter},
                                      {"--zero-round-robin-gradients", &z.round_robin_gradients}}) {
      const auto it = given.find(name);
      if (it == given.end()) continue;
      *field = it->second.text == "true";
      overridden(name, it->second.text);
    }
    for (const auto& [name, field] : {std::pair<const char*, std::string*>{"--zero-offload-optimizer", &z.offload_optimizer},
                                      {"--zero-host-optimizer", &z.host_optimizer}}) {
      const auto it = given.find(name);
      if (it == given.end()) continue;
      *field = it->second.text;
      overridden(name, it->second.text);
    }
    if (const auto it = given.find("--zero-offload-pin-memory"); it != given.end()) {
      z.offload_pin_memory = it->second.text == "true";
      overridden("--zero-offload-pin-memory", it->second.text);
    }
    spec.options = validated(std::move(z));  // exit 2 on a refused value
  };
}

// The keys every DeepSpeed stage shares (backends/deepspeed_family/deepspeed_option_effects.cpp), then
// ZeRO-1/2's own: the stage-1/2 keys of runtime/zero/config.py and what DeepSpeedZeroOptimizer
// (runtime/zero/stage_1_and_2.py) derives from them.
std::vector<OptionEffect> option_effects() {
  std::vector<OptionEffect> e = deepspeed_family::deepspeed_option_effects();
  e.insert(e.end(), {
      {"reduce_scatter",
       "gradients averaged with reduces to each partition's owner (true) or all-reduced whole (false): bytes on "
       "the wire per step"},
      {"use_multi_rank_bucket_allreduce",
       "a bucket spanning several owners' partitions is all-reduced once instead of one reduce per owner: fewer, "
       "larger collectives"},
      {"allgather_bucket_size", "DeepSpeed's all-gather bucket; 0.19.8's ZeRO-1/2 gathers the flat buffer whole: no effect"},
      {"allgather_partitions", "all-gather (true) or broadcast the updated partitions; DeepSpeed 0.19.8 does not pass it: no effect"},
      {"allgather_partitions_effect", "what allgather_partitions changes in DeepSpeed 0.19.8 (nothing)"},
      {"allgather", "the collective that gathers the updated fp16/bf16 partitions after the optimizer step"},
      {"round_robin_gradients",
       "gradients assigned to partitions round robin (for parallel gradient copies under CPU offload): which rank "
       "reduces and owns which gradients"},
      {"check_grad_overflow", "gradients checked for inf/NaN before each step (a step with one is skipped)"},
      {"ipg_buffers", "gradient buckets allocated per rank: 2 with overlap_comm (one fills while one reduces), else 1"},
      {"flat_numel", "elements of the flat fp16/bf16 parameter buffer the ranks partition"},
      {"flat_padded", "the flat buffer's elements after padding to a multiple of the world size"},
      {"partition_size", "elements of the flat buffer each rank owns: its fp32 masters, optimizer states and gradients"},
      {"offload.pinned", "the host copies of offloaded states page-locked (pin_memory)"},
  });
  return e;
}

}  // namespace zb::backends::zero12
