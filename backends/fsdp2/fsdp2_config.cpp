// fsdp2_config.cpp — fsdp2's config/CLI hooks (see fsdp2_config.hpp; docs/configs.md).
#include "backends/fsdp2/fsdp2_config.hpp"

#include <map>

#include "runtime/errors.hpp"

namespace zb::backends::fsdp2 {

Fsdp2Options options_from_accelerate(const config::AccelerateFsdp2Config& c) {
  Fsdp2Options o;
  // The layout accelerate 1.15 builds (utils/fsdp_utils.py fsdp2_prepare_model).
  o.grouping = "accelerate";
  o.reshard_after_forward = c.reshard_after_forward ? kReshardTrue : kReshardFalse;
  o.auto_wrap_policy = c.auto_wrap_policy;
  o.min_num_params = c.min_num_params;
  o.transformer_layer_cls_to_wrap = c.transformer_layer_cls_to_wrap;
  o.activation_checkpointing = c.activation_checkpointing;
  o.cpu_ram_efficient_loading = c.cpu_ram_efficient_loading;
  o.state_dict_type = c.state_dict_type;
  o.dp_replicate_size = c.dp_replicate_size;
  o.dp_shard_size = c.dp_shard_size;
  // FullyShardedDataParallelPlugin.set_cpu_offload (accelerate utils/dataclasses.py): a bool
  // becomes CPUOffloadPolicy() — pin_memory=True, torch's default — or OffloadPolicy();
  // fsdp2_prepare_model passes it to every fully_shard as offload_policy.
  o.offload_policy = c.offload_params ? "cpu" : "none";
  o.offload_pin_memory = true;
  return o;
}

Accelerate2Config read_accelerate_fsdp2_config(const std::string& path) {
  const auto c = config::read_accelerate_fsdp2_config(path);
  return {options_from_accelerate(c), c.precision, c.num_processes, c.warnings, c.ignored};
}

bool is_accelerate_fsdp2_config(const std::string& path) { return config::is_accelerate_fsdp2_config(path); }

int config_claim(const ConfigIdentity& id) {
  return id.accelerate && id.distributed_type == "FSDP" && id.fsdp_version == 2 ? 2 : 0;
}

// config/accelerate_fsdp2.cpp reads the file as accelerate 1.15 does; here its verdicts become
// the report's notes (top-level launcher keys are noted by config/accelerate_config.cpp).
void read_config(const ConfigInput& in, ResolvedConfig& out) {
  auto& notes = out.provenance.notes;
  const auto& root = in.file.root;
  const std::string& mp = in.launch->mixed_precision;
  if (mp == "fp8") throw UsageError("mixed_precision fp8 is not implemented in zerobench (bf16, fp16 or no)");
  // The file again, bounded as load_config read it (a JSON file is YAML too).
  const auto cfg = config::read_accelerate_fsdp2_bytes(in.file.bytes, "");
  out.precision = mp == "bf16" ? "mixed" : mp == "fp16" ? "fp16" : "fp32";  // fp16: with ShardedGradScaler
  notes.apply("distributed_type", "FSDP", "backend fsdp2 (FSDP2 fully_shard semantics)");
  const auto& req = in.request;
  config::note_mixed_precision(root, req.precision_given ? req.precision + " (--precision)" : out.precision, mp, notes);
  std::map<std::string, std::string> ignored;  // launcher key name -> reason
  for (const auto& k : cfg.ignored) ignored[k.key] = k.reason;
  const auto o = options_from_accelerate(cfg);
  for (const auto& [k, v] : root["fsdp_config"].items()) {
    const std::string name = k.rfind("fsdp", 0) == 0 ? k : "fsdp_" + k;
    const std::string key = "fsdp_config." + k, value = config::scalar_text(v);
    if (ignored.count(name)) {
      notes.ignore(key, value, ignored.at(name));
      continue;
    }
    std::string as = "fsdp2 option (config.backend.options)";
    if (name == "fsdp_version") as = "backend fsdp2";
    else if (name == "fsdp_reshard_after_forward") as = "reshard_after_forward " + reshard_after_forward_text(o.reshard_after_forward);
    else if (name == "fsdp_auto_wrap_policy") as = "auto_wrap_policy " + o.auto_wrap_policy;
    else if (name == "fsdp_min_num_params")
      as = o.min_num_params > 0 ? "min_num_params " + std::to_string(o.min_num_params)
                                : "min_num_params <= 0: accelerate passes no auto-wrap policy (NO_WRAP)";
    else if (name == "fsdp_activation_checkpointing")
      as = std::string("train.activation_checkpointing ") + (o.activation_checkpointing ? "true" : "false");
    else if (name == "fsdp_cpu_ram_efficient_loading")
      as = std::string("cpu_ram_efficient_loading ") + (o.cpu_ram_efficient_loading ? "true" : "false");
    else if (name == "fsdp_offload_params") as = "offload_policy " + offload_policy_text(o);
    else if (name == "fsdp_activation_checkpointing_offload") as = "activation checkpointing offload off";
    notes.apply(key, value, as);
  }
  if (o.auto_wrap_policy == "SIZE_BASED_WRAP" && !root["fsdp_config"].contains("fsdp_min_num_params") &&
      !root["fsdp_config"].contains("min_num_params"))
    notes.apply("fsdp_config.fsdp_min_num_params", "(absent)", "min_num_params 100000000 (accelerate launch's default)");
  if (root.contains("parallelism_config")) {
    for (const auto& k : cfg.ignored)
      if (k.key.rfind("parallelism_config.", 0) == 0) notes.ignore(k.key, k.value, k.reason);
    notes.apply("parallelism_config", root["parallelism_config"].dump(),
                "dp_replicate_size " + std::to_string(o.dp_replicate_size) + ", dp_shard_size " +
                    std::to_string(o.dp_shard_size) + " (0: world size / the other)");
  }
  for (const auto& w : cfg.warnings) notes.warn(w);
  out.train.activation_checkpointing = out.train.activation_checkpointing.or_full_if(o.activation_checkpointing);
  out.options = validated(o);
}

std::vector<BackendFlag> cli_flags() {
  using K = BackendFlag::Kind;
  auto flag = [](const char* name, const char* help, K kind, std::vector<std::string> choices = {}) {
    BackendFlag f;
    f.name = name;
    f.help = help;
    f.kind = kind;
    f.choices = std::move(choices);
    return f;
  };
  // fully_shard / FSDPModule / MixedPrecisionPolicy / ParallelismConfig names (issue 14).
  return {flag("--reshard-after-forward",
               "fsdp2: fully_shard reshard_after_forward true|false|N (N: reshard to groups of N ranks)", K::kText),
          flag("--dp-replicate-size", "fsdp2: HSDP replicate mesh dim (ParallelismConfig)", K::kCount),
          flag("--dp-shard-size", "fsdp2: shard mesh dim (default world / --dp-replicate-size)", K::kCount),
          flag("--reduce-dtype",
               "fsdp, fsdp2: gradient reduce dtype bf16|fp32 (MixedPrecision(Policy).reduce_dtype; default bf16 "
               "under mixed)",
               K::kText, {"bf16", "fp32"}),
          flag("--output-dtype", "fsdp2: MixedPrecisionPolicy.output_dtype bf16|fp32|none", K::kText,
               {"bf16", "fp32", "none"}),
          flag("--modules-to-forward-prefetch",
               "fsdp2: set_modules_to_forward_prefetch with the next N groups (0 = implicit prefetch only)", K::kCount),
          flag("--modules-to-backward-prefetch",
               "fsdp2: set_modules_to_backward_prefetch with the next N groups in backward (0 = FSDP2's default)",
               K::kCount),
          flag("--fsdp2-grouping",
               "fsdp2: root (blocks + a root group with embedding, norm, head) | accelerate (accelerate 1.15's "
               "embedding / blocks / [norm, head] groups)",
               K::kText, {"root", "accelerate"}),
          flag("--force-sum-reduction-for-comms",
               "fsdp2: SUM collectives with a post-divide instead of AVG (set_force_sum_reduction_for_comms)", K::kSwitch),
          flag("--cpu-ram-efficient-loading",
               "fsdp2: rank 0 builds the weights and broadcasts each parameter (fsdp2_load_full_state_dict)",
               K::kSwitch),
          flag("--fsdp2-offload-policy",
               "fsdp2: fully_shard offload_policy cpu (CPUOffloadPolicy: sharded params, grads and optimizer "
               "states on the host) | none (OffloadPolicy())",
               K::kText, {"cpu", "none"}),
          flag("--fsdp2-offload-pin-memory", "fsdp2: CPUOffloadPolicy.pin_memory true|false (default true, as torch)",
               K::kText, {"true", "false"})};
}

void apply_flags(const FlagValues& given, bool from_file, EngineSpec& spec, config::ConfigNotes& notes) {
  // The file's options (read_config above), then the command line's (as accelerate launch's flags
  // override its config).
  auto overridden = [&](const std::string& flag_name, const std::string& value) {
    if (from_file) notes.apply(flag_name, value, "command line, over the config file");
  };
  Fsdp2Options f;
  if (from_file) f = fsdp2_options(spec.options);
  auto set_text = [&](const char* flag_name, std::string& field) {
    const auto it = given.find(flag_name);
    if (it == given.end()) return;
    field = it->second.text;
    overridden(flag_name, it->second.text);
  };
  auto set_int = [&](const char* flag_name, int& field) {
    const auto it = given.find(flag_name);
    if (it == given.end()) return;
    field = int(it->second.count);
    overridden(flag_name, std::to_string(it->second.count));
  };
  if (const auto it = given.find("--reshard-after-forward"); it != given.end()) {
    f.reshard_after_forward = parse_reshard_after_forward("--reshard-after-forward", it->second.text);
    overridden("--reshard-after-forward", it->second.text);
  }
  set_text("--reduce-dtype", f.reduce_dtype);
  set_text("--output-dtype", f.output_dtype);
  set_text("--fsdp2-grouping", f.grouping);
  set_int("--modules-to-forward-prefetch", f.modules_to_forward_prefetch);
  set_int("--modules-to-backward-prefetch", f.modules_to_backward_prefetch);
  set_int("--dp-replicate-size", f.dp_replicate_size);
  set_int("--dp-shard-size", f.dp_shard_size);
  // --sync-each-batch is a training option (accelerate's GradientAccumulationPlugin), shared by all.
  f.sync_each_batch = f.sync_each_batch || spec.train.sync_each_batch;
  spec.train.sync_each_batch = f.sync_each_batch;
  if (given.count("--force-sum-reduction-for-comms")) {
    f.force_sum_reduction_for_comms = true;
    overridden("--force-sum-reduction-for-comms", "true");
  }
  set_text("--fsdp2-offload-policy", f.offload_policy);
  if (const auto it = given.find("--fsdp2-offload-pin-memory"); it != given.end()) {
    f.offload_pin_memory = it->second.text == "true";
    overridden("--fsdp2-offload-pin-memory", it->second.text);
  }
  if (given.count("--cpu-ram-efficient-loading")) {
    f.cpu_ram_efficient_loading = true;
    overridden("--cpu-ram-efficient-loading", "true");
  }
  f = validated(std::move(f));
  spec.options = f;
  spec.train.activation_checkpointing = spec.train.activation_checkpointing.or_full_if(f.activation_checkpointing);
}

bool broadcasts_initial_weights(const BackendOptions& options) {
  return fsdp2_options(options).cpu_ram_efficient_loading;
}

// The sentences paraphrase torch/distributed/fsdp/_fully_shard/_fully_shard.py (fully_shard's
// arguments, MixedPrecisionPolicy); FSDP1's shared keys (reduce_dtype, offload_params, ...) are
// described by fsdp_config.cpp.
std::vector<OptionEffect> option_effects() {
  return {
      {"reshard_after_forward", "FSDP2: free gathered parameters after forward (true) or keep them for backward"},
      {"output_dtype", "FSDP2: dtype the unit's outputs are cast to"},
      {"fsdp2_grouping", "FSDP2: which modules form one parameter group (one all-gather each)"},
      {"modules_to_forward_prefetch", "FSDP2: explicit forward prefetch depth"},
      {"modules_to_backward_prefetch", "FSDP2: explicit backward prefetch depth"},
      {"force_sum_reduction_for_comms", "FSDP2: SUM collectives with a post-divide instead of AVG; numerics only"},
      // MixedPrecisionPolicy and what fully_shard resolves from it
      {"mp_param_dtype", "FSDP2 MixedPrecisionPolicy.param_dtype: dtype of the gathered parameters and of the compute"},
      {"mp_reduce_dtype", "FSDP2 MixedPrecisionPolicy.reduce_dtype: dtype of the gradient reduce-scatter (None = param_dtype)"},
      {"mp_output_dtype", "FSDP2 MixedPrecisionPolicy.output_dtype: dtype the outputs are cast to"},
      {"all_gather_dtype", "FSDP2: dtype of the parameter all-gather (bytes on the wire)"},
      {"reduce_scatter_dtype", "FSDP2: dtype of the gradient reduce-scatter: bytes on the wire and rounding of the reduction"},
      {"reduce_scatter_op", "FSDP2: the reduce-scatter's op (AVG, or SUM with a divide); numerics only"},
      {"all_reduce_op", "FSDP2 HSDP: the replicas' all-reduce op (AVG, or SUM with a divide); numerics only"},
      {"sharded_param_dtype", "FSDP2: dtype of the sharded parameters the optimizer updates (fp32 masters or not)"},
      // the device mesh (accelerate's ParallelismConfig dp_shard_size / dp_replicate_size)
      {"dp_shard_size", "ranks each parameter is sharded over (0 = all the ranks a replica has)"},
      {"dp_replicate_size", "HSDP: replicas of the sharded model; gradients all-reduced across them"},
      {"mesh.dp_shard", "the mesh's shard dimension as resolved: the per-rank share of model states"},
      {"mesh.dp_replicate", "the mesh's replicate dimension as resolved (HSDP when above 1)"},
      // offload
      {"offload_policy", "FSDP2 offload as resolved (none|cpu): sharded parameters, gradients and the optimizer step on the host"},
      {"fully_shard_offload_policy", "the offload_policy fully_shard is given (CPUOffloadPolicy or OffloadPolicy)"},
      {"offload_pin_memory", "CPUOffloadPolicy.pin_memory: the host shards page-locked (faster copies)"},
      // grouping
      {"grouping", "FSDP2: the rule that forms the parameter groups (one all-gather and reduce-scatter each)"},
      {"groups", "FSDP2: the resolved parameter groups: how many collectives a step issues and how much is gathered at once"},
      {"transformer_layer_cls_to_wrap", "the module class each fully_shard call wraps: the groups' granularity"},
  };
}

}  // namespace zb::backends::fsdp2
