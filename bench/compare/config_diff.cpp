// config_diff.cpp — differing config keys and their effects (see config_diff.hpp). The effect
// sentences of a backend's options are the backend's own (BackendInfo::analysis.option_effects, e.g.
// backends/fsdp/fsdp_config.cpp, paraphrasing the upstream documentation of each option); the
// general ones (backend, precision, config.train) are here.
#include "bench/compare/config_diff.hpp"

#include <map>
#include <set>

#include "backends/backend_info.hpp"

namespace zb::bench::compare {

namespace {
using json = nlohmann::json;

// The keys that are no one backend's options: the backend and precision, the options every
// engine's report holds, and config.train's. Each backend describes its own options
// (BackendInfo::analysis.option_effects, in its folder); a key described here wins over a backend's.
const std::map<std::string, std::string>& general_effects() {
  static const std::map<std::string, std::string> e = {
      {"backend", "a different engine: how parameters, gradients and optimizer states are sharded and communicated"},
      {"precision", "dtypes of the stored parameters, the compute and the optimizer (Table 2)"},
      // options every engine's report holds
      {"clip_grad_norm", "which framework's gradient-norm clipping (its norm's dtype and order)"},
      {"optimizer", "the optimizer implementation and the dtype it updates in"},
      {"sync_each_batch", "reduce gradients after every micro-batch instead of only the last"},
      {"activation_checkpointing", "recompute each block in backward: less activation memory, about 1/3 more compute"},
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
      {"adamw_impl", "torch.optim.AdamW implementation (fused, foreach, for-loop): the updates round differently in the last bit; the kernels differ in speed"},
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
      {"cycle_momentum", "DeepSpeed OneCycle momentum cycling: AdamW's betas (momentum, 0.99) every step: changes the losses"},
      {"cycle_min_mom", "DeepSpeed OneCycle lower momentum (AdamW's beta1): changes the losses"},
      {"cycle_max_mom", "DeepSpeed OneCycle upper momentum (AdamW's beta1): changes the losses"},
      {"decay_mom_rate", "DeepSpeed OneCycle momentum decay rate: changes the losses after the cycle"},
      {"lr_range_test_min_lr", "DeepSpeed LRRangeTest start lr: changes the losses"},
      {"lr_range_test_step_size", "DeepSpeed LRRangeTest interval: changes the lr over the run"},
      {"lr_range_test_step_rate", "DeepSpeed LRRangeTest growth: changes the lr over the run"},
      {"lr_range_test_staircase", "DeepSpeed LRRangeTest staircase: changes the lr over the run"},
  };
  return e;
}

// The general sentences, then every registered backend's (the first to describe a key wins).
std::map<std::string, std::string> effects() {
  std::map<std::string, std::string> e = general_effects();
  for (const auto& b : backends::registered_backends())
    for (const auto& o : b.analysis.option_effects) e.emplace(o.key, o.effect);
  return e;
}

void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  out[prefix] = j;
}

std::map<std::string, json> flat_config(const reports::RunConfig& config) {
  std::map<std::string, json> out;
  if (const auto& b = config.backend) {
    if (b->name) out["backend"] = *b->name;
    if (b->precision) out["precision"] = *b->precision;
    if (b->options) flatten(*b->options, "options", out);  // each backend's resolved record, as written
  }
  if (config.train) flatten(reports::to_json(*config.train), "train", out);
  return out;
}
}  // namespace

std::string config_effect(const std::string& key) {
  // "options.offload_optimizer.device": offload_optimizer.device, then device (a sentence at the
  // longer path wins: `device` means another thing under offload_param).
  const auto e = effects();
  const auto first = key.find('.');
  for (auto at = first == std::string::npos ? std::string::npos : first + 1; at != std::string::npos;) {
    const auto it = e.find(key.substr(at));
    if (it != e.end()) return it->second;
    const auto dot = key.find('.', at);
    at = dot == std::string::npos ? std::string::npos : dot + 1;
  }
  const auto it = e.find(key);  // a key of no section: backend, precision
  return it == e.end() ? "no description" : it->second;
}

bool is_workload_key(const std::string& key) {
  static const std::set<std::string> keys = {"train.micro_batch", "train.grad_accum", "train.seq_len",
                                             "train.steps",       "train.data",       "train.seed"};
  return keys.count(key) > 0;
}

json config_differences(const std::vector<const reports::RunConfig*>& configs) {
  std::vector<std::map<std::string, json>> flat;
  std::set<std::string> keys;
  for (const auto* c : configs) {
    flat.push_back(c ? flat_config(*c) : std::map<std::string, json>{});
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
      if (!configs[i]) continue;  // a side without a report has nothing to differ in
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
