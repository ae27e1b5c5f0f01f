// zero3_granularity.cpp — see zero3_granularity.hpp.
#include "backends/zero3/zero3_granularity.hpp"

#include <limits>
#include <vector>

#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();  // sys.maxsize
constexpr double kMaxLeafSize = 1e9;                            // Z3_MAX_LEAF_SIZE

struct Sub {  // _get_granularity_recursively's return: (num_layers, num_params)
  int64_t layers = 0, params = 0;
};
}  // namespace

ModuleGranularity min_module_granularity(const models::ModelConfig& cfg) {
  ModuleGranularity best{"", kMax};
  // A non-leaf, non-container module: layers = its children's + 1; params = its own (none here)
  // + its children's; its granularity params // layers (kMax above 1e9 parameters).
  auto module = [&](const char* name, const std::vector<Sub>& children) {
    Sub s;
    for (const auto& c : children) s.layers += c.layers, s.params += c.params;
    s.layers += 1;
    const int64_t g = double(s.params) <= kMaxLeafSize ? s.params / s.layers : kMax;
    if (best.granularity > g) best = {name, g};  // `>`: the first module reaching the minimum keeps it
    return s;
  };
  auto leaf = [](int64_t numel) { return Sub{1, numel}; };  // nn.Linear / nn.Embedding / RMSNorm
  const int64_t H = cfg.hidden, KV = cfg.kv_dim(), F = cfg.ffn, V = cfg.vocab;
  // Recursion order as module.children(): model first (embed_tokens, layers..., norm), then lm_head.
  const Sub embed = leaf(V * H);
  Sub layers;  // the ModuleList: a container, the sum of its children, no granularity of its own
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const Sub attn = module("LlamaAttention", {leaf(H * H), leaf(KV * H), leaf(KV * H), leaf(H * H)});
    const Sub mlp = module("LlamaMLP", {leaf(F * H), leaf(F * H), leaf(H * F)});
    const Sub block = module("LlamaDecoderLayer", {attn, mlp, leaf(H), leaf(H)});
    layers.layers += block.layers, layers.params += block.params;
  }
  const Sub model = module("LlamaModel", {embed, layers, leaf(H), Sub{}});  // rotary_emb: (0, 0)
  module("LlamaForCausalLM", {model, leaf(V * H)});
  return best;
}

nlohmann::json check_module_granularity(int64_t threshold, const models::ModelConfig& cfg) {
  if (threshold <= 0) return nullptr;
  const auto m = min_module_granularity(cfg);
  if (m.granularity <= threshold)
    throw UsageError("zero_optimization.stage3_module_granularity_threshold " + std::to_string(threshold) +
                     ": DeepSpeed would make every module of granularity <= " + std::to_string(threshold) + " (" +
                     m.module + ": " + std::to_string(m.granularity) +
                     ") a z3 leaf module, fetched as one unit; that is not implemented in zerobench");
  return {{"threshold", threshold},
          {"min_granularity", m.granularity},
          {"min_granularity_module", m.module},
          {"effect", "none: no module is that fine (parameter_offload.py _set_z3_leaf_modules_by_threshold only warns)"}};
}

}  // namespace zb::backends::zero3
