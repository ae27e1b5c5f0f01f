// hf_llama.hpp — zerobench's decoder weights as a Hugging Face Llama checkpoint: tensor names
// of transformers' LlamaForCausalLM (`model.embed_tokens.weight`, `model.layers.{i}.self_attn.
// q_proj.weight`, ..., `lm_head.weight`) for each (unit, index) of models::unit_param_specs, the
// LlamaConfig `config.json`, and whole-model write/read on top of safetensors.hpp.
// Owns: the name mapping and the config fields. Must not: know how an engine shards weights.
#pragma once
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "models/checkpoint/safetensors.hpp"
#include "models/model_config.hpp"

namespace zb::models::checkpoint {

// HF name of weight `index` (unit_param_specs order) of `unit` (0 = root, 1..L = blocks).
std::string hf_param_name(int unit, int index);
// Every name of a unit, in spec order.
std::vector<std::string> hf_unit_names(const ModelConfig& cfg, int unit);

struct ParamRef {
  int unit = 0, index = 0;
};
// The inverse of hf_param_name; nullopt for names that are not this model's weights (e.g.
// rotary inv_freq buffers some exports carry) or a layer beyond cfg.layers.
std::optional<ParamRef> parse_hf_param_name(const ModelConfig& cfg, const std::string& name);

// transformers' LlamaConfig for `cfg` (architectures, model_type "llama", sizes, rms_norm_eps,
// rope_theta, head_dim, untied embeddings, silu, no biases) with `dtype` as the weights' dtype.
nlohmann::json hf_llama_config(const ModelConfig& cfg, at::ScalarType dtype, int64_t max_position_embeddings = 4096);
// The model shape a LlamaConfig describes (preset "hf"); throws UsageError naming a missing
// field or one zerobench's decoder cannot honour (tied embeddings, biases, a non-silu act).
ModelConfig model_config_from_hf(const nlohmann::json& config);

// Writes `dir`/config.json and the weights: `units[u]` is unit u's flat fp32 (or any dtype)
// weights in spec order [unit numel], stored as `dtype`. Sharded when over max_shard_bytes.
void write_hf_llama(const std::string& dir, const ModelConfig& cfg, const std::vector<at::Tensor>& units,
                    at::ScalarType dtype, int64_t max_shard_bytes = 0);

// One unit's weights from a checkpoint, in spec order, as views of the mapped file (shapes
// checked against cfg; throws UsageError naming a missing or mis-shaped tensor).
std::vector<at::Tensor> read_hf_llama_unit(const SafetensorsCheckpoint& ckpt, const ModelConfig& cfg, int unit);

}  // namespace zb::models::checkpoint
