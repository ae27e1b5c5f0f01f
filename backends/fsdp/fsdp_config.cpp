// fsdp_config.cpp — fsdp's config/CLI hooks (see fsdp_config.hpp; docs/configs.md).
#include "backends/fsdp/fsdp_config.hpp"

#include "runtime/errors.hpp"

namespace zb::backends::fsdp {

FsdpOptions options_from_accelerate(const config::AccelerateFsdpConfig& c) {
  FsdpOptions o;  // PyTorch's defaults where accelerate has no say (limit_all_gathers, reduce_dtype)
  try {
    o.sharding_strategy = parse_sharding_strategy(c.sharding_strategy);
  } catch (const UsageError& e) {
    throw UsageError(c.sharding_strategy_key.empty() ? std::string(e.what()) : c.sharding_strategy_key + ": " + e.what());
  }
  o.backward_prefetch = parse_backward_prefetch(c.backward_prefetch);
  o.forward_prefetch = c.forward_prefetch;
  o.hybrid_shard_group_size = c.hybrid_shard_group_size;
  o.sync_module_states = c.sync_module_states;
  o.activation_checkpointing = c.activation_checkpointing;
  o.state_dict_type = c.state_dict_type;
  o.auto_wrap_policy = c.auto_wrap_policy;
  o.min_num_params = c.auto_wrap_policy == "SIZE_BASED_WRAP" ? c.min_num_params : 0;
  o.use_orig_params = c.use_orig_params;
  o.cpu_ram_efficient_loading = c.cpu_ram_efficient_loading;
  o.offload_params = c.offload_params;
  return o;
}

// accelerate's distributed_type FSDP: version 1 is this backend's; any FSDP file is of its family
// (`--backend fsdp` names FSDP, which an accelerate file runs as version 1 or 2).
int config_claim(const ConfigIdentity& id) {
  if (!id.accelerate || id.distributed_type != "FSDP") return 0;
  return id.fsdp_version == 2 ? 1 : 2;
}

void read_config(const ConfigInput& in, ResolvedConfig& out) {
  auto& notes = out.provenance.notes;
  const auto& root = in.file.root;
  const std::string& mp = in.launch->mixed_precision;
  const auto block = config::read_accelerate_fsdp_config(root.value("fsdp_config", nlohmann::json::object()),
                                                         in.launch->ranks_per_node);
  if (block.fsdp_version == 2)  // only when no registered backend claims fsdp_version 2 first
    throw UsageError("fsdp_config.fsdp_version 2: no registered backend runs FSDP2");
  notes.append(block.notes);
  if (mp == "fp8") throw UsageError("mixed_precision fp8 is not implemented in zerobench (bf16, fp16 or no)");
  // accelerate >= 0.30 keeps the flat parameter in fp32 and computes in bf16: FSDP "mixed".
  out.precision = mp == "bf16" ? "mixed" : mp == "fp16" ? "fp16" : "fp32";  // fp16: with ShardedGradScaler
  notes.apply("distributed_type", "FSDP", "backend fsdp (FSDP1 semantics)");
  const auto& req = in.request;
  config::note_mixed_precision(root, req.precision_given ? req.precision + " (--precision)" : out.precision, mp, notes);
  const FsdpOptions o = options_from_accelerate(block);
  out.train.activation_checkpointing = out.train.activation_checkpointing.or_full_if(o.activation_checkpointing);
  validate(o);
  out.options = o;
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
  return {flag("--sharding-strategy", "fsdp: FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD|HYBRID_SHARD_ZERO2 (or 1-5)", K::kText),
          flag("--backward-prefetch", "fsdp: BACKWARD_PRE|BACKWARD_POST|NO_PREFETCH", K::kText),
          flag("--forward-prefetch", "fsdp: prefetch the next unit's all-gather in forward", K::kSwitch),
          flag("--limit-all-gathers", "fsdp: true|false (default true)", K::kText, {"true", "false"}),
          flag("--hsdp-shard-size", "fsdp HYBRID_SHARD(_ZERO2): ranks per shard group (default: per node)", K::kCount),
          flag("--reduce-dtype",
               "fsdp, fsdp2: gradient reduce dtype bf16|fp32 (MixedPrecision(Policy).reduce_dtype; default bf16 "
               "under mixed)",
               K::kText, {"bf16", "fp32"}),
          flag("--auto-wrap-policy",
               "fsdp: TRANSFORMER_BASED_WRAP (a unit per decoder block) | NO_WRAP (one unit: the whole model) | "
               "SIZE_BASED_WRAP (torch's size_based_auto_wrap_policy with --min-num-params)",
               K::kText, {"TRANSFORMER_BASED_WRAP", "NO_WRAP", "SIZE_BASED_WRAP"}),
          flag("--min-num-params", "fsdp SIZE_BASED_WRAP: min_num_params (accelerate's default 100000000)", K::kCount),
          flag("--fsdp-offload-params",
               "fsdp: CPUOffload(offload_params=True): flat shards, gradients and AdamW on the host", K::kSwitch)};
}

void apply_flags(const FlagValues& given, bool from_file, EngineSpec& spec, config::ConfigNotes& notes) {
  // Command-line flags override the file (as accelerate launch's flags override its config).
  auto overridden = [&](const std::string& flag_name, const std::string& value) {
    if (from_file) notes.apply(flag_name, value, "command line, over the config file");
  };
  auto text = [&](const char* name) -> const std::string* {
    const auto it = given.find(name);
    return it == given.end() ? nullptr : &it->second.text;
  };
  FsdpOptions f;
  if (from_file) f = fsdp_options(spec.options);
  if (const auto* v = text("--sharding-strategy")) {
    f.sharding_strategy = parse_sharding_strategy(*v);
    overridden("--sharding-strategy", *v);
  }
  if (const auto* v = text("--backward-prefetch")) {
    f.backward_prefetch = parse_backward_prefetch(*v);
    overridden("--backward-prefetch", *v);
  }
  if (given.count("--forward-prefetch")) {
    f.forward_prefetch = true;
    overridden("--forward-prefetch", "true");
  }
  if (const auto* v = text("--limit-all-gathers")) {
    f.limit_all_gathers = *v == "true";
    overridden("--limit-all-gathers", *v);
  }
  if (const auto it = given.find("--hsdp-shard-size"); it != given.end() && it->second.count > 0) {
    f.hybrid_shard_group_size = int(it->second.count);
    overridden("--hsdp-shard-size", std::to_string(it->second.count));
  }
  if (const auto* v = text("--reduce-dtype")) {
    f.reduce_dtype = *v;
    overridden("--reduce-dtype", *v);
  }
  if (const auto* v = text("--auto-wrap-policy")) {
    f.auto_wrap_policy = *v;
    if (*v == "SIZE_BASED_WRAP" && f.min_num_params <= 0) f.min_num_params = 100000000;  // launch.py's default
    if (*v != "SIZE_BASED_WRAP") f.min_num_params = 0;
    overridden("--auto-wrap-policy", *v);
  }
  if (const auto it = given.find("--min-num-params"); it != given.end()) {
    if (f.auto_wrap_policy != "SIZE_BASED_WRAP")
      throw UsageError("--min-num-params " + std::to_string(it->second.count) + ": read only with --auto-wrap-policy "
                       "SIZE_BASED_WRAP (the run's policy is " + f.auto_wrap_policy + ")");
    f.min_num_params = it->second.count;
    overridden("--min-num-params", std::to_string(it->second.count));
  }
  if (given.count("--fsdp-offload-params")) {
    f.offload_params = true;
    overridden("--fsdp-offload-params", "true");
  }
  validate(f);
  spec.options = f;
  spec.train.activation_checkpointing = spec.train.activation_checkpointing.or_full_if(f.activation_checkpointing);
}

bool broadcasts_initial_weights(const BackendOptions& options) { return fsdp_options(options).sync_module_states; }

// The sentences paraphrase torch/distributed/fsdp/api.py (ShardingStrategy, BackwardPrefetch,
// MixedPrecision, CPUOffload) and fully_sharded_data_parallel.py's arguments.
std::vector<OptionEffect> option_effects() {
  return {
      {"sharding_strategy",
       "what is sharded: FULL_SHARD shards parameters, gradients and optimizer states; "
       "SHARD_GRAD_OP keeps parameters gathered between forward and backward (more memory, "
       "fewer all-gathers); NO_SHARD is DDP; HYBRID_SHARD shards within a node and replicates across "
       "nodes; HYBRID_SHARD_ZERO2 does so with SHARD_GRAD_OP's gathered parameters"},
      {"backward_prefetch",
       "when the next unit's all-gather is issued in backward (BACKWARD_PRE overlaps more, "
       "holds one more unit's parameters)"},
      {"forward_prefetch",
       "issues the next unit's all-gather before the current forward runs (more overlap, "
       "one more gathered unit in memory)"},
      {"limit_all_gathers", "bounds all-gathers in flight (rate limiter): less peak memory, possibly less overlap"},
      {"param_dtype", "dtype of the gathered parameters, hence of the all-gather and the compute"},
      {"reduce_dtype", "dtype of the gradient reduce-scatter: bytes on the wire and rounding of the reduction"},
      {"flat_param_dtype",
       "dtype of the sharded flat parameter the optimizer updates: fp32 keeps exact masters, "
       "bf16 halves the bytes but rounds small updates away"},
      {"gradient_predivide_factor", "gradients divided before the reduction (overflow headroom); numerics only"},
      {"gradient_postdivide_factor", "gradients divided after the reduction; numerics only"},
      {"use_orig_params", "original parameters exposed as views (optimizer per parameter); no change to the math"},
      {"sync_module_states", "rank 0's initial weights broadcast at start; one-off cost, not in the step time"},
      {"cpu_ram_efficient_loading", "only rank 0 loads the checkpoint into CPU RAM; load time and host memory"},
      {"state_dict_type", "checkpoint layout (full or sharded); no effect on the step"},
      {"auto_wrap_policy", "which modules become FSDP units: granularity of gathers and frees"},
      {"min_num_params", "SIZE_BASED_WRAP's threshold: which modules become FSDP units"},
      {"offload_params", "parameters and gradients kept in host memory: less device memory, transfers each step"},
      {"shard_group_size", "ranks a parameter is sharded over: the per-rank share of model states"},
      {"hybrid_shard_group_size", "HYBRID_SHARD: shard within a group, replicate across groups"},
  };
}

}  // namespace zb::backends::fsdp
