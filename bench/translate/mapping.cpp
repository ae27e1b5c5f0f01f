// mapping.cpp — the key table of `zerobench translate` (see mapping.hpp). Sources of each line:
// the concept guide (accelerate docs/source/concept_guides/fsdp_and_deepspeed.md: its settings
// table, "Checkpointing", "Offloading", "Prefetching", "Model Loading", "Model", "Parameters
// Summoning", "Training" and "On Differences in Data Precision Handling"), the sharding table in
// docs/source/usage_guides/fsdp.md, accelerate's commands/to_fsdp2.py for FSDP2's names, and the
// upstream code named in a reason.
#include "bench/translate/mapping.hpp"

#include <map>

#include "config/deepspeed_zero_config.hpp"

namespace zb::bench::translate {

std::string to_string(Scope s) {
  switch (s) {
    case Scope::kTop: return "accelerate";
    case Scope::kFsdp: return "fsdp_config";
    case Scope::kPlugin: return "deepspeed_config";
    case Scope::kDs: return "DeepSpeed JSON";
  }
  return "?";
}

unsigned target_bit(Target t) { return t == Target::kDeepSpeed ? kToDs : t == Target::kFsdp ? kToFsdp : kToFsdp2; }

namespace {
constexpr Kind M = Kind::kMapped, A = Kind::kApproximate, N = Kind::kNoCounterpart, I = Kind::kIgnored;
constexpr Scope T = Scope::kTop, F = Scope::kFsdp, P = Scope::kPlugin, D = Scope::kDs;

const char* kLaunch = "a launcher/rendezvous setting (zerobench: --nproc, torchrun, srun); a DeepSpeed JSON has no launcher keys";
const char* kTpu = "TPU only";
const char* kBatch = "FSDP has no batch settings: the training script's dataloader and Accelerator set them "
                     "(the guide, \"Training\"); zerobench --micro-batch / --grad-accum / --grad-clip";
const char* kZeroInit = "(zero.Init: implied by stage 3)";
// DeepSpeed's prefetch budget, as its reader spells it (config/deepspeed_zero_config.hpp).
const std::string kPrefetchKey = config::zero_keys::kPrefetchBucketSize;
const std::string kPrefetch = "zero_optimization." + kPrefetchKey;
}  // namespace

const std::vector<Rule>& rules() {
  static const std::vector<Rule> r = {
      // ---- accelerate top level -> DeepSpeed JSON
      {T, "distributed_type", kToDs, "(file kind)", M,
       "a DeepSpeed JSON configures DeepSpeed by kind (accelerate names it with distributed_type DEEPSPEED + deepspeed_config_file); "
       "MULTI_GPU/MULTI_CPU/NO (DDP) -> zero_optimization.stage 0"},
      {T, "mixed_precision", kToDs, "bf16.enabled", M,
       "the same compute dtype, but not the same storage: FSDP mixed (accelerate >= 0.30) keeps fp32 flat params and "
       "fp32 grads, DeepSpeed bf16 keeps bf16 params and grads plus an fp32 master copy (the guide, \"On Differences in "
       "Data Precision Handling\")"},
      {T, "fp16", kToDs, "fp16.enabled", M, "the old spelling of mixed_precision fp16 (config_args.py process_config)"},
      {T, "num_processes", kToDs, "", N,
       "the world size is the launcher's (deepspeed --num_gpus, torchrun --nproc-per-node; zerobench --nproc); "
       "train_batch_size \"auto\" follows it"},
      {T, "num_machines", kToDs, "", N, "the launcher's host list (deepspeed --hostfile, torchrun --nnodes)"},
      {T, "compute_environment", kToDs, "", I, kLaunch}, {T, "debug", kToDs, "", I, kLaunch},
      {T, "machine_rank", kToDs, "", I, kLaunch}, {T, "main_process_ip", kToDs, "", I, kLaunch},
      {T, "main_process_port", kToDs, "", I, kLaunch}, {T, "rdzv_backend", kToDs, "", I, kLaunch},
      {T, "same_network", kToDs, "", I, kLaunch}, {T, "main_training_function", kToDs, "", I, kLaunch},
      {T, "gpu_ids", kToDs, "", I, kLaunch}, {T, "enable_cpu_affinity", kToDs, "", I, kLaunch},
      {T, "use_cpu", kToDs, "", I, "device choice (zerobench --device)"},
      {T, "mpirun_config.*", kToDs, "", I, kLaunch},
      {T, "downcast_bf16", kToDs, "", I, kTpu}, {T, "tpu_*", kToDs, "", I, kTpu},
      {T, "commands", kToDs, "", I, kTpu}, {T, "command_file", kToDs, "", I, kTpu},
      {T, "dynamo_config.*", kToDs, "", N, "torch.compile: DeepSpeed's `compile` section applies only when the script "
                                           "calls engine.compile()"},
      {T, "dynamo_backend", kToDs, "", N, "torch.compile (see dynamo_config)"},
      {T, "fp8_config.*", kToDs, "", N, "accelerate's fp8 recipe (Transformer Engine / MS-AMP); no DeepSpeed JSON key"},
      {T, "ipex_config.*", kToDs, "", N, "Intel Extension for PyTorch; not a DeepSpeed setting"},
      {T, "tp_config.*", kToDs, "", N, "tensor parallelism; outside the FSDP/ZeRO mapping"},
      {T, "parallelism_config.*", kToDs, "", N,
       "FSDP2's device mesh (HSDP); ZeRO-3 shards over the whole world (ZeRO++ hpZ is the nearest, see "
       "fsdp_reshard_after_forward)"},
      {T, "parallelism_config.parallelism_config_tp_size", kToDs, "", N,
       "tensor parallelism (the tp dimension of accelerate's mesh), not a data-parallel mesh: outside the FSDP/ZeRO "
       "mapping; DeepSpeed's nearest is AutoTP, tensor_parallel.autotp_size (zerobench runs neither above 1)"},
      {T, "parallelism_config.parallelism_config_cp_size", kToDs, "", N,
       "context parallelism (the cp dimension of accelerate's mesh), not a data-parallel mesh: outside the FSDP/ZeRO "
       "mapping; DeepSpeed's sequence parallelism (Ulysses, sequence_parallel_size) splits differently (zerobench "
       "runs neither above 1)"},
      {T, "megatron_lm_config.*", kToDs, "", I, "read only with distributed_type MEGATRON_LM"},
      {T, "deepspeed_config.*", kToDs, "", I, "read only with distributed_type DEEPSPEED (accelerate ignores it here)"},
      {T, "fsdp_config.*", kToAnyFsdp, "", I, "read only with distributed_type FSDP (accelerate ignores it here)"},
      {T, "fsdp_config.*", kToDs, "", I,
       "read only with distributed_type FSDP (accelerate ignores it here: a MULTI_GPU file's leftover block)"},
      {T, "*", kToDs, "", N, "an accelerate setting outside the guide's mapping"},
      // ---- accelerate top level -> accelerate FSDP config
      {T, "distributed_type", kToAnyFsdp, "distributed_type", M, "DEEPSPEED -> FSDP; MULTI_GPU/MULTI_CPU/NO (DDP) -> "
                                                                  "FSDP with NO_SHARD (the sharding table: NO_SHARD is ZeRO stage 0)"},
      {T, "mixed_precision", kToAnyFsdp, "mixed_precision", M, "accelerate's own key, the same for both frameworks"},
      {T, "fp16", kToAnyFsdp, "mixed_precision", M, "the old spelling of mixed_precision fp16 (config_args.py process_config)"},
      {T, "megatron_lm_config.*", kToAnyFsdp, "", I, "read only with distributed_type MEGATRON_LM; not carried"},
      {T, "deepspeed_config.*", kToAnyFsdp, "", I,
       "read only with distributed_type DEEPSPEED (accelerate ignores it here); not carried"},
      {T, "*", kToAnyFsdp, "(same key)", M, "a framework-independent accelerate setting: copied as is"},

      // ---- accelerate fsdp_config -> DeepSpeed JSON (FSDP1 and FSDP2 sources)
      {F, "fsdp_version", kToDs, "", N, "FSDP1 vs FSDP2 is a PyTorch choice; DeepSpeed has one ZeRO-3"},
      {F, "fsdp_sharding_strategy", kToDs, "zero_optimization.stage", M,
       "FULL_SHARD -> 3, SHARD_GRAD_OP -> 2, NO_SHARD -> 0 (usage_guides/fsdp.md); HYBRID_SHARD -> 3 with ZeRO++ hpZ "
       "(approximate). Bytes per rank agree up to padding: FSDP pads each unit's flat parameter to a multiple of W, "
       "DeepSpeed pads each parameter; DeepSpeed also holds an fp32 master copy (even in fp32) and its reduce bucket buffer "
       "(reduce_bucket_size elements), which FSDP does not"},
      {F, "fsdp_reshard_after_forward", kToDs, "zero_optimization.stage", M,
       "FSDP1: a strategy name, as fsdp_sharding_strategy; FSDP2: true -> 3, false -> 2 (to_fsdp2.py's inverse), an "
       "int N -> 3 with zero_hpz_partition_size N (approximate)"},
      {F, "fsdp_offload_params", kToDs, "zero_optimization.offload_param.device,zero_optimization.offload_optimizer.device", M,
       "FSDP offloads all or nothing; DeepSpeed offloads params and optimizer separately (the guide, \"Offloading\")"},
      {F, "fsdp_backward_prefetch", kToDs, kPrefetch, A,
       "FSDP prefetches by policy (the next unit); DeepSpeed by a budget of elements along the recorded trace, both "
       "passes (partitioned_param_coordinator.py fetch_sub_module: only when prefetch_bucket_sz > 0); NO_PREFETCH -> 0"},
      {F, "fsdp_forward_prefetch", kToDs, kPrefetch, A,
       "DeepSpeed's prefetch covers forward and backward alike (one budget; the guide, \"Prefetching\")"},
      {F, "fsdp_backward_prefetch_policy", kToDs, "", I,
       "the old spelling; accelerate 1.15 never reads it (FSDP1 then runs with backward_prefetch None)"},
      {F, "fsdp_auto_wrap_policy", kToDs, "zero_optimization.stage3_param_persistence_threshold", A,
       "module granularity: FSDP shards each wrapped unit's flat parameter, none kept whole; DeepSpeed partitions each "
       "parameter and gathers per submodule (transparent, the guide \"Model\"); threshold 0 keeps none whole either"},
      {F, "fsdp_transformer_layer_cls_to_wrap", kToDs, "", N, "DeepSpeed hooks every submodule; no wrap class"},
      {F, "fsdp_min_num_params", kToDs, "", N, "SIZE_BASED_WRAP's unit size; DeepSpeed has no units"},
      {F, "fsdp_state_dict_type", kToDs, "zero_optimization.stage3_gather_16bit_weights_on_model_save", M,
       "FULL_STATE_DICT -> true, SHARDED_STATE_DICT -> false (post-convert with zero_to_fp32.py) (the guide, "
       "\"Checkpointing\"); FSDP mixed saves fp32, DeepSpeed 16-bit"},
      {F, "fsdp_cpu_ram_efficient_loading", kToDs, kZeroInit, A,
       "transformers loads under deepspeed.zero.Init whenever the config is ZeRO-3 (the guide, \"Model Loading\"); no key"},
      {F, "fsdp_sync_module_states", kToDs, kZeroInit, A,
       "zero.Init partitions each parameter as it is created; no broadcast setting"},
      {F, "fsdp_use_orig_params", kToDs, "", N, "DeepSpeed keeps the module's own parameters (\"transparent to user\")"},
      {F, "fsdp_activation_checkpointing", kToDs, "", N,
       "the model's gradient checkpointing (TrainingArguments gradient_checkpointing; zerobench --activation-checkpointing)"},
      {F, "fsdp_activation_checkpointing_offload", kToDs, "", N, "offloaded activation checkpoints; no ZeRO key"},
      {F, "fsdp_ignored_modules", kToDs, "", N, "DeepSpeed has no per-module opt-out"},
      {F, "*", kToDs, "", N, "not one of accelerate 1.15's FSDP launch arguments; accelerate never reads it"},

      // ---- accelerate deepspeed_config (DeepSpeedPlugin) -> accelerate FSDP config
      {P, "zero_stage", kToFsdp, "fsdp_config.fsdp_sharding_strategy", M, "3 -> FULL_SHARD, 2 -> SHARD_GRAD_OP, 0 -> "
                                                                          "NO_SHARD; 1 -> SHARD_GRAD_OP (approximate)"},
      {P, "zero_stage", kToFsdp2, "fsdp_config.fsdp_reshard_after_forward", M,
       "3 -> true, 2/1/0 -> false (to_fsdp2.py maps SHARD_GRAD_OP and NO_SHARD to false; approximate below 3)"},
      {P, "offload_optimizer_device", kToAnyFsdp, "fsdp_config.fsdp_offload_params", M,
       "FSDP offloads all or nothing (the guide, \"Offloading\"): true if either is offloaded"},
      {P, "offload_param_device", kToAnyFsdp, "fsdp_config.fsdp_offload_params", M,
       "FSDP offloads all or nothing (the guide, \"Offloading\"): true if either is offloaded"},
      {P, "offload_optimizer_nvme_path", kToAnyFsdp, "", N, "FSDP offloads to CPU memory only"},
      {P, "offload_param_nvme_path", kToAnyFsdp, "", N, "FSDP offloads to CPU memory only"},
      {P, "zero3_init_flag", kToFsdp, "fsdp_config.fsdp_cpu_ram_efficient_loading,fsdp_config.fsdp_sync_module_states", M,
       "the guide, \"Model Loading\": efficient loading needs sync_module_states, which accelerate sets with it"},
      {P, "zero3_init_flag", kToFsdp2, "fsdp_config.fsdp_cpu_ram_efficient_loading", M,
       "the guide, \"Model Loading\" (FSDP2 broadcasts rank 0's state dict: fsdp2_load_full_state_dict)"},
      {P, "zero3_save_16bit_model", kToAnyFsdp, "fsdp_config.fsdp_state_dict_type", M,
       "true -> FULL_STATE_DICT, false -> SHARDED_STATE_DICT (the guide, \"Checkpointing\")"},
      {P, "gradient_accumulation_steps", kToAnyFsdp, "", N, kBatch},
      {P, "gradient_clipping", kToAnyFsdp, "", N, kBatch},
      {P, "deepspeed_config_file", kToAnyFsdp, "", N, "its keys are translated one by one (deepspeed_config_file:KEY)"},
      {P, "deepspeed_multinode_launcher", kToAnyFsdp, "", I, "DeepSpeed's multi-node launcher"},
      {P, "deepspeed_hostfile", kToAnyFsdp, "", I, "DeepSpeed's multi-node launcher"},
      {P, "deepspeed_exclusion_filter", kToAnyFsdp, "", I, "DeepSpeed's multi-node launcher"},
      {P, "deepspeed_inclusion_filter", kToAnyFsdp, "", I, "DeepSpeed's multi-node launcher"},
      {P, "deepspeed_moe_layer_cls_names", kToAnyFsdp, "", N, "MoE leaf modules; FSDP has none"},
      {P, "*", kToAnyFsdp, "", N, "a DeepSpeedPlugin field outside the guide's mapping"},

      // ---- DeepSpeed JSON -> accelerate FSDP config
      {D, "zero_optimization.stage", kToFsdp, "fsdp_config.fsdp_sharding_strategy", M,
       "3 -> FULL_SHARD, 2 -> SHARD_GRAD_OP, 0 -> NO_SHARD (usage_guides/fsdp.md); 1 -> SHARD_GRAD_OP (approximate: "
       "FSDP has no optimizer-only sharding)"},
      {D, "zero_optimization.stage", kToFsdp2, "fsdp_config.fsdp_reshard_after_forward", M,
       "3 -> true, 2/1/0 -> false (to_fsdp2.py's value mapping; approximate below 3: FSDP2 always shards)"},
      {D, "zero_optimization.zero_hpz_partition_size", kToFsdp, "fsdp_config.fsdp_sharding_strategy", A,
       "ZeRO++ hpZ > 1 -> HYBRID_SHARD (usage_guides/fsdp.md); hpZ keeps a secondary param copy per node while "
       "grads and optimizer states stay sharded over all ranks, HYBRID_SHARD replicates all of them across nodes"},
      {D, "zero_optimization.zero_hpz_partition_size", kToFsdp2, "", N,
       "accelerate's FSDP2 takes fsdp_reshard_after_forward as a bool only (FullyShardedDataParallelPlugin."
       "__post_init__ raises for an int), so hpZ's nearest, fully_shard(reshard_after_forward=N) (reshard to N "
       "ranks after forward: _fsdp_init.py _get_post_forward_mesh_info), has no accelerate key; the translation "
       "writes true (stage 3) and zerobench runs the int with --reshard-after-forward N"},
      {D, "zero_optimization.offload_param.device", kToAnyFsdp, "fsdp_config.fsdp_offload_params", M,
       "FSDP offloads all or nothing (the guide, \"Offloading\"): true if either is offloaded"},
      {D, "zero_optimization.offload_optimizer.device", kToAnyFsdp, "fsdp_config.fsdp_offload_params", M,
       "FSDP offloads all or nothing (the guide, \"Offloading\"): true if either is offloaded"},
      {D, "zero_optimization.cpu_offload", kToAnyFsdp, "fsdp_config.fsdp_offload_params", M,
       "the old spelling of offload_optimizer cpu"},
      {D, "zero_optimization.cpu_offload_param", kToAnyFsdp, "fsdp_config.fsdp_offload_params", M,
       "the old spelling of offload_param cpu"},
      {D, "zero_optimization.offload_param.*", kToAnyFsdp, "", N, "FSDP's CPUOffload has no such setting"},
      {D, "zero_optimization.offload_optimizer.*", kToAnyFsdp, "", N, "FSDP's CPUOffload has no such setting"},
      {D, kPrefetch, kToFsdp,
       "fsdp_config.fsdp_backward_prefetch,fsdp_config.fsdp_forward_prefetch", A,
       "> 0 or \"auto\" -> BACKWARD_PRE + forward prefetch (DeepSpeed prefetches along its trace in both passes); "
       "0 -> NO_PREFETCH, false"},
      {D, kPrefetch, kToFsdp2, "", N,
       "FSDP2 prefetches one group implicitly; accelerate's FSDP2 has no prefetch keys (to_fsdp2.py removes them)"},
      {D, "zero_optimization.overlap_comm", kToAnyFsdp, "", N, "FSDP always overlaps its collectives on side streams"},
      {D, "zero_optimization.stage3_param_persistence_threshold", kToAnyFsdp, "", N,
       "FSDP keeps no parameter unsharded (every parameter is in its unit's flat parameter)"},
      {D, "zero_optimization.stage3_max_live_parameters", kToAnyFsdp, "", N,
       "the nearest is FSDP1's limit_all_gathers (<= 2 all-gathers in flight), which accelerate's YAML cannot set"},
      {D, "zero_optimization.stage3_gather_16bit_weights_on_model_save", kToAnyFsdp, "fsdp_config.fsdp_state_dict_type", M,
       "true -> FULL_STATE_DICT, false -> SHARDED_STATE_DICT (the guide, \"Checkpointing\"); \"auto\" is DeepSpeed's "
       "default false"},
      {D, "zero_optimization.*", kToAnyFsdp, "", N, "a ZeRO tuning knob (buckets, sub-groups, quantization) FSDP has not"},
      {D, "bf16.enabled", kToAnyFsdp, "mixed_precision", M,
       "true -> bf16, false -> no, \"auto\" -> left out (the script's --bf16 decides, as \"auto\" does); FSDP mixed "
       "keeps fp32 flat params, DeepSpeed bf16 keeps bf16 params + fp32 masters (the guide's precision table)"},
      {D, "bf16.*", kToAnyFsdp, "", N, "BF16_Optimizer / ZeRO master-weight options; FSDP's low-precision mode "
                                       "(bf16 params, bf16 AdamW) comes from loading in bf16 with mixed_precision no"},
      {D, "fp16.enabled", kToAnyFsdp, "mixed_precision", M, "true -> fp16"},
      {D, "fp16.*", kToAnyFsdp, "", N, "DeepSpeed's loss scaler; FSDP uses torch's ShardedGradScaler with its own defaults"},
      {D, "communication_data_type", kToAnyFsdp, "", N,
       "FSDP's MixedPrecision.reduce_dtype, which accelerate's YAML cannot set (zerobench --reduce-dtype)"},
      {D, "data_types.*", kToAnyFsdp, "", N, "ZeRO's gradient accumulation dtype; accelerate's YAML has no key"},
      {D, "train_batch_size", kToAnyFsdp, "", N, kBatch},
      {D, "train_micro_batch_size_per_gpu", kToAnyFsdp, "", N, kBatch},
      {D, "gradient_accumulation_steps", kToAnyFsdp, "", N, kBatch},
      {D, "gradient_clipping", kToAnyFsdp, "", N, kBatch},
      {D, "optimizer.*", kToAnyFsdp, "", N, "with FSDP the script builds the optimizer (zerobench --lr, --weight-decay)"},
      {D, "scheduler.*", kToAnyFsdp, "", N,
       "with FSDP HF's Trainer builds the scheduler from its lr_scheduler_type (zerobench --lr-scheduler-type); "
       "the nearest types: WarmupLR -> constant_with_warmup, WarmupDecayLR -> linear, WarmupCosineLR -> "
       "cosine_with_min_lr (DeepSpeed's warm-up starts at warmup_min_lr or warmup_min_ratio and is log-shaped unless "
       "warmup_type is linear)"},
      {D, "activation_checkpointing.*", kToAnyFsdp, "", N,
       "DeepSpeed's own checkpointing API; FSDP's is fsdp_activation_checkpointing (zerobench --activation-checkpointing)"},
      {D, "zero_allow_untested_optimizer", kToAnyFsdp, "", N, "DeepSpeed's optimizer check"},
      {D, "zero_force_ds_cpu_optimizer", kToAnyFsdp, "", N, "DeepSpeed's optimizer check"},
      {D, "compile.*", kToAnyFsdp, "", N, "engine.compile(); accelerate's dynamo_config is the FSDP side's"},
      {D, "torch_autocast.*", kToAnyFsdp, "", N, "DeepSpeed's autocast wrapper; FSDP's is mixed_precision"},
      {D, "steps_per_print", kToAnyFsdp, "", I, "logging"}, {D, "wall_clock_breakdown", kToAnyFsdp, "", I, "logging"},
      {D, "memory_breakdown", kToAnyFsdp, "", I, "logging"}, {D, "dump_state", kToAnyFsdp, "", I, "logging"},
      {D, "tensorboard.*", kToAnyFsdp, "", I, "logging"}, {D, "wandb.*", kToAnyFsdp, "", I, "logging"},
      {D, "csv_monitor.*", kToAnyFsdp, "", I, "logging"}, {D, "comet.*", kToAnyFsdp, "", I, "logging"},
      {D, "monitor_config.*", kToAnyFsdp, "", I, "logging"}, {D, "comms_logger.*", kToAnyFsdp, "", I, "logging"},
      {D, "comms_config.*", kToAnyFsdp, "", I, "logging"}, {D, "flops_profiler.*", kToAnyFsdp, "", I, "profiling"},
      {D, "timers.*", kToAnyFsdp, "", I, "logging"},
      {D, "*", kToAnyFsdp, "", N, "a DeepSpeed setting outside the guide's mapping"},
  };
  return r;
}

const std::vector<AddedRule>& added_rules() {
  static const std::vector<AddedRule> r = {
      {kToDs, "zero_optimization.stage", "no sharding key: accelerate's default FULL_SHARD"},
      {kToDs, "zero_optimization.overlap_comm", "FSDP always overlaps its reduce-scatter on a side stream"},
      {kToDs, "zero_optimization.reduce_bucket_size",
       "\"auto\" as accelerate's templates write it (transformers fills hidden^2); FSDP reduce-scatters each unit at once"},
      {kToDs, kPrefetch,
       "no prefetch key: FSDP2 prefetches implicitly -> \"auto\"; FSDP1 without fsdp_backward_prefetch -> 0"},
      {kToDs, "zero_optimization.stage3_param_persistence_threshold",
       "FSDP keeps no parameter unsharded; 0 keeps none whole (DeepSpeed's default 1e5 would)"},
      {kToDs, "bf16.enabled", "no mixed_precision: accelerate's default no (fp32)"},
      {kToDs, "zero_optimization.stage3_gather_16bit_weights_on_model_save",
       "DDP (MULTI_GPU/MULTI_CPU/NO) saves the whole model -> true (DeepSpeed reads the key at stage 3 only)"},
      {kToDs, "train_micro_batch_size_per_gpu", "\"auto\": the guide's advice; the Trainer / Accelerator fill it"},
      {kToDs, "train_batch_size", "\"auto\": the guide's advice; the Trainer / Accelerator fill it"},
      {kToDs, "gradient_accumulation_steps", "\"auto\": the guide's advice; the Trainer / Accelerator fill it"},
      {kToDs, "gradient_clipping", "\"auto\": the guide's advice; the Trainer / Accelerator fill it"},
      {kToAnyFsdp, "distributed_type", "the target is an accelerate FSDP config"},
      {kToAnyFsdp, "fsdp_config.fsdp_version", "1 (FSDP1 semantics) or 2 (fully_shard), as --to asks"},
      {kToAnyFsdp, "fsdp_config.fsdp_auto_wrap_policy",
       "DeepSpeed needs no wrap policy (the guide, \"Model\"); accelerate's default NO_WRAP would make one unit of the "
       "whole model, so TRANSFORMER_BASED_WRAP (one unit per decoder block)"},
      {kToAnyFsdp, "fsdp_config.fsdp_use_orig_params", "accelerate's default (the guide: required for torch.compile)"},
      {kToAnyFsdp, "fsdp_config.fsdp_sync_module_states", "with zero.Init-like loading, accelerate sets it"},
      {kToAnyFsdp, "fsdp_config.fsdp_cpu_ram_efficient_loading",
       "transformers loads a ZeRO-3 model under zero.Init (the guide, \"Model Loading\"); below stage 3 it does not"},
      {kToAnyFsdp, "fsdp_config.fsdp_state_dict_type",
       "stage3_gather_16bit_weights_on_model_save absent: DeepSpeed's default false -> SHARDED_STATE_DICT"},
      {kToAnyFsdp, "fsdp_config.fsdp_backward_prefetch",
       kPrefetchKey + " absent: DeepSpeed's default 5e7 prefetches -> BACKWARD_PRE"},
      {kToAnyFsdp, "fsdp_config.fsdp_forward_prefetch",
       kPrefetchKey + " absent: DeepSpeed's default 5e7 prefetches in forward too"},
      {kToAnyFsdp, "fsdp_config.fsdp_offload_params", "no offload key: DeepSpeed's default none"},
      {kToAnyFsdp, "fsdp_config.fsdp_sharding_strategy", "no stage: DeepSpeed's default 0 -> NO_SHARD"},
      {kToAnyFsdp, "fsdp_config.fsdp_reshard_after_forward", "no stage: DeepSpeed's default 0 -> false"},
      {kToAnyFsdp, "mixed_precision", "bf16 and fp16 absent: DeepSpeed runs fp32 -> no"},
  };
  return r;
}

namespace {
bool matches(const std::string& pattern, const std::string& key, size_t* score) {
  if (pattern == key) {
    *score = 1u << 20;
    return true;
  }
  if (pattern == "*") {
    *score = 0;
    return true;
  }
  if (pattern.size() >= 2 && pattern.back() == '*') {
    const std::string stem = pattern.substr(0, pattern.size() - (pattern[pattern.size() - 2] == '.' ? 2 : 1));
    if (key.rfind(stem, 0) == 0 && (key.size() == stem.size() || pattern[pattern.size() - 2] != '.' || key[stem.size()] == '.')) {
      *score = stem.size() + 1;
      return true;
    }
  }
  return false;
}
}  // namespace

const Rule& find_rule(Scope scope, const std::string& key, Target to) {
  const Rule* best = nullptr;
  size_t best_score = 0;
  for (const auto& r : rules()) {
    size_t score = 0;
    if (r.scope != scope || !(r.to & target_bit(to)) || !matches(r.key, key, &score)) continue;
    if (!best || score > best_score) best = &r, best_score = score;
  }
  if (!best) {  // every scope x target has a "*" rule; this guards the table itself
    static const Rule none{Scope::kTop, "*", 7, "", Kind::kNoCounterpart, "outside the guide's mapping"};
    return none;
  }
  return *best;
}

std::string added_reason(Target to, const std::string& target_key) {
  for (const auto& r : added_rules())
    if ((r.to & target_bit(to)) && target_key == r.target) return r.reason;
  return "written by the translation (see the other entries)";
}

std::string canonical_ds_key(const std::string& dotted) {
  static const std::map<std::string, std::string> aliases = {
      {"zero_optimization.prefetch_bucket_size", kPrefetch},
      {"zero_optimization.param_persistence_threshold", "zero_optimization.stage3_param_persistence_threshold"},
      {"zero_optimization.model_persistence_threshold", "zero_optimization.stage3_model_persistence_threshold"},
      {"zero_optimization.max_live_parameters", "zero_optimization.stage3_max_live_parameters"},
      {"zero_optimization.max_reuse_distance", "zero_optimization.stage3_max_reuse_distance"},
      {"zero_optimization.gather_16bit_weights_on_model_save",
       "zero_optimization.stage3_gather_16bit_weights_on_model_save"},
      {"zero_optimization.stage3_gather_fp16_weights_on_model_save",
       "zero_optimization.stage3_gather_16bit_weights_on_model_save"},
  };
  if (dotted.rfind("bfloat16", 0) == 0) return "bf16" + dotted.substr(8);
  const auto it = aliases.find(dotted);
  return it == aliases.end() ? dotted : it->second;
}

}  // namespace zb::bench::translate
