// llama.cpp — forward pass, checkpointing and init of the Llama-2/Granite decoder.
#include "models/llama.hpp"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cmath>
#include <limits>

namespace zb::models {

namespace {

enum BlockIndex { kAttnNorm, kWq, kWk, kWv, kWo, kMlpNorm, kWGate, kWUp, kWDown, kBlockTensors };
enum RootIndex { kEmbedding, kFinalNorm, kLmHead };

// HF LlamaRMSNorm: normalise in fp32, cast back, then scale. x [..., H], w [H].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  auto xf = x.to(at::kFloat);
  auto normed = xf * at::rsqrt(xf.pow(2).mean({-1}, /*keepdim=*/true) + eps);
  return w * normed.to(x.scalar_type());
}

// x [B, nh, T, hd] -> rotate-half RoPE with cos/sin [T, hd] (or [B, 1, T, hd] at position_ids).
at::Tensor apply_rope(const at::Tensor& x, const RopeCache& rope) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = at::cat({-x2, x1}, -1);
  return x * rope.cos + rotated * rope.sin;
}

std::atomic<int64_t> g_recomputed_flops{0};

// What a checkpointed block keeps for its backward (both kinds below): the config, RoPE and the
// document mask, its input and its weights. Weights are kept as plain references (no version
// check): an engine may free and refill their storage between forward and backward, exactly what
// FSDP does with its flat buffer.
void keep_block(torch::autograd::AutogradContext* ctx, const at::Tensor& x, at::TensorList w, const ModelConfig* cfg,
                const RopeCache* rope) {
  ctx->saved_data["cfg"] = reinterpret_cast<int64_t>(cfg);
  ctx->saved_data["cos"] = rope->cos;
  ctx->saved_data["sin"] = rope->sin;
  if (rope->mask.defined()) ctx->saved_data["mask"] = rope->mask;
  if (rope->segments.cum_seq.defined()) {
    ctx->saved_data["cum_seq"] = rope->segments.cum_seq;
    ctx->saved_data["max_seq"] = rope->segments.max_len;
  }
  ctx->saved_data["x"] = x;
  ctx->saved_data["w"] = c10::List<at::Tensor>(std::vector<at::Tensor>(w.begin(), w.end()));
}

// The kept block, its input and weights detached and requiring grad for the replay.
struct KeptBlock {
  const ModelConfig* cfg;
  RopeCache rope;
  at::Tensor x;
  std::vector<at::Tensor> w;
};
KeptBlock kept_block(torch::autograd::AutogradContext* ctx) {
  KeptBlock b{reinterpret_cast<const ModelConfig*>(ctx->saved_data["cfg"].toInt()),
              {ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor(), {}, {}},
              ctx->saved_data["x"].toTensor().detach().requires_grad_(true),
              {}};
  if (auto m = ctx->saved_data.find(std::string("mask")); m != ctx->saved_data.end()) b.rope.mask = m->second.toTensor();
  if (auto c = ctx->saved_data.find(std::string("cum_seq")); c != ctx->saved_data.end())
    b.rope.segments = {c->second.toTensor(), ctx->saved_data["max_seq"].toInt()};
  for (const at::Tensor& t : ctx->saved_data["w"].toTensorList().vec()) b.w.push_back(t.detach().requires_grad_(true));
  return b;
}

// The replayed block's gradients for x and the weights (none for cfg and rope).
torch::autograd::variable_list replay_grads(const at::Tensor& y, const KeptBlock& b, const at::Tensor& grad_out) {
  std::vector<at::Tensor> inputs{b.x};
  inputs.insert(inputs.end(), b.w.begin(), b.w.end());
  auto grads = torch::autograd::grad({y}, inputs, {grad_out});
  grads.push_back(at::Tensor());  // cfg
  grads.push_back(at::Tensor());  // rope
  return grads;
}

// Recomputes a block in backward instead of keeping its activations (torch.utils.checkpoint,
// non-reentrant semantics seen from outside: inputs x and the 9 weights, output y).
struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, at::TensorList w,
                            const ModelConfig* cfg, const RopeCache* rope) {
    keep_block(ctx, x, w, cfg, rope);
    at::NoGradGuard no_grad;
    return block_forward(*cfg, w, x, *rope);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const KeptBlock b = kept_block(ctx);
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      y = block_forward(*b.cfg, b.w, b.x, b.rope);
    }
    g_recomputed_flops += block_forward_flops(*b.cfg, b.x.size(0), b.x.size(1));
    return replay_grads(y, b, grad_out[0]);
  }
};

// A linear whose output selective-op's checkpoint kept: returns the kept output and differentiates
// as aten.mm under at::linear's fold of [B, T, in] to [N, in] (mm_mat1_backward /
// mm_mat2_backward on these layouts): grad_in = g.mm(W), grad_W = g^T.mm(in), the same calls
// and so the same bits as at::linear's autograd.
struct KeptLinear : public torch::autograd::Function<KeptLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& kept) {
    ctx->save_for_backward({input, weight});
    return kept;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const int64_t in = weight.size(1), out = weight.size(0);
    const at::Tensor g = grad_out[0].reshape({-1, out});
    return {at::mm(g, weight).view(input.sizes()), at::mm(g.t(), input.reshape({-1, in})), at::Tensor()};
  }
};

// The kept attention through the block's autograd context (saved_data holds IValues).
void save_kept_attention(torch::autograd::AutogradContext* ctx, const KeptAttention& k) {
  ctx->saved_data["attn_op"] = int64_t(k.op);
  ctx->saved_data["attn_causal"] = k.causal;
  ctx->saved_data["attn_groups"] = k.kv_groups;
  ctx->saved_data["attn"] = c10::List<at::Tensor>({k.out, k.logsumexp, k.seed, k.offset, k.bias, k.segments.cum_seq});
  ctx->saved_data["attn_max"] = k.segments.max_len;
}
// Leaves the context: freed with the block's replayed graph. op None when nothing was kept.
KeptAttention take_kept_attention(torch::autograd::AutogradContext* ctx) {
  KeptAttention k;
  auto& d = ctx->saved_data;
  if (d.find(std::string("attn")) == d.end()) return k;
  const auto t = d["attn"].toTensorList().vec();
  k.op = KeptAttentionOp(d["attn_op"].toInt());
  k.causal = d["attn_causal"].toBool();
  k.kv_groups = d["attn_groups"].toInt();
  k.out = t[0];
  k.logsumexp = t[1];
  k.seed = t[2];
  k.offset = t[3];
  k.bias = t[4];
  k.segments = {t[5], d["attn_max"].toInt()};
  for (const char* key : {"attn", "attn_op", "attn_causal", "attn_groups", "attn_max"}) d.erase(std::string(key));
  return k;
}

// selective-op (torchtitan's _apply_op_sac): forward under no-grad keeping the block's input and
// the outputs of the odd-numbered linears (aten.mm 1, 3, 5, 7: wq, wv, w_gate, w_down), and on CUDA
// SDPA's op with what its backward needs (the save list's _scaled_dot_product_flash_attention /
// _efficient_attention; the varlen flash op of the Varlen path): op_sac_attention_op, keep_attention.
// Backward replays the block under autograd with those linears returning their kept outputs
// (KeptLinear), the attention its kept output (kept_attention: the op's own backward) and
// everything else recomputed: the even-numbered linears, the norms, RoPE, SDPA on CPU (its CPU op
// is not in the save list), SiLU and the products. Weights are kept as CheckpointedBlock keeps them.
struct SelectiveOpBlock : public torch::autograd::Function<SelectiveOpBlock> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, at::TensorList w,
                            const ModelConfig* cfg, const RopeCache* rope) {
    keep_block(ctx, x, w, cfg, rope);
    at::NoGradGuard no_grad;
    int64_t mm_count = 0;  // the policy's forward_mm_count, per block forward
    return block_forward(
        *cfg, [&](int i) { return w[size_t(i)]; }, x, *rope, nullptr,
        [&](int i, const at::Tensor& in, const at::Tensor& weight) {
          at::Tensor y = at::linear(in, weight);
          if (ActivationCheckpointing::op_sac_saves_mm(++mm_count)) ctx->saved_data["kept" + std::to_string(i)] = y;
          return y;
        },
        [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
          const auto op = op_sac_attention_op(q, k, v, rope->mask, rope->segments);
          if (op == KeptAttentionOp::None) return block_attention(q, k, v, rope->mask, rope->segments);
          const KeptAttention kept = keep_attention(op, q, k, v, rope->mask, rope->segments);
          save_kept_attention(ctx, kept);
          return attention_rows(kept.out, q);
        });
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const KeptBlock b = kept_block(ctx);
    const ModelConfig* cfg = b.cfg;
    const at::Tensor& x = b.x;
    const std::vector<at::Tensor>& w = b.w;
    // The kept outputs leave the context: freed with this block's replayed graph.
    std::vector<at::Tensor> kept(kBlockTensors);
    for (int i = 0; i < kBlockTensors; ++i)
      if (auto k = ctx->saved_data.find("kept" + std::to_string(i)); k != ctx->saved_data.end()) {
        kept[size_t(i)] = k->second.toTensor();
        ctx->saved_data.erase(k);
      }
    const KeptAttention kept_attn = take_kept_attention(ctx);
    int64_t flops = 0;
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      y = block_forward(
          *cfg, [&](int i) { return w[size_t(i)]; }, x, b.rope, nullptr,
          [&](int i, const at::Tensor& in, const at::Tensor& weight) {
            if (kept[size_t(i)].defined()) return KeptLinear::apply(in, weight, kept[size_t(i)]);
            flops += 2 * in.numel() * weight.size(0);  // 2 * N * in * out
            return at::linear(in, weight);
          },
          [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
            if (kept_attn.op != KeptAttentionOp::None) return kept_attention(q, k, v, kept_attn);
            // SDPA, recomputed: 4*B*nh*hd*T^2 (block_forward_flops' attention term).
            flops += 4 * x.size(0) * cfg->heads * cfg->head_dim() * x.size(1) * x.size(1);
            return block_attention(q, k, v, b.rope.mask, b.rope.segments);
          });
    }
    g_recomputed_flops += flops;
    return replay_grads(y, b, grad_out[0]);
  }
};

}  // namespace

int64_t recomputed_flops() { return g_recomputed_flops.load(); }

RopeCache make_rope_cache(const ModelConfig& cfg, int64_t seq_len, at::ScalarType dtype, at::Device device) {
  const int64_t hd = cfg.head_dim();
  auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  // inv_freq[i] = theta^(-2i/hd), i < hd/2; angles [T, hd/2] duplicated to [T, hd].
  auto inv_freq = at::pow(cfg.rope_theta, -at::arange(0, hd, 2, opts) / double(hd));
  auto angles = at::outer(at::arange(seq_len, opts), inv_freq);
  auto emb = at::cat({angles, angles}, -1);
  return {emb.cos().to(dtype), emb.sin().to(dtype), {}, {}};
}

// HF LlamaRotaryEmbedding computes cos/sin of inv_freq * position_ids in fp32; the table's row p
// holds the same products, so gathering rows is the same rotation. torchtitan's document masking
// (and HF's packed-sequence mask, masking_utils.py find_packed_sequence_indices) lets a query see
// the earlier keys of its own document only.
RopeCache document_attention(const RopeCache& full, const at::Tensor& position_ids, const at::Tensor& document_ids) {
  const int64_t B = position_ids.size(0), T = position_ids.size(1);
  const auto flat = position_ids.reshape({-1});
  auto at_positions = [&](const at::Tensor& table) {
    return table.index_select(0, flat).view({B, 1, T, table.size(-1)});
  };
  if (attention_path(full.cos.is_cuda(), full.cos.scalar_type(), /*per_document=*/true) == AttentionPath::Varlen) {
    VarlenSegments s = varlen_segments(document_ids);
    s.cum_seq = s.cum_seq.to(full.cos.device());
    return {at_positions(full.cos), at_positions(full.sin), {}, s};
  }
  const auto same_document = document_ids.unsqueeze(2).eq(document_ids.unsqueeze(1));  // [B, T, T]
  const auto causal = at::ones({T, T}, document_ids.options().dtype(at::kBool)).tril();
  return {at_positions(full.cos), at_positions(full.sin), at::logical_and(same_document, causal).unsqueeze(1), {}};
}

at::Tensor block_forward(const ModelConfig& cfg, at::TensorList w, const at::Tensor& x, const RopeCache& rope) {
  return block_forward(cfg, [&](int i) { return w[size_t(i)]; }, x, rope);
}

at::Tensor block_forward(const ModelConfig& cfg, const WeightFn& w, const at::Tensor& x, const RopeCache& rope,
                         const ModuleOutputFn& out_fn, const LinearFn& linear_fn, const AttentionFn& attention_fn) {
  // Each weight is requested in its own statement, in execution order: a per-module source
  // (ZeRO-3) releases the previous module's weight when the next is requested, and C++ leaves
  // the evaluation order of function arguments unspecified.
  auto out = [&](int i, at::Tensor y) { return out_fn ? out_fn(i, std::move(y)) : y; };
  auto linear = [&](int i, const at::Tensor& in) {
    const at::Tensor weight = w(i);
    return linear_fn ? linear_fn(i, in, weight) : at::linear(in, weight);
  };
  const int64_t B = x.size(0), T = x.size(1), hd = cfg.head_dim();
  // Attention: q [B, nh, T, hd], k/v [B, nkv, T, hd]; SDPA broadcasts kv heads (GQA).
  auto h = out(kAttnNorm, rms_norm(x, w(kAttnNorm), cfg.norm_eps));
  auto q = out(kWq, linear(kWq, h)).view({B, T, cfg.heads, hd}).transpose(1, 2);
  auto k = out(kWk, linear(kWk, h)).view({B, T, cfg.kv_heads, hd}).transpose(1, 2);
  auto v = out(kWv, linear(kWv, h)).view({B, T, cfg.kv_heads, hd}).transpose(1, 2);
  q = apply_rope(q, rope);
  k = apply_rope(k, rope);
  // Per-document attention: the block-diagonal causal mask (CPU: SDPA's masked kernels; CUDA fp32:
  // memory-efficient attention with the mask) or, on CUDA in bf16/fp16, the varlen flash kernel over
  // the documents' cumulative lengths (models/attention.hpp attention_path).
  auto attn = attention_fn ? attention_fn(q, k, v) : block_attention(q, k, v, rope.mask, rope.segments);
  auto attn_out = out(kWo, linear(kWo, attn));
  auto x1 = x + attn_out;
  // SwiGLU MLP: down(silu(gate(h)) * up(h)).
  auto h2 = out(kMlpNorm, rms_norm(x1, w(kMlpNorm), cfg.norm_eps));
  auto gate = at::silu(out(kWGate, linear(kWGate, h2)));
  auto up = out(kWUp, linear(kWUp, h2));
  auto mlp = out(kWDown, linear(kWDown, gate * up));
  return x1 + mlp;
}

at::Tensor forward_logits(const ModelConfig& cfg, UnitParamSource& params, const at::Tensor& tokens,
                          const RopeCache& batch_rope, const ForwardOptions& opts) {
  // SDPA converts a boolean mask to the query's dtype and its CPU flash kernel saves that copy for
  // backward, one per layer; an additive mask (0 / -inf) in the compute dtype, made once here, is
  // saved by reference: one [B, 1, T, T] for all layers, the same attention.
  RopeCache rope = batch_rope;
  if (rope.mask.defined() && rope.mask.scalar_type() == at::kBool)
    rope.mask = at::zeros(rope.mask.sizes(), rope.cos.options())
                    .masked_fill_(rope.mask.logical_not(), -std::numeric_limits<double>::infinity());
  const bool per_module = params.per_module();
  std::vector<at::Tensor> root;
  if (!per_module) root = params.unit_weights(kRootUnit);
  auto root_weight = [&](int i) { return per_module ? params.module_weight(kRootUnit, i) : root[size_t(i)]; };
  auto root_out = [&](int i, at::Tensor y) { return per_module ? params.after_module_forward(kRootUnit, i, y) : y; };
  auto x = root_out(kEmbedding, at::embedding(root_weight(kEmbedding), tokens));  // [B, T, H]
  for (int unit = 1; unit <= cfg.layers; ++unit) {
    x = params.before_unit_forward(unit, x);
    if (opts.activation_checkpointing.checkpoints_block(unit) && at::GradMode::is_enabled()) {
      auto w = params.unit_weights(unit);
      x = opts.activation_checkpointing.saves_ops() ? SelectiveOpBlock::apply(x, at::TensorList(w), &cfg, &rope)
                                                    : CheckpointedBlock::apply(x, at::TensorList(w), &cfg, &rope);
    } else if (per_module) {
      x = block_forward(
          cfg, [&](int i) { return params.module_weight(unit, i); }, x, rope,
          [&](int i, at::Tensor y) { return params.after_module_forward(unit, i, std::move(y)); });
    } else {
      x = block_forward(cfg, at::TensorList(params.unit_weights(unit)), x, rope);
    }
    x = params.after_unit_forward(unit, x);
  }
  auto normed = root_out(kFinalNorm, rms_norm(x, root_weight(kFinalNorm), cfg.norm_eps));
  return root_out(kLmHead, at::linear(normed, root_weight(kLmHead)));  // [B, T, V]
}

at::Tensor forward_loss(const ModelConfig& cfg, UnitParamSource& params, const at::Tensor& tokens,
                        const at::Tensor& targets, const RopeCache& rope, const ForwardOptions& opts) {
  auto logits = forward_logits(cfg, params, tokens, rope, opts);
  // ignore_index -100 (HF ForCausalLMLoss): padding and each document's last token carry no label.
  auto loss = at::cross_entropy_loss(logits.reshape({-1, cfg.vocab}).to(at::kFloat), targets.reshape({-1}),
                                     /*weight=*/{}, opts.sum_loss ? at::Reduction::Sum : at::Reduction::Mean,
                                     /*ignore_index=*/-100);
  return params.after_unit_forward(kRootUnit, loss);
}

at::Tensor init_unit_flat(const ModelConfig& cfg, int unit, uint64_t seed) {
  const auto specs = unit_specs(cfg, unit);
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].is_norm) {
      parts.push_back(at::ones({specs[i].numel()}, at::kFloat));
      continue;
    }
    // A generator per weight, seeded from (seed, unit, index): layout- and world-independent.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1000003ULL + uint64_t(unit) * 101ULL + i);
    parts.push_back(at::normal(0.0, 0.02, {specs[i].numel()}, gen, at::TensorOptions().dtype(at::kFloat)));
  }
  return at::cat(parts);
}

// One split into all the unit's parameters, then a view each — FlatParamHandle.
// _get_unflat_views_unaligned (torch/distributed/fsdp/_flat_param.py): `torch.split(tensor,
// flat_param._numels)` + `.view(shape)`. Under autograd the split's backward is one cat of the
// views' gradients into the flat gradient [numel]; a narrow per parameter would instead build a
// zero-filled flat-size gradient per parameter and add them all up.
std::vector<at::Tensor> unflatten_unit(const ModelConfig& cfg, int unit, const at::Tensor& flat) {
  const auto specs = unit_specs(cfg, unit);
  std::vector<int64_t> numels;
  int64_t total = 0;
  for (const auto& spec : specs) {
    numels.push_back(spec.numel());
    total += spec.numel();
  }
  const at::Tensor whole = flat.numel() == total ? flat : flat.narrow(0, 0, total);
  std::vector<at::Tensor> out;
  auto parts = at::split_with_sizes(whole, numels, 0);
  for (size_t i = 0; i < specs.size(); ++i) out.push_back(parts[i].view(specs[i].shape));
  return out;
}

}  // namespace zb::models
