// config_diff.cpp — differing config keys and their effects (see config_diff.hpp).
// The effect sentences paraphrase the upstream documentation of each option: PyTorch
// torch/distributed/fsdp/api.py (ShardingStrategy, BackwardPrefetch, MixedPrecision) and
// fully_shard.py (FSDP2), DeepSpeed runtime/zero/config.py (DeepSpeedZeroConfig fields).
#include "bench/compare/config_diff.hpp"

#include <map>
#include <set>

namespace zb::bench::compare {

namespace {
using json = nlohmann::json;

const std::map<std::string, std::string>& effects() {
  static const std::map<std::string, std::string> e = {
      {"backend", "a different engine: how parameters, gradients and optimizer states are sharded and communicated"},
      {"precision", "dtypes of the stored parameters, the compute and the optimizer (Table 2)"},
      // fsdp / fsdp2 (torch/distributed/fsdp/api.py, _fully_shard/_fully_shard.py)
      {"sharding_strategy",
       "what is sharded: FULL_SHARD shards parameters, gradients and optimizer states; "
       "SHARD_GRAD_OP keeps parameters gathered between forward and backward (more memory, "
       "fewer all-gathers); NO_SHARD is DDP"},
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
      {"offload_params", "parameters and gradients kept in host memory: less device memory, transfers each step"},
      {"shard_group_size", "ranks a parameter is sharded over: the per-rank share of model states"},
      {"hybrid_shard_group_size", "HYBRID_SHARD: shard within a group, replicate across groups"},
      {"reshard_after_forward", "FSDP2: free gathered parameters after forward (true) or keep them for backward"},
      {"output_dtype", "FSDP2: dtype the unit's outputs are cast to"},
      {"fsdp2_grouping", "FSDP2: which modules form one parameter group (one all-gather each)"},
      {"modules_to_forward_prefetch", "FSDP2: explicit forward prefetch depth"},
      {"modules_to_backward_prefetch", "FSDP2: explicit backward prefetch depth"},
      {"force_sum_reduction_for_comms", "FSDP2: SUM collectives with a post-divide instead of AVG; numerics only"},
      {"clip_grad_norm", "which framework's gradient-norm clipping (its norm's dtype and order)"},
      {"optimizer", "the optimizer implementation and the dtype it updates in"},
      {"sync_each_batch", "reduce gradients after every micro-batch instead of only the last"},
      {"activation_checkpointing", "recompute each block in backward: less activation memory, about 1/3 more compute"},
      // zero3 (deepspeed/runtime/zero/config.py DeepSpeedZeroConfig)
      {"stage", "ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 also parameters"},
      {"reduce_bucket_size",
       "elements per gradient reduce bucket: the IPG buffer's bytes per rank and how many "
       "reduce-scatters a step issues"},
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
      {"overlap_comm", "gradient reduction overlapped with backward (two buckets alternate)"},
      {"contiguous_gradients", "gradients copied into one contiguous buffer as they are produced"},
      {"communication_data_type", "dtype of the gradient reduce-scatter"},
      {"grad_accum_dtype", "dtype gradients are accumulated in between micro-batches"},
      {"model_dtype", "dtype of the partitioned parameters and of the compute"},
      {"reduces_every_micro_batch", "gradients reduced every micro-batch (DeepSpeed ZeRO-2/3 has no no_sync)"},
      // ddp
      {"bucket_cap_mb", "DDP all-reduce bucket size: how many all-reduces a step issues"},
      // train
      {"micro_batch",
       "samples per rank per micro-batch: tokens per step, activation memory; throughput is "
       "compared per token, memory and losses are not like for like"},
      {"grad_accum", "micro-batches per optimizer step: tokens per step and how often gradients are reduced"},
      {"seq_len", "tokens per sample: compute per token (attention) and activation memory"},
      {"steps", "optimizer steps run"},
      {"warmup", "steps left out of the timing statistics"},
      {"grad_clip", "max global gradient norm; changes the updates when the norm exceeds it"},
      {"lr", "peak learning rate: changes the losses"},
      {"lr_schedule", "learning-rate schedule: changes the losses"},
      {"lr_warmup_steps", "learning-rate warm-up: changes the losses"},
      {"min_lr_ratio", "cosine floor: changes the losses late in training"},
      {"weight_decay", "AdamW decoupled weight decay: changes the losses"},
      {"betas", "AdamW moment decay rates: changes the losses"},
      {"eps", "AdamW epsilon: changes the losses slightly"},
      {"seed", "initial weights and data: different losses"},
      {"data", "the training data: different losses"},
      {"measure_lost_updates", "records the lost-update diagnostic: extra work per step"},
      {"warmup_type", "DeepSpeed WarmupLR shape: changes the losses during warm-up"},
      {"warmup_min_lr", "DeepSpeed warm-up start lr: changes the losses during warm-up"},
      {"warmup_min_ratio", "DeepSpeed warm-up start ratio: changes the losses during warm-up"},
      {"cos_min_ratio", "DeepSpeed cosine floor: changes the losses late in training"},
      {"total_num_steps", "DeepSpeed schedule length: changes the lr over the run"},
      {"warmup_max_lr", "DeepSpeed warm-up peak lr: changes the losses"},
      {"warmup_num_steps", "DeepSpeed warm-up length: changes the losses during warm-up"},
      {"lr_warmup_ratio", "learning-rate warm-up as a fraction of the steps: changes the losses"},
      {"cycle_min_lr", "DeepSpeed OneCycle lower lr: changes the losses"},
      {"cycle_max_lr", "DeepSpeed OneCycle upper lr: changes the losses"},
      {"decay_lr_rate", "DeepSpeed OneCycle decay rate: changes the losses after the cycle"},
      {"cycle_first_step_size", "DeepSpeed OneCycle rising half: changes the lr over the run"},
      {"cycle_second_step_size", "DeepSpeed OneCycle falling half: changes the lr over the run"},
      {"cycle_first_stair_count", "DeepSpeed OneCycle staircase: changes the lr over the run"},
      {"cycle_second_stair_count", "DeepSpeed OneCycle staircase: changes the lr over the run"},
      {"decay_step_size", "DeepSpeed OneCycle decay interval: changes the losses after the cycle"},
      {"cycle_momentum", "DeepSpeed OneCycle momentum cycling (off)"},
      {"lr_range_test_min_lr", "DeepSpeed LRRangeTest start lr: changes the losses"},
      {"lr_range_test_step_size", "DeepSpeed LRRangeTest interval: changes the lr over the run"},
      {"lr_range_test_step_rate", "DeepSpeed LRRangeTest growth: changes the lr over the run"},
      {"lr_range_test_staircase", "DeepSpeed LRRangeTest staircase: changes the lr over the run"},
  };
  return e;
}

void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  out[prefix] = j;
}

std::map<std::string, json> flat_config(const json& config) {
  std::map<std::string, json> out;
  if (!config.is_object()) return out;
  if (const auto b = config.find("backend"); b != config.end() && b->is_object()) {
    if (b->contains("name")) out["backend"] = (*b)["name"];
    if (b->contains("precision")) out["precision"] = (*b)["precision"];
    if (b->contains("options")) flatten((*b)["options"], "options", out);
  }
  if (const auto t = config.find("train"); t != config.end()) flatten(*t, "train", out);
  return out;
}
}  // namespace

std::string config_effect(const std::string& key) {
  const auto dot = key.rfind('.');
  const std::string last = dot == std::string::npos ? key : key.substr(dot + 1);
  const auto& e = effects();
  const auto it = e.find(last);
  return it == e.end() ? "no description" : it->second;
}

bool is_workload_key(const std::string& key) {
  static const std::set<std::string> keys = {"train.micro_batch", "train.grad_accum", "train.seq_len",
                                             "train.steps",       "train.data",       "train.seed"};
  return keys.count(key) > 0;
}

json config_differences(const std::vector<json>& configs) {
  std::vector<std::map<std::string, json>> flat;
  std::set<std::string> keys;
  for (const auto& c : configs) {
    flat.push_back(flat_config(c));
    for (const auto& [k, v] : flat.back()) keys.insert(k);
  }
  json out = json::array();
  for (const auto& key : keys) {
    json values = json::array();
    bool differ = false, first = true;
    json seen;
    for (size_t i = 0; i < flat.size(); ++i) {
      const auto it = flat[i].find(key);
      values.push_back(it == flat[i].end() ? json(nullptr) : it->second);
      if (!configs[i].is_object()) continue;  // a side without a report has nothing to differ in
      if (first)
        seen = values.back(), first = false;
      else if (values.back() != seen)
        differ = true;
    }
    if (!differ) continue;
    out.push_back(
        {{"key", key}, {"values", values}, {"effect", config_effect(key)}, {"workload", is_workload_key(key)}});
  }
  return out;
}

}  // namespace zb::bench::compare
