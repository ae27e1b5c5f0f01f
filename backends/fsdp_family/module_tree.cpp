// module_tree.cpp — see module_tree.hpp.
#include "backends/fsdp_family/module_tree.hpp"

namespace zb::backends::fsdp_family {

int64_t Module::numel() const {
  int64_t n = own;
  for (const auto& c : children) n += c.numel();
  return n;
}

namespace {

Module leaf(const std::string& name, int64_t numel) { return {name, false, numel, {}}; }

// get_module_children_bottom_up: a depth-first walk from the root pushing each module's children,
// popped last-in-first-out, then reversed — so a module comes after all its descendants.
void bottom_up(const Module& m, std::vector<const Module*>& out) {
  std::vector<const Module*> stack{&m}, order;
  while (!stack.empty()) {
    const Module* cur = stack.back();
    stack.pop_back();
    order.push_back(cur);
    for (const auto& c : cur->children) stack.push_back(&c);
  }
  out.assign(order.rbegin(), order.rend());
}

}  // namespace

Module module_tree(const models::ModelConfig& cfg) {
  const int64_t H = cfg.hidden, V = cfg.vocab, F = cfg.ffn, KV = cfg.kv_dim();
  Module layers{"model.layers", true, 0, {}};
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    Module attn{p + ".self_attn", false, 0,
                {leaf(p + ".self_attn.q_proj", H * H), leaf(p + ".self_attn.k_proj", KV * H),
                 leaf(p + ".self_attn.v_proj", KV * H), leaf(p + ".self_attn.o_proj", H * H)}};
    Module mlp{p + ".mlp", false, 0,
               {leaf(p + ".mlp.gate_proj", F * H), leaf(p + ".mlp.up_proj", F * H), leaf(p + ".mlp.down_proj", H * F)}};
    layers.children.push_back(
        {p, false, 0, {leaf(p + ".input_layernorm", H), attn, leaf(p + ".post_attention_layernorm", H), mlp}});
  }
  Module model{"model", false, 0, {leaf("model.embed_tokens", V * H), layers, leaf("model.norm", H)}};
  return {"", false, 0, {model, leaf("lm_head", V * H)}};
}

std::vector<std::string> fsdp2_size_policy_modules(const models::ModelConfig& cfg, int64_t min_num_params) {
  std::vector<std::string> out;
  if (min_num_params <= 0) return out;
  const Module root = module_tree(cfg);
  std::vector<const Module*> order;
  bottom_up(root, order);
  order.pop_back();  // [:-1]: the root, which fsdp2_prepare_model always wraps last
  for (const Module* m : order)
    if (m->numel() > min_num_params) out.push_back(m->name);
  return out;
}

std::string module_list_text(const std::vector<std::string>& names) {
  std::string list;
  for (size_t i = 0; i < names.size() && i < 6; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 6) list += ", ... (" + std::to_string(names.size()) + " in all)";
  return list;
}

}  // namespace zb::backends::fsdp_family
