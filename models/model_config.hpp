// model_config.hpp — what a decoder *is*: dimensions, presets, exact parameter and FLOP counts.
// Owns: the Llama-2/Granite shape arithmetic. Must not: allocate tensors or know about sharding
// (so llama2-70b can be described on a laptop; backends/ does the per-rank math).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/activation_checkpointing.hpp"

namespace zb::models {

struct ModelConfig {
  std::string preset = "custom";
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // GQA: heads % kv_heads == 0
  int64_t ffn = 0;       // SwiGLU inner size
  int64_t vocab = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;

  int64_t head_dim() const { return hidden / heads; }
  int64_t kv_dim() const { return kv_heads * head_dim(); }
  void validate() const;  // throws UsageError naming the bad dimension
};

// Presets by name: granite-7b, llama2-7b, llama2-13b, llama2-70b, small, tiny.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// One named weight of the model: name and shape ([out, in] for linears, as in HF checkpoints).
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool is_norm = false;  // initialised to ones, no weight decay in some recipes
  int64_t numel() const;
};

// Units in execution order as FSDP's transformer auto-wrap sees them: unit 0 is the root
// (embedding, final norm, LM head), units 1..L are the decoder blocks.
// Root:  embedding [V,H], final_norm [H], lm_head [V,H]
// Block: attn_norm [H], wq [H,H], wk [KV,H], wv [KV,H], wo [H,H], mlp_norm [H],
//        w_gate [F,H], w_up [F,H], w_down [H,F]            (KV = kv_heads*head_dim)
std::vector<std::vector<ParamSpec>> unit_param_specs(const ModelConfig& cfg);
int64_t unit_count(const ModelConfig& cfg);
// One unit's specs, by value (safe to iterate directly).
std::vector<ParamSpec> unit_specs(const ModelConfig& cfg, int unit);
inline constexpr int kRootUnit = 0;

struct ParamCounts {
  int64_t total = 0;
  int64_t embedding = 0;      // input token embedding only (torchtitan's convention)
  int64_t non_embedding = 0;  // total - embedding
  int64_t per_block = 0;
  int64_t root = 0;           // embedding + final norm + lm head
};
ParamCounts count_params(const ModelConfig& cfg);

// FLOPs per token for one training step (forward + backward).
struct FlopsPerToken {
  double six_n = 0;        // 6 * N_total (the FSDP vs DeepSpeed blog's MFU convention)
  double palm = 0;         // 6 * N_non_embedding + 12 * L * H * Q * T (PaLM / torchtitan)
  double palm_recompute = 0;  // palm + the forward of every checkpointed block again (for HFU)
};
// One decoder block's forward FLOPs on a micro-batch [B, T], PaLM's convention: 2 per weight per
// token (norms included) + 4*B*nh*hd*T^2 for the attention scores and values (not discounted for
// causality). What recomputing a checkpointed block costs (models/llama.cpp counts it).
int64_t block_forward_flops(const ModelConfig& cfg, int64_t micro_batch, int64_t seq_len);
// selective-op: the weights (in*out) of the block's linears it recomputes, the even-numbered of the
// 7 in forward order (wq, wk, wv, wo, w_gate, w_up, w_down): wk, wo, w_up = H*KV + H*H + H*F.
int64_t op_sac_recomputed_linear_params(const ModelConfig& cfg);
// The FLOPs backward spends recomputing one micro-batch's checkpointed blocks: block_forward_flops
// per block; selective-op only 2*N*op_sac_recomputed_linear_params, + SDPA's 4*B*nh*hd*T^2 on CPU
// (its CPU op is recomputed; on CUDA, `cuda`, its output is kept: ActivationCheckpointing::
// keeps_attention); the saved linears, the norms' and the elementwise ops count nothing.
int64_t recompute_flops_per_micro_batch(const ModelConfig& cfg, int64_t micro_batch, int64_t seq_len,
                                        const ActivationCheckpointing& activation_checkpointing, bool cuda = false);
FlopsPerToken flops_per_token(const ModelConfig& cfg, int64_t seq_len, const ActivationCheckpointing& activation_checkpointing,
                              bool cuda = false);
// The same per real (non-padding) token of rows of documents: attention_span = the sum over the
// attention blocks of length^2 / the real tokens (seq_len under one causal mask a row; less when
// each document attends only to itself). flops_per_token(cfg, T, ac) is this with span T.
FlopsPerToken flops_per_real_token(const ModelConfig& cfg, double attention_span, const ActivationCheckpointing& activation_checkpointing,
                                   bool cuda = false);

}  // namespace zb::models
