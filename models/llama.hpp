// llama.hpp — the Llama-2/Granite decoder as plain functions over weights it is handed.
// Owns: RMSNorm, RoPE, GQA attention (SDPA, causal), SwiGLU, the LM loss, per-block activation
// checkpointing, deterministic initialisation. Must not: own parameters or know how they are
// sharded — an engine implements UnitParamSource and decides where weights live.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "models/activation_checkpointing.hpp"
#include "models/attention.hpp"
#include "models/model_config.hpp"

namespace zb::models {

// The engine side of the forward pass (FSDP's pre/post-forward hooks, seen from the model):
// the model asks for a unit's weights right before it runs the unit and reports its output.
class UnitParamSource {
 public:
  virtual ~UnitParamSource() = default;
  // Weights of `unit` in unit_param_specs order, shaped as the specs say, ready for compute.
  virtual std::vector<at::Tensor> unit_weights(int unit) = 0;
  // Module granularity (DeepSpeed ZeRO-3 fetches per Linear/Embedding/Norm): when true the
  // model calls module_weight(unit, i) right before it uses weight i, in execution order,
  // instead of unit_weights(unit) once. Checkpointed blocks still take all weights at once.
  virtual bool per_module() const { return false; }
  virtual at::Tensor module_weight(int unit, int index) { return unit_weights(unit)[size_t(index)]; }
  // Called with a decoder block's input right before the block runs (its unit_weights call comes
  // after); may wrap it in an autograd function (FSDP2's pre-forward registers its post-backward
  // hook on the module's inputs) and must return the tensor the block takes as input.
  virtual at::Tensor before_unit_forward(int /*unit*/, at::Tensor input) { return input; }
  // Called with the unit's output once its forward is done; may register backward hooks on it
  // and must return the tensor the model continues with (the output itself or a view of it).
  virtual at::Tensor after_unit_forward(int unit, at::Tensor output) { return output; }
  // Per-module sources only: called with the output of the module that used weight `index` of
  // `unit` (DeepSpeed hooks every module's output for its pre-backward fetch); same contract
  // as after_unit_forward.
  virtual at::Tensor after_module_forward(int unit, int index, at::Tensor output) { return output; }
};

// cos/sin tables [T, head_dim] for rotate-half RoPE (HF Llama), in the compute dtype. With
// per-document attention (document_attention) cos/sin are [B, 1, T, head_dim], taken at the
// batch's position_ids, and mask [B, 1, T, T] (bool, true = attend) is block-diagonal causal;
// an undefined mask is one causal mask over the whole row. On the Varlen path (attention_path:
// CUDA, bf16/fp16) there is no mask: `segments` holds the documents' cumulative lengths instead.
struct RopeCache {
  at::Tensor cos, sin;
  at::Tensor mask;
  VarlenSegments segments;
};
RopeCache make_rope_cache(const ModelConfig& cfg, int64_t seq_len, at::ScalarType dtype, at::Device device);
// The cache of a batch with position_ids and document_ids [B, T] (models/data.hpp Batch): HF
// Llama's RoPE at position_ids, and a query attends to the keys of its own document at or before it
// (the mask, or on the Varlen path of `full`'s device and dtype the segments; attention_path).
RopeCache document_attention(const RopeCache& full, const at::Tensor& position_ids, const at::Tensor& document_ids);

struct ForwardOptions {
  ActivationCheckpointing activation_checkpointing;  // the blocks recomputed in backward
  // The loss is the sum over label tokens (targets other than -100), not their mean: the caller
  // divides by the step's label count (HF Trainer's num_items_in_batch).
  bool sum_loss = false;
};

// FLOPs this process has spent recomputing checkpointed blocks in backward: each recompute adds
// block_forward_flops (models/model_config.hpp) at its input's [B, T]; under selective-op only the
// ops it recomputes: 2*in*out per token of each unsaved linear, and SDPA's 4*B*nh*hd*T^2 where it
// is recomputed — on CPU, not where its CUDA op's output is kept (recompute_flops_per_micro_batch).
// The trainer takes it per step.
int64_t recomputed_flops();

// tokens: [B, T] int64 -> logits [B, T, V] in the weights' dtype. Every unit but the root has
// had its after_unit_forward; the root's comes with the loss (forward_loss).
at::Tensor forward_logits(const ModelConfig& cfg, UnitParamSource& params, const at::Tensor& tokens,
                          const RopeCache& rope, const ForwardOptions& opts = {});

// tokens, targets: [B, T] int64. Returns the mean next-token cross-entropy over the targets other
// than -100 (fp32 scalar; their sum with opts.sum_loss).
// Logits are upcast to fp32 for the loss, as HF's LlamaForCausalLM does.
at::Tensor forward_loss(const ModelConfig& cfg, UnitParamSource& params, const at::Tensor& tokens,
                        const at::Tensor& targets, const RopeCache& rope, const ForwardOptions& opts);

// One decoder block: x [B, T, H] -> [B, T, H]. `w(i)` returns weight i in unit_param_specs
// order (9 tensors); it is called once per weight, in the order the block uses them.
using WeightFn = std::function<at::Tensor(int index)>;
// `out(i, y)`, when given, is called with the output y of the module that used weight i and
// returns the tensor the block continues with.
using ModuleOutputFn = std::function<at::Tensor(int index, at::Tensor output)>;
// `linear(i, h, w)`, when given, computes the linear of weight i (default at::linear(h, w)):
// selective-op's checkpoint keeps or replays some of them (models/llama.cpp).
using LinearFn = std::function<at::Tensor(int index, const at::Tensor& input, const at::Tensor& weight)>;
// `attention(q, k, v)`, when given, computes the attention of q [B, nh, T, hd] and k/v [B, nkv, T, hd]
// after RoPE as [B, T, H] (default block_attention with the cache's mask or segments): selective-op
// keeps or replays SDPA's CUDA op (models/attention.hpp).
using AttentionFn = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)>;
at::Tensor block_forward(const ModelConfig& cfg, const WeightFn& w, const at::Tensor& x, const RopeCache& rope,
                         const ModuleOutputFn& out = nullptr, const LinearFn& linear = nullptr,
                         const AttentionFn& attention = nullptr);
at::Tensor block_forward(const ModelConfig& cfg, at::TensorList w, const at::Tensor& x, const RopeCache& rope);

// Deterministic fp32 initial weights of one unit, concatenated in spec order: [unit numel].
// Depends only on (cfg, unit, seed) — never on world size or rank — so every backend starts
// from bit-identical weights. Linears ~ N(0, 0.02) (HF initializer_range), norms = 1.
at::Tensor init_unit_flat(const ModelConfig& cfg, int unit, uint64_t seed);

// Views of a flat unit buffer as the unit's weights (spec order). flat: [>= unit numel].
std::vector<at::Tensor> unflatten_unit(const ModelConfig& cfg, int unit, const at::Tensor& flat);

}  // namespace zb::models
