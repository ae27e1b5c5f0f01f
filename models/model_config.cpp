// model_config.cpp — presets and closed-form counts for the Llama-2/Granite decoder.
#include "models/model_config.hpp"

#include <map>

#include "runtime/errors.hpp"

namespace zb::models {

namespace {
ModelConfig make(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t kv,
                 int64_t ffn, int64_t vocab) {
  ModelConfig c;
  c.preset = std::move(name);
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.kv_heads = kv;
  c.ffn = ffn;
  c.vocab = vocab;
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  // Dimensions from the models' HF config.json files (ibm-granite/granite-7b-base, meta-llama).
  static const std::map<std::string, ModelConfig> table = {
      {"granite-7b", make("granite-7b", 32, 4096, 32, 32, 11008, 32000)},
      {"llama2-7b", make("llama2-7b", 32, 4096, 32, 32, 11008, 32000)},
      {"llama2-13b", make("llama2-13b", 40, 5120, 40, 40, 13824, 32000)},
      {"llama2-70b", make("llama2-70b", 80, 8192, 64, 8, 28672, 32000)},
      // CPU presets: small ≈ 29M parameters, tiny ≈ 1.2M.
      {"small", make("small", 6, 512, 8, 4, 1536, 8192)},
      {"tiny", make("tiny", 2, 128, 4, 2, 352, 2048)},
  };
  return table;
}
}  // namespace

void ModelConfig::validate() const {
  auto positive = [](const char* what, int64_t v) {
    if (v <= 0) throw UsageError(std::string("--") + what + " must be positive, got " + std::to_string(v));
  };
  positive("layers", layers);
  positive("hidden", hidden);
  positive("heads", heads);
  positive("kv-heads", kv_heads);
  positive("ffn", ffn);
  positive("vocab", vocab);
  if (hidden % heads != 0)
    throw UsageError("--hidden " + std::to_string(hidden) + " is not divisible by --heads " + std::to_string(heads));
  if (heads % kv_heads != 0)
    throw UsageError("--heads " + std::to_string(heads) + " is not divisible by --kv-heads " + std::to_string(kv_heads));
  if (head_dim() % 2 != 0)
    throw UsageError("head dim " + std::to_string(head_dim()) + " must be even for RoPE");
}

ModelConfig preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string known;
    for (const auto& kv : presets()) known += (known.empty() ? "" : ", ") + kv.first;
    throw UsageError("unknown model preset '" + name + "' (known: " + known + ")");
  }
  return it->second;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& kv : presets()) out.push_back(kv.first);
  return out;
}

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t unit_count(const ModelConfig& cfg) { return cfg.layers + 1; }

std::vector<ParamSpec> unit_specs(const ModelConfig& cfg, int unit) {
  auto all = unit_param_specs(cfg);
  return all.at(size_t(unit));
}

std::vector<std::vector<ParamSpec>> unit_param_specs(const ModelConfig& cfg) {
  const int64_t H = cfg.hidden, V = cfg.vocab, F = cfg.ffn, KV = cfg.kv_dim();
  std::vector<std::vector<ParamSpec>> units;
  units.push_back({{"embedding", {V, H}, false}, {"final_norm", {H}, true}, {"lm_head", {V, H}, false}});
  for (int64_t l = 0; l < cfg.layers; ++l) {
    units.push_back({{"attn_norm", {H}, true},
                     {"wq", {H, H}, false},
                     {"wk", {KV, H}, false},
                     {"wv", {KV, H}, false},
                     {"wo", {H, H}, false},
                     {"mlp_norm", {H}, true},
                     {"w_gate", {F, H}, false},
                     {"w_up", {F, H}, false},
                     {"w_down", {H, F}, false}});
  }
  return units;
}

ParamCounts count_params(const ModelConfig& cfg) {
  ParamCounts c;
  auto units = unit_param_specs(cfg);
  for (const auto& p : units[kRootUnit]) c.root += p.numel();
  if (cfg.layers > 0)
    for (const auto& p : units[1]) c.per_block += p.numel();
  c.embedding = cfg.vocab * cfg.hidden;
  c.total = c.root + c.per_block * cfg.layers;
  c.non_embedding = c.total - c.embedding;
  return c;
}

int64_t recompute_flops_per_micro_batch(const ModelConfig& cfg, int64_t micro_batch, int64_t seq_len,
                                        const ActivationCheckpointing& activation_checkpointing, bool cuda) {
  if (activation_checkpointing.saves_ops())
    return cfg.layers * (2 * micro_batch * seq_len * op_sac_recomputed_linear_params(cfg) +
                         (activation_checkpointing.keeps_attention(cuda)
                              ? 0
                              : 4 * micro_batch * cfg.heads * cfg.head_dim() * seq_len * seq_len));
  return activation_checkpointing.checkpointed_blocks(cfg.layers) * block_forward_flops(cfg, micro_batch, seq_len);
}

int64_t op_sac_recomputed_linear_params(const ModelConfig& cfg) {
  const int64_t H = cfg.hidden, KV = cfg.kv_dim(), F = cfg.ffn;
  const int64_t linears[] = {H * H, H * KV, H * KV, H * H, H * F, H * F, F * H};  // forward order
  int64_t n = 0;
  for (int64_t i = 0; i < 7; ++i) n += ActivationCheckpointing::op_sac_saves_mm(i + 1) ? 0 : linears[i];
  return n;
}

int64_t block_forward_flops(const ModelConfig& cfg, int64_t micro_batch, int64_t seq_len) {
  const int64_t N = micro_batch * seq_len;
  return 2 * N * count_params(cfg).per_block + 4 * micro_batch * cfg.heads * cfg.head_dim() * seq_len * seq_len;
}

FlopsPerToken flops_per_token(const ModelConfig& cfg, int64_t seq_len, const ActivationCheckpointing& activation_checkpointing,
                              bool cuda) {
  return flops_per_real_token(cfg, double(seq_len), activation_checkpointing, cuda);
}

FlopsPerToken flops_per_real_token(const ModelConfig& cfg, double attention_span, const ActivationCheckpointing& activation_checkpointing,
                                   bool cuda) {
  const ParamCounts n = count_params(cfg);
  // Attention score/value matmuls: forward 2*2*L*H*Q*T per token, x3 with backward = 12*L*H*Q*T
  // (torchtitan components/metrics.py, PaLM appendix B; not discounted for causality). A token of a
  // document of l tokens attends over l (block-diagonal attention): T becomes sum(l^2) / tokens.
  const double attn = 12.0 * double(cfg.layers) * double(cfg.heads) * double(cfg.head_dim()) * attention_span;
  FlopsPerToken f;
  f.six_n = 6.0 * double(n.total);
  f.palm = 6.0 * double(n.non_embedding) + attn;
  // Recompute replays each checkpointed block's forward once more: 2 * N_block + its forward
  // attention (attn / 3L) per block; full: 2 * N_blocks + attn / 3.
  f.palm_recompute = f.palm;
  const int64_t k = activation_checkpointing.checkpointed_blocks(cfg.layers);
  if (activation_checkpointing.saves_ops()) {
    const double sdpa = activation_checkpointing.keeps_attention(cuda)
                            ? 0.0
                            : 4.0 * double(cfg.heads) * double(cfg.head_dim()) * attention_span;
    f.palm_recompute += double(cfg.layers) * (2.0 * double(op_sac_recomputed_linear_params(cfg)) + sdpa);
  } else if (k == cfg.layers && k > 0) {
    f.palm_recompute += 2.0 * double(n.per_block * cfg.layers) + attn / 3.0;
  } else if (k > 0) {
    f.palm_recompute += double(k) * (2.0 * double(n.per_block) +
                                     4.0 * double(cfg.heads) * double(cfg.head_dim()) * attention_span);
  }
  return f;
}

}  // namespace zb::models
