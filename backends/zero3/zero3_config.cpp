// zero3_config.cpp — zero3's config/CLI hooks (see zero3_config.hpp; docs/configs.md).
#include "backends/zero3/zero3_config.hpp"
#include "backends/zero3/zero3_granularity.hpp"

#include "backends/deepspeed_family/deepspeed_option_effects.hpp"
#include "config/accelerate_deepspeed.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

Zero3Options options_from_deepspeed(const config::DeepSpeedConfig& c) {
  Zero3Options o;
  o.reduce_bucket_size = c.zero.reduce_bucket_size;
  o.stage3_prefetch_bucket_size = c.zero.stage3_prefetch_bucket_size;
  o.stage3_param_persistence_threshold = c.zero.stage3_param_persistence_threshold;
  o.stage3_max_live_parameters = c.zero.stage3_max_live_parameters;
  o.stage3_max_reuse_distance = c.zero.stage3_max_reuse_distance;
  o.sub_group_size = c.zero.sub_group_size;
  o.overlap_comm = c.zero.overlap_comm;
  o.contiguous_gradients = c.zero.contiguous_gradients;
  o.communication_data_type = c.communication_data_type;
  o.grad_accum_dtype = c.grad_accum_dtype;
  o.fp16 = {c.fp16.loss_scale, int(c.fp16.initial_scale_power), c.fp16.loss_scale_window, int(c.fp16.hysteresis),
            c.fp16.consecutive_hysteresis, double(c.fp16.min_loss_scale)};
  const auto& oo = c.zero.offload_optimizer;
  o.offload_optimizer = {oo.device, oo.pin_memory, oo.buffer_count, oo.fast_init, oo.pipeline_read, oo.pipeline_write,
                         oo.ratio};
  const auto& op = c.zero.offload_param;
  o.offload_param = {op.device, op.pin_memory, op.buffer_count, op.buffer_size, op.max_in_cpu};
  // Who steps the host partitions under offload_optimizer (engine.py get_optimizer_configuration:
  // an "optimizer" section gives DeepSpeedCPUAdam unless torch_adam; a client optimizer — the
  // trainer's AdamW, no section — becomes DeepSpeedCPUAdam in accelerate's _prepare_deepspeed
  // while zero_force_ds_cpu_optimizer is true, and stays torch.optim.AdamW when it is false).
  o.stage3_module_granularity_threshold = c.zero.module_granularity_threshold;  // zero3_granularity.hpp
  o.zero_hpz_partition_size = c.zero.zero_hpz_partition_size;  // ZeRO++ (zero3_zeropp.hpp)
  o.zero_quantized_weights = c.zero.zero_quantized_weights;
  o.zero_quantized_nontrainable_weights = c.zero.zero_quantized_nontrainable_weights;
  o.zero_quantized_gradients = c.zero.zero_quantized_gradients;
  o.host_optimizer = (c.optimizer_section ? !c.torch_adam : c.zero_force_ds_cpu_optimizer) ? kCpuAdam : kTorchAdamW;
  validate(o);  // ranges and dtypes
  return o;
}

void accept_stage(const config::DeepSpeedStage& s) {
  using Form = config::DeepSpeedStage::Form;
  const std::string ours = "zerobench's zero3 backend is ZeRO stage 3";
  if (s.form == Form::kMissing)
    throw UsageError("zero_optimization is missing: DeepSpeed then runs ZeRO stage 0; " + ours);
  if (s.form == Form::kBoolean)
    throw UsageError("zero_optimization " + s.shown + ": the deprecated boolean form means stage " + s.stage_text + "; " +
                     ours);
  if (s.stage != 3)
    throw UsageError(s.key + " " + s.shown + ": ZeRO stage " + s.stage_text + " is not implemented; " + ours);
}

// Every DeepSpeed config is of this backend's family (it refuses a stage other than 3 with its
// own message); stage 3 is its own. A backend for stages 1 and 2 claims those above 1.
int config_claim(const ConfigIdentity& id) {
  const bool deepspeed = !id.accelerate || id.distributed_type == "DEEPSPEED";
  if (!deepspeed) return 0;
  return id.zero_stage == 3 ? 2 : 1;
}

namespace {
void read_deepspeed(const nlohmann::json& ds, config::AutoFill mode, const ConfigRequest& req, ResolvedConfig& out) {
  auto cfg = config::read_deepspeed_json(ds, trainer_args(req), mode, accept_stage);
  out.provenance.notes.append(cfg.notes);
  const Zero3Options z = options_from_deepspeed(cfg);
  out.precision = cfg.precision;
  apply_training_arguments(cfg.train, out.train);
  out.options = z;
}
}  // namespace

void read_config(const ConfigInput& in, ResolvedConfig& out) {
  const auto& req = in.request;
  if (!in.launch) return read_deepspeed(in.file.root, config::AutoFill::kHfTrainer, req, out);
  auto& notes = out.provenance.notes;
  const auto ds = config::read_accelerate_deepspeed(in.file.root, in.launch->mixed_precision,
                                                    in.launch->mixed_precision_in_file,
                                                    req.precision_given ? req.precision : "", req.given, accept_stage,
                                                    out.provenance);
  read_deepspeed(ds.config, config::AutoFill::kAccelerate, req, out);
  notes.apply("distributed_type", "DEEPSPEED", "backend zero3 (DeepSpeed ZeRO stage 3 semantics)");
  config::note_mixed_precision(in.file.root, req.precision_given ? req.precision + " (--precision)" : out.precision,
                               ds.mixed_precision, notes);
}

std::vector<BackendFlag> cli_flags() {
  using K = BackendFlag::Kind;
  auto choices = [](BackendFlag f, std::vector<std::string> c) {
    f.choices = std::move(c);
    return f;
  };
  auto flag = [](const char* name, const char* help, K kind, int64_t min_count = 0) {
    BackendFlag f;
    f.name = name;
    f.help = help;
    f.kind = kind;
    f.min_count = min_count;
    if (kind == K::kText) f.choices = {"bf16", "fp16", "fp32"};
    return f;
  };
  // --zero-stage: declared by zero1, zero2 and zero3 (registered once); each accepts only its own.
  return {choices(flag("--zero-stage", "zero1|zero2|zero3: the ZeRO stage (each backend runs its own)", K::kText),
                  {"1", "2", "3"}),
          flag("--reduce-bucket-size", "zero3: gradient reduce bucket (elements)", K::kCount, 1),
          flag("--prefetch-bucket-size", "zero3: stage3_prefetch_bucket_size (elements)", K::kCount),
          flag("--persistence-threshold", "zero3: stage3_param_persistence_threshold", K::kCount),
          flag("--max-live-parameters", "zero3: stage3_max_live_parameters", K::kCount),
          flag("--max-reuse-distance", "zero3: stage3_max_reuse_distance", K::kCount),
          flag("--sub-group-size", "zero3: sub_group_size (fp32 master granularity; 0: one per parameter)", K::kCount),
          flag("--communication-data-type", "zero3: gradient reduce dtype bf16|fp16|fp32", K::kText),
          flag("--grad-accum-dtype", "zero3: gradient partition dtype bf16|fp16|fp32", K::kText),
          choices(flag("--zero3-offload-optimizer", "zero3: offload_optimizer.device none|cpu (nvme refused)", K::kText),
                  {"none", "cpu", "nvme"}),
          choices(flag("--zero3-offload-param", "zero3: offload_param.device none|cpu (nvme refused)", K::kText),
                  {"none", "cpu", "nvme"}),
          choices(flag("--zero3-offload-pin-memory", "zero3: pin_memory of both offload sections (default true)",
                       K::kText),
                  {"true", "false"}),
          choices(flag("--zero3-host-optimizer",
                       "zero3: optimizer on the host under offload_optimizer: DeepSpeedCPUAdam (default) or "
                       "torch.optim.AdamW",
                       K::kText),
                  {kCpuAdam, kTorchAdamW}),
          flag("--zero3-hpz-partition-size", "zero3: ZeRO++ zero_hpz_partition_size (must divide the world; 1: off)",
               K::kCount),
          choices(flag("--zero3-quantized-weights", "zero3: ZeRO++ zero_quantized_weights (qwZ)", K::kText),
                  {"true", "false"}),
          choices(flag("--zero3-quantized-gradients",
                       "zero3: ZeRO++ zero_quantized_gradients (qgZ: int4 all-to-all gradient reduction across nodes)",
                       K::kText),
                  {"true", "false"}),
          flag("--zero3-ranks-per-node",
               "zero3: ranks per node qgZ's local/global all-to-all groups use (DeepSpeed's device_count(); "
               "default LOCAL_WORLD_SIZE): emulates nodes on one host",
               K::kCount, 1)};
}

void apply_flags(const FlagValues& given, bool from_file, EngineSpec& spec, config::ConfigNotes& notes) {
  if (const auto it = given.find("--zero-stage"); it != given.end() && it->second.text != "3")
    throw UsageError("--zero-stage " + it->second.text + " with --backend zero3: ZeRO stage " + it->second.text +
                     " runs as --backend zero" + it->second.text);
  auto overridden = [&](const std::string& flag_name, const std::string& value) {
    if (from_file) notes.apply(flag_name, value, "command line, over the config file");
  };
  Zero3Options z;
  if (from_file) z = zero3_options(spec.options);
  auto set = [&](const char* flag_name, int64_t& field) {
    const auto it = given.find(flag_name);
    if (it == given.end()) return;
    field = it->second.count;
    overridden(flag_name, std::to_string(it->second.count));
  };
  set("--reduce-bucket-size", z.reduce_bucket_size);
  set("--prefetch-bucket-size", z.stage3_prefetch_bucket_size);
  set("--persistence-threshold", z.stage3_param_persistence_threshold);
  set("--max-live-parameters", z.stage3_max_live_parameters);
  set("--max-reuse-distance", z.stage3_max_reuse_distance);
  set("--sub-group-size", z.sub_group_size);
  set("--zero3-hpz-partition-size", z.zero_hpz_partition_size);
  set("--zero3-ranks-per-node", z.qgz_ranks_per_node);
  for (const auto& [flag_name, field] : {std::pair<const char*, bool*>{"--zero3-quantized-weights", &z.zero_quantized_weights},
                                         {"--zero3-quantized-gradients", &z.zero_quantized_gradients}}) {
    const auto it = given.find(flag_name);
    if (it == given.end()) continue;
    *field = it->second.text == "true";
    overridden(flag_name, it->second.text);
  }
  for (const auto& [flag_name, field] : {std::pair<const char*, std::string*>{"--communication-data-type", &z.communication_data_type},
                                         {"--grad-accum-dtype", &z.grad_accum_dtype}}) {
    const auto it = given.find(flag_name);
    if (it == given.end()) continue;
    *field = it->second.text;
    overridden(flag_name, it->second.text);
  }
  for (const auto& [flag_name, field] : {std::pair<const char*, std::string*>{"--zero3-offload-optimizer", &z.offload_optimizer.device},
                                         {"--zero3-offload-param", &z.offload_param.device},
                                         {"--zero3-host-optimizer", &z.host_optimizer}}) {
    const auto it = given.find(flag_name);
    if (it == given.end()) continue;
    *field = it->second.text;
    overridden(flag_name, it->second.text);
  }
  if (const auto it = given.find("--zero3-offload-pin-memory"); it != given.end()) {
    z.offload_optimizer.pin_memory = z.offload_param.pin_memory = it->second.text == "true";
    overridden("--zero3-offload-pin-memory", it->second.text);
  }
  validate(z);  // nvme: exit 2
  spec.options = z;
  // Needs the model: checked here, before any rank starts, so the refusal is one line (the engine
  // checks again for callers that build an EngineSpec themselves).
  check_module_granularity(z.stage3_module_granularity_threshold, spec.model);
}

// The sentences paraphrase deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig's fields); the
// keys every DeepSpeed stage shares are backends/deepspeed_family/deepspeed_option_effects.cpp's.
std::vector<OptionEffect> option_effects() {
  std::vector<OptionEffect> e = deepspeed_family::deepspeed_option_effects();
  e.insert(e.end(), {
      {"ipg_buffer_bytes", "bytes of the IPG gradient buckets (reduce_bucket_size x dtype): resident per rank"},
      {"stage3_prefetch_bucket_size", "elements all-gathered ahead of use: more overlap, more gathered memory"},
      {"stage3_param_persistence_threshold",
       "parameters this small are gathered once and kept whole on every "
       "rank: fewer all-gathers, more resident memory"},
      {"persistent_numel", "elements kept whole on every rank (the persistence threshold's result)"},
      {"persistent_params", "parameters kept whole on every rank (the persistence threshold's result)"},
      {"stage3_max_live_parameters", "upper bound on gathered parameter elements alive at once"},
      {"stage3_max_reuse_distance", "a parameter reused within this many elements is not released"},
      {"sub_group_size",
       "elements per fp32 optimizer sub-group: the optimizer step's granularity and its "
       "temporary memory"},
      {"sub_groups", "how many fp32 optimizer sub-groups the parameters form"},
      // ZeRO++ (runtime/zero/config.py)
      {"zero_hpz_partition_size",
       "ZeRO++ hpZ: a secondary copy of the parameters sharded within groups of this many ranks, so backward "
       "all-gathers stay in the group: less inter-node traffic, more memory"},
      {"hpz_group_size", "ZeRO++ hpZ's secondary group as resolved (1 = off)"},
      {"zero_quantized_weights", "ZeRO++ qwZ: parameters all-gathered quantized to int8: half the gather bytes, rounding"},
      {"zero_quantized_nontrainable_weights", "ZeRO++: frozen parameters kept and gathered quantized"},
      {"zero_quantized_gradients", "ZeRO++ qgZ: gradients reduce-scattered quantized (int4 all-to-all): fewer bytes, rounding"},
      // offload_param and offload_optimizer (runtime/zero/offload_config.py)
      {"offload_param.device",
       "where the partitioned parameters live: cpu keeps them in host memory and copies each in before use "
       "(less device memory, host-device traffic every forward and backward)"},
      {"offload.param", "parameter offload as resolved (none|cpu): where the partitioned parameters live"},
      {"offload_param.pin_memory", "the parameters' host copies page-locked: faster, asynchronous copies"},
      {"offload_param.buffer_count", "NVMe parameter offload's buffer pool size; no effect without device nvme"},
      {"offload_param.buffer_size", "NVMe parameter offload's buffer size; no effect without device nvme"},
      {"offload_param.max_in_cpu", "parameter elements kept in host memory under NVMe offload; no effect without device nvme"},
      {"offload_optimizer.buffer_count", "NVMe optimizer offload's buffer pool size; no effect without device nvme"},
      {"offload_optimizer.fast_init", "fast optimizer initialisation under NVMe offload; no effect without device nvme"},
      {"offload_optimizer.pipeline_read", "ZeRO-Infinity: the next tile's read overlapped with the optimizer step (NVMe)"},
      {"offload_optimizer.pipeline_write", "ZeRO-Infinity: the previous tile's write overlapped with the optimizer step (NVMe)"},
      {"offload_optimizer.ratio", "the share of the optimizer states offloaded (and stepped on the host); the rest stays on the device"},
  });
  return e;
}

}  // namespace zb::backends::zero3
