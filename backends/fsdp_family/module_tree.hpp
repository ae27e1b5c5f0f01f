// module_tree.hpp — the reference model's module tree (HF Llama's names and registration order,
// scripts/crossval/model.py) with each module's parameter count: what an auto-wrap policy walks.
// Owns: that tree, and accelerate's FSDP2 size policy run on it. Must not: allocate tensors.
// Upstream: transformers LlamaForCausalLM (model.embed_tokens, model.layers.N.{input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm,
// lm_head); accelerate utils/fsdp_utils.py fsdp2_prepare_auto_wrap_policy (size branch),
// utils/other.py get_module_children_bottom_up.
// Belongs to the PyTorch-FSDP family (backends/fsdp_family/), used by fsdp (FSDP1's
// _recursive_wrap) and fsdp2 (accelerate's per-module size policy).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.hpp"

namespace zb::backends::fsdp_family {

struct Module {
  std::string name;          // its path from the root ("" for the root)
  bool module_list = false;  // nn.ModuleList (FSDP1's size policy never wraps one)
  int64_t own = 0;           // numel of the parameters registered on the module itself
  std::vector<Module> children;
  int64_t numel() const;     // own plus every descendant's
};

// The tree of `cfg`'s model, root first (the root's name is "").
Module module_tree(const models::ModelConfig& cfg);

// accelerate's FSDP2 SIZE_BASED_WRAP: the modules fsdp2_prepare_model hands to fully_shard before
// the root — every module but the root, bottom-up (get_module_children_bottom_up(model)[:-1]),
// with more than `min_num_params` parameters (the policy's strict `>`). Empty when
// min_num_params <= 0: accelerate then passes no policy (set_auto_wrap_policy).
std::vector<std::string> fsdp2_size_policy_modules(const models::ModelConfig& cfg, int64_t min_num_params);

// A size policy's selection as a refusal names it: the first six names, then "... (N in all)".
std::string module_list_text(const std::vector<std::string>& names);

}  // namespace zb::backends::fsdp_family
