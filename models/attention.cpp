// attention.cpp — see attention.hpp. The explicit ops and their backward calls follow ATen's own
// SDPA composite (aten/src/ATen/native/transformers/attention.cpp, scaled_dot_product_attention)
// and derivatives.yaml's formulas for each op, so a kept op's forward and backward are the calls
// autograd through SDPA makes (signatures: torch/include/ATen/ops/<op>.h, torch 2.11).
#include "models/attention.hpp"

#include <ATen/SDPBackend.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

namespace zb::models {

AttentionPath attention_path(bool cuda, at::ScalarType dtype, bool per_document) {
  if (!per_document) return AttentionPath::Causal;
  if (cuda && (dtype == at::kBFloat16 || dtype == at::kHalf)) return AttentionPath::Varlen;
  return AttentionPath::Masked;
}

const char* attention_path_name(AttentionPath p) {
  switch (p) {
    case AttentionPath::Causal: return "causal";
    case AttentionPath::Masked: return "masked";
    case AttentionPath::Varlen: return "varlen";
  }
  return "causal";
}

VarlenSegments varlen_segments(const at::Tensor& document_ids) {
  const auto ids = document_ids.to(at::kCPU, at::kLong).contiguous();
  const int64_t B = ids.size(0), T = ids.size(1);
  if (B * T > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("varlen attention: " + std::to_string(B * T) + " positions exceed int32 offsets");
  const int64_t* p = ids.data_ptr<int64_t>();
  std::vector<int32_t> cum{0};
  int64_t max_len = 0, start = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = b * T + t;
      const bool ends = t == T - 1 || p[i + 1] != p[i];
      if (!ends) continue;
      cum.push_back(int32_t(i + 1));
      max_len = std::max(max_len, i + 1 - start);
      start = i + 1;
    }
  auto out = at::empty({int64_t(cum.size())}, at::TensorOptions().dtype(at::kInt));
  std::copy(cum.begin(), cum.end(), out.data_ptr<int32_t>());
  return {out, max_len};
}

at::Tensor to_varlen(const at::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
}

at::Tensor attention_rows(const at::Tensor& out, const at::Tensor& q) {
  const int64_t B = q.size(0), T = q.size(2), H = q.size(1) * q.size(3);
  return out.dim() == 3 ? out.reshape({B, T, H}) : out.transpose(1, 2).reshape({B, T, H});
}

namespace {

// SDPA's mask preparation for the memory-efficient kernel (attention.cpp preprocess_mask): the
// bias's last dimension padded to a multiple of 16 (padding, then sliced back) when it is not, and
// broadcast to [B, nh, T, S].
at::Tensor efficient_bias(const at::Tensor& mask, const at::Tensor& q, const at::Tensor& k) {
  constexpr int64_t kAlignment = 16;
  at::Tensor bias = mask;
  const int64_t last = bias.size(-1);
  bool aligned = bias.stride(-1) == 1;
  for (int64_t i = 0; i + 1 < bias.dim(); ++i) aligned = aligned && bias.stride(i) % kAlignment == 0;
  if (!aligned) bias = at::pad(bias, {0, kAlignment - last % kAlignment}).slice(-1, 0, last);
  return bias.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

// k, v repeated over the query heads (SDPA's math path, pre_process_group_query_attention_input:
// repeat_interleave on the head dimension) for an op that takes equal head counts.
at::Tensor repeat_kv(const at::Tensor& x, int64_t groups) { return groups > 1 ? x.repeat_interleave(groups, 1) : x; }

bool takes_grouped_kv(KeptAttentionOp op) { return op == KeptAttentionOp::Flash || op == KeptAttentionOp::FlashVarlen; }

std::optional<at::Tensor> opt(const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; }

// The kept op's state through an autograd context (saved_data holds IValues).
void save_state(torch::autograd::AutogradContext* ctx, const KeptAttention& k) {
  ctx->saved_data["op"] = int64_t(k.op);
  ctx->saved_data["causal"] = k.causal;
  ctx->saved_data["out"] = k.out;
  ctx->saved_data["lse"] = k.logsumexp;
  ctx->saved_data["seed"] = k.seed;
  ctx->saved_data["offset"] = k.offset;
  ctx->saved_data["bias"] = k.bias;
  ctx->saved_data["cum"] = k.segments.cum_seq;
  ctx->saved_data["max"] = k.segments.max_len;
}

// Returns kept.out; its backward is the op's backward with the kept output and logsumexp.
struct KeptAttentionFunction : public torch::autograd::Function<KeptAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const KeptAttention* kept) {
    ctx->save_for_backward({q, k, v});
    save_state(ctx, *kept);
    // A new tensor on the kept storage: the context keeps `out` itself, the output's grad_fn is
    // this node, and no reference cycle joins them.
    return kept->out.detach();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    auto& d = ctx->saved_data;
    const auto op = KeptAttentionOp(d["op"].toInt());
    const bool causal = d["causal"].toBool();
    const at::Tensor out = d["out"].toTensor(), lse = d["lse"].toTensor(), seed = d["seed"].toTensor(),
                     offset = d["offset"].toTensor(), bias = d["bias"].toTensor(), cum = d["cum"].toTensor();
    const int64_t max_len = d["max"].toInt();
    const at::Tensor& g = grad_out[0];
    std::tuple<at::Tensor, at::Tensor, at::Tensor> dqkv;
    switch (op) {
      case KeptAttentionOp::Flash:
        // derivatives.yaml: _scaled_dot_product_flash_attention_backward(grad, query, key, value, output,
        // logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale)
        dqkv = at::_scaled_dot_product_flash_attention_backward(g, q, k, v, out, lse, cum, cum, max_len, max_len, 0.0,
                                                                causal, seed, offset, 1.0 / std::sqrt(double(q.size(-1))));
        break;
      case KeptAttentionOp::Efficient: {
        // derivatives.yaml: _scaled_dot_product_efficient_attention_backward(grad, query, key, value, attn_bias,
        // output, log_sumexp, philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal, scale)
        auto r = at::_scaled_dot_product_efficient_attention_backward(g, q, k, v, bias, out, lse, seed, offset, 0.0,
                                                                      {true, true, true, false}, causal, std::nullopt);
        dqkv = {std::get<0>(r), std::get<1>(r), std::get<2>(r)};
        break;
      }
      case KeptAttentionOp::FlashVarlen:
        // derivatives.yaml: _flash_attention_backward(grad, query, key, value, output, softmax_logsumexp,
        // cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, rng_state, unused, scale, ...)
        dqkv = at::_flash_attention_backward(g, q, k, v, out, lse, cum, cum, max_len, max_len, 0.0, true, seed, offset,
                                             std::nullopt);
        break;
      case KeptAttentionOp::FlashCpu:
        // derivatives.yaml: _scaled_dot_product_flash_attention_for_cpu_backward(grad, query, key, value,
        // output, logsumexp, dropout_p, is_causal, attn_mask, scale)
        dqkv = at::_scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, out, lse, 0.0, causal, opt(bias),
                                                                        std::nullopt);
        break;
      case KeptAttentionOp::None: throw std::logic_error("kept attention: no op kept");
    }
    return {std::get<0>(dqkv), std::get<1>(dqkv), std::get<2>(dqkv), at::Tensor()};
  }
};

}  // namespace

const char* kept_attention_op_name(KeptAttentionOp op) {
  switch (op) {
    case KeptAttentionOp::None: return "none";
    case KeptAttentionOp::Flash: return "flash";
    case KeptAttentionOp::Efficient: return "efficient";
    case KeptAttentionOp::FlashVarlen: return "flash-varlen";
    case KeptAttentionOp::FlashCpu: return "flash-cpu";
  }
  return "none";
}

namespace {
std::atomic<bool> g_keep_cpu_attention{false};
}  // namespace

bool set_op_sac_keeps_cpu_attention_for_tests(bool keep) { return g_keep_cpu_attention.exchange(keep); }

KeptAttentionOp op_sac_attention_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& mask, const VarlenSegments& segments) {
  if (segments.cum_seq.defined()) return KeptAttentionOp::FlashVarlen;
  if (!q.is_cuda()) return g_keep_cpu_attention ? KeptAttentionOp::FlashCpu : KeptAttentionOp::None;
  const int64_t choice = at::_fused_sdp_choice(q, k, v, opt(mask), 0.0, /*is_causal=*/!mask.defined(), std::nullopt,
                                               /*enable_gqa=*/k.size(1) != q.size(1));
  // SDPA pads a head dim that is not a multiple of 8 for flash (not replicated here: recomputed).
  if (choice == int64_t(at::SDPBackend::flash_attention))
    return q.size(-1) % 8 == 0 ? KeptAttentionOp::Flash : KeptAttentionOp::None;
  if (choice == int64_t(at::SDPBackend::efficient_attention)) return KeptAttentionOp::Efficient;
  return KeptAttentionOp::None;
}

KeptAttention keep_attention(KeptAttentionOp op, const at::Tensor& q, const at::Tensor& k_in, const at::Tensor& v_in,
                             const at::Tensor& mask, const VarlenSegments& segments) {
  KeptAttention kept;
  kept.op = op;
  kept.causal = !mask.defined();
  kept.kv_groups = takes_grouped_kv(op) ? 1 : q.size(1) / k_in.size(1);
  const at::Tensor k = repeat_kv(k_in, kept.kv_groups), v = repeat_kv(v_in, kept.kv_groups);
  switch (op) {
    case KeptAttentionOp::Flash: {
      // SDPA's flash case: the op with scale = 1/sqrt(hd) (sdp::calculate_scale), no dropout.
      auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, kept.causal, /*return_debug_mask=*/false,
                                                       1.0 / std::sqrt(double(q.size(-1))));
      kept.out = std::get<0>(r);
      kept.logsumexp = std::get<1>(r);
      kept.segments = {std::get<2>(r), std::get<4>(r).guard_int(__FILE__, __LINE__)};  // cum_seq_q (undefined), max_q
      kept.seed = std::get<6>(r);    // rng_state: the backward's philox_seed
      kept.offset = std::get<7>(r);  // unused: the backward's philox_offset
      break;
    }
    case KeptAttentionOp::Efficient: {
      kept.bias = mask.defined() ? efficient_bias(mask, q, k) : at::Tensor();
      auto r = at::_scaled_dot_product_efficient_attention(q, k, v, opt(kept.bias), /*compute_log_sumexp=*/true, 0.0,
                                                           kept.causal, std::nullopt);
      kept.out = std::get<0>(r);
      kept.logsumexp = std::get<1>(r);
      kept.seed = std::get<2>(r);
      kept.offset = std::get<3>(r);
      break;
    }
    case KeptAttentionOp::FlashVarlen: {
      kept.causal = true;
      kept.segments = segments;
      auto r = at::_flash_attention_forward(to_varlen(q), to_varlen(k), to_varlen(v), segments.cum_seq, segments.cum_seq,
                                            segments.max_len, segments.max_len, 0.0, /*is_causal=*/true,
                                            /*return_debug_mask=*/false, std::nullopt);
      kept.out = std::get<0>(r);
      kept.logsumexp = std::get<1>(r);
      kept.seed = std::get<2>(r);    // rng_state
      kept.offset = std::get<3>(r);  // unused
      break;
    }
    case KeptAttentionOp::FlashCpu: {
      kept.bias = mask;
      auto r = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, kept.causal, opt(mask), std::nullopt);
      kept.out = std::get<0>(r);
      kept.logsumexp = std::get<1>(r);
      break;
    }
    case KeptAttentionOp::None: throw std::logic_error("keep_attention: no op to keep");
  }
  return kept;
}

at::Tensor kept_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const KeptAttention& kept) {
  const at::Tensor kk = repeat_kv(k, kept.kv_groups), vv = repeat_kv(v, kept.kv_groups);
  at::Tensor out;
  if (kept.op == KeptAttentionOp::FlashVarlen)
    out = KeptAttentionFunction::apply(to_varlen(q), to_varlen(kk), to_varlen(vv), &kept);
  else
    out = KeptAttentionFunction::apply(q, kk, vv, &kept);
  return attention_rows(out, q);
}

at::Tensor block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                           const VarlenSegments& segments) {
  if (segments.cum_seq.defined()) {
    // ATen's varlen flash (as torch.nn.attention.varlen's flash branch calls it); autograd has its
    // derivative (FlashAttentionBackward0 -> _flash_attention_backward). GQA is native to it.
    auto r = at::_flash_attention_forward(to_varlen(q), to_varlen(k), to_varlen(v), segments.cum_seq, segments.cum_seq,
                                          segments.max_len, segments.max_len, 0.0, /*is_causal=*/true,
                                          /*return_debug_mask=*/false, std::nullopt);
    return attention_rows(std::get<0>(r), q);
  }
  const bool masked = mask.defined();
  auto attn = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/opt(mask), /*dropout_p=*/0.0,
                                               /*is_causal=*/!masked, /*scale=*/std::nullopt,
                                               /*enable_gqa=*/k.size(1) != q.size(1));
  return attention_rows(attn, q);
}

}  // namespace zb::models
