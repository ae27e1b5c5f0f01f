// hf_llama.cpp — HF Llama names and config.json (see hf_llama.hpp). Names follow
// transformers/models/llama/modeling_llama.py (LlamaForCausalLM -> model: LlamaModel with
// embed_tokens, layers[i] = LlamaDecoderLayer(self_attn, mlp, input_layernorm,
// post_attention_layernorm), norm; lm_head).
#include "models/checkpoint/hf_llama.hpp"

#include "models/llama.hpp"
#include "runtime/errors.hpp"

namespace zb::models::checkpoint {

namespace {
using json = nlohmann::json;

// Spec order of models::unit_param_specs: root {embedding, final_norm, lm_head}; block
// {attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down}.
const char* const kRootNames[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
const char* const kBlockSuffixes[] = {
    "input_layernorm.weight",          "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",         "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",            "mlp.up_proj.weight",      "mlp.down_proj.weight",
};
constexpr int kRootCount = 3, kBlockCount = 9;
}  // namespace

std::string hf_param_name(int unit, int index) {
  if (unit == kRootUnit) {
    if (index < 0 || index >= kRootCount) throw UsageError("root weight index " + std::to_string(index) + " out of range");
    return kRootNames[index];
  }
  if (unit < 0 || index < 0 || index >= kBlockCount)
    throw UsageError("weight (" + std::to_string(unit) + ", " + std::to_string(index) + ") out of range");
  return "model.layers." + std::to_string(unit - 1) + "." + kBlockSuffixes[index];
}

std::vector<std::string> hf_unit_names(const ModelConfig& cfg, int unit) {
  std::vector<std::string> out;
  const int n = int(unit_specs(cfg, unit).size());
  for (int i = 0; i < n; ++i) out.push_back(hf_param_name(unit, i));
  return out;
}

std::optional<ParamRef> parse_hf_param_name(const ModelConfig& cfg, const std::string& name) {
  for (int i = 0; i < kRootCount; ++i)
    if (name == kRootNames[i]) return ParamRef{kRootUnit, i};
  const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const auto dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return std::nullopt;
  const std::string digits = name.substr(prefix.size(), dot - prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) return std::nullopt;
  const int layer = std::stoi(digits);
  if (layer >= cfg.layers) return std::nullopt;
  const std::string suffix = name.substr(dot + 1);
  for (int i = 0; i < kBlockCount; ++i)
    if (suffix == kBlockSuffixes[i]) return ParamRef{layer + 1, i};
  return std::nullopt;
}

json hf_llama_config(const ModelConfig& cfg, at::ScalarType dtype, int64_t max_position_embeddings) {
  const std::string dtype_str = dtype == at::kBFloat16 ? "bfloat16" : dtype == at::kHalf ? "float16" : "float32";
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", cfg.hidden},
          {"intermediate_size", cfg.ffn},
          {"num_hidden_layers", cfg.layers},
          {"num_attention_heads", cfg.heads},
          {"num_key_value_heads", cfg.kv_heads},
          {"head_dim", cfg.head_dim()},
          {"vocab_size", cfg.vocab},
          {"rms_norm_eps", cfg.norm_eps},
          {"rope_theta", cfg.rope_theta},
          {"max_position_embeddings", max_position_embeddings},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", false},
          {"initializer_range", 0.02},
          {"torch_dtype", dtype_str},  // transformers < 5
          {"dtype", dtype_str}};       // transformers >= 5
}

ModelConfig model_config_from_hf(const json& c) {
  auto need = [&](const char* key) -> const json& {
    if (!c.contains(key) || !c[key].is_number()) throw UsageError(std::string("config.json: ") + key + " is missing");
    return c[key];
  };
  ModelConfig cfg;
  cfg.preset = "hf";
  cfg.hidden = need("hidden_size").get<int64_t>();
  cfg.ffn = need("intermediate_size").get<int64_t>();
  cfg.layers = need("num_hidden_layers").get<int64_t>();
  cfg.heads = need("num_attention_heads").get<int64_t>();
  cfg.kv_heads = c.contains("num_key_value_heads") && c["num_key_value_heads"].is_number()
                     ? c["num_key_value_heads"].get<int64_t>()
                     : cfg.heads;
  cfg.vocab = need("vocab_size").get<int64_t>();
  if (c.contains("rms_norm_eps")) cfg.norm_eps = c["rms_norm_eps"].get<double>();
  if (c.contains("rope_theta")) cfg.rope_theta = c["rope_theta"].get<double>();
  if (c.value("tie_word_embeddings", false)) throw UsageError("config.json: tie_word_embeddings true is not supported");
  if (c.value("attention_bias", false) || c.value("mlp_bias", false))
    throw UsageError("config.json: attention_bias/mlp_bias are not supported");
  if (c.contains("hidden_act") && c["hidden_act"] != "silu")
    throw UsageError("config.json: hidden_act " + c["hidden_act"].dump() + " is not supported (silu)");
  if (c.contains("head_dim") && c["head_dim"].is_number() && c["head_dim"].get<int64_t>() != cfg.head_dim())
    throw UsageError("config.json: head_dim " + c["head_dim"].dump() + " != hidden_size / num_attention_heads");
  cfg.validate();
  return cfg;
}

void write_hf_llama(const std::string& dir, const ModelConfig& cfg, const std::vector<at::Tensor>& units,
                    at::ScalarType dtype, int64_t max_shard_bytes) {
  if (int64_t(units.size()) != unit_count(cfg))
    throw UsageError("write_hf_llama: " + std::to_string(units.size()) + " units given, model has " +
                     std::to_string(unit_count(cfg)));
  std::vector<NamedTensor> tensors;
  // HF order in the file: embeddings, layers, final norm, head (save_pretrained's state_dict order).
  auto add_unit = [&](int u, const std::vector<int>& indices) {
    const auto specs = unit_specs(cfg, u);
    int64_t total = 0;
    for (const auto& s : specs) total += s.numel();
    if (units[size_t(u)].numel() != total)
      throw UsageError("write_hf_llama: unit " + std::to_string(u) + " has " + std::to_string(units[size_t(u)].numel()) +
                       " elements, expected " + std::to_string(total));
    auto weights = unflatten_unit(cfg, u, units[size_t(u)].reshape({-1}));
    for (int i : indices) tensors.push_back({hf_param_name(u, i), weights[size_t(i)].to(dtype)});
  };
  add_unit(kRootUnit, {0});
  for (int u = 1; u <= cfg.layers; ++u) add_unit(u, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  add_unit(kRootUnit, {1, 2});
  write_checkpoint(dir, tensors, max_shard_bytes);
  write_file_atomic(dir + "/config.json", hf_llama_config(cfg, dtype).dump(2) + "\n");
}

std::vector<at::Tensor> read_hf_llama_unit(const SafetensorsCheckpoint& ckpt, const ModelConfig& cfg, int unit) {
  std::vector<at::Tensor> out;
  const auto specs = unit_specs(cfg, unit);
  for (int i = 0; i < int(specs.size()); ++i) {
    const auto name = hf_param_name(unit, i);
    if (!ckpt.contains(name)) throw UsageError("checkpoint: tensor '" + name + "' is missing");
    auto t = ckpt.tensor(name);
    if (t.sizes().vec() != specs[size_t(i)].shape)
      throw UsageError("checkpoint: tensor '" + name + "' has shape " + c10::str(t.sizes()) + ", the model expects " +
                       c10::str(at::IntArrayRef(specs[size_t(i)].shape)));
    out.push_back(t);
  }
  return out;
}

}  // namespace zb::models::checkpoint
