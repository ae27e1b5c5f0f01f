// attention.hpp — the decoder's attention kernels and selective-op's kept attention.
// Owns: which attention path a batch takes (one causal mask, the block-diagonal document mask, or
// CUDA's varlen flash over cumulative document lengths), the cumulative lengths of a batch's
// documents, the explicit ATen attention ops selective-op calls so that it can keep their output,
// and the autograd Function whose backward calls the op's own backward from that output.
// Must not: know about blocks, weights or checkpointing modes (models/llama.cpp decides when).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace zb::models {

// How a block's attention runs (docs/data.md, "Batching"):
//   Causal  one causal mask over each row (no documents: SDPA with is_causal);
//   Masked  the additive block-diagonal causal mask (per-document attention; SDPA with the mask:
//           CPU flash with a mask, CUDA memory-efficient attention);
//   Varlen  per-document attention on CUDA in bf16/fp16: the rows flattened to [B*T, heads, dim]
//           and FlashAttention-2's varlen kernel (at::_flash_attention_forward) causal within each
//           run of equal document ids, from their cumulative lengths (varlen_segments). fp32 (the
//           flash kernels take 16-bit inputs only) and CPU (no varlen kernel) keep Masked.
enum class AttentionPath { Causal, Masked, Varlen };
AttentionPath attention_path(bool cuda, at::ScalarType dtype, bool per_document);
const char* attention_path_name(AttentionPath p);

// The varlen kernel's segments of a batch: each row split where its document id changes (padding,
// id -1, is one more segment, as it is one more block of the mask), rows never joined (a document
// cut at a row's end is a segment in each row). cum_seq [S+1] int32 (0, then each segment's end in
// the flattened B*T positions: cum_seq_q = cum_seq_k), max_len the longest segment. Computed on
// the CPU from document_ids [B, T] (any device); the caller moves cum_seq to its device.
struct VarlenSegments {
  at::Tensor cum_seq;
  int64_t max_len = 0;
};
VarlenSegments varlen_segments(const at::Tensor& document_ids);

// ---- selective-op's kept attention ----
// The op a block's forward calls explicitly under selective-op so that its output, logsumexp and
// RNG state are kept for backward instead of recomputed (torchtitan's save list has SDPA's CUDA ops:
// aten._scaled_dot_product_flash_attention / _efficient_attention / _cudnn_attention):
//   None        nothing kept: SDPA recomputed in the replay (CPU, as upstream, whose save list does
//               not hold _scaled_dot_product_flash_attention_for_cpu; on CUDA when SDPA's dispatcher
//               picks math, not in the list, or cuDNN, whose op pair is not implemented here);
//   Flash       at::_scaled_dot_product_flash_attention / _backward (CUDA, no mask; GQA native);
//   Efficient   at::_scaled_dot_product_efficient_attention / _backward (CUDA, the mask);
//   FlashVarlen at::_flash_attention_forward / _flash_attention_backward (the Varlen path);
//   FlashCpu    at::_scaled_dot_product_flash_attention_for_cpu / _backward: never chosen for a run
//               (upstream recomputes on CPU); the CPU tests of the kept-attention logic use it.
enum class KeptAttentionOp { None, Flash, Efficient, FlashVarlen, FlashCpu };
const char* kept_attention_op_name(KeptAttentionOp op);

// The op selective-op keeps for q [B, nh, T, hd], k/v [B, nkv, T, hd] with `mask` (additive, or
// undefined: causal) or varlen `segments` (cum_seq defined): on CUDA what SDPA's dispatcher picks
// (at::_fused_sdp_choice with SDPA's own arguments), so the kept forward is SDPA's forward;
// FlashVarlen for the Varlen path; None on CPU.
KeptAttentionOp op_sac_attention_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& mask, const VarlenSegments& segments);
// Tests only: on CPU, op_sac_attention_op names FlashCpu instead of None (upstream recomputes SDPA
// there), so selective-op's whole kept-attention path runs on CPU. Returns the previous setting.
bool set_op_sac_keeps_cpu_attention_for_tests(bool keep);

// What the op's backward needs besides q, k, v: its output and logsumexp, the RNG state (philox
// seed/offset, flash's rng_state), the mask as the op got it, the varlen lengths.
struct KeptAttention {
  KeptAttentionOp op = KeptAttentionOp::None;
  bool causal = true;
  int64_t kv_groups = 1;  // k, v repeated (repeat_interleave on heads) for an op without GQA
  at::Tensor out;         // [B, nh, T, hd] (FlashVarlen: [B*T, nh, hd])
  at::Tensor logsumexp, seed, offset, bias;
  VarlenSegments segments;
};

// The op's forward on q [B, nh, T, hd], k/v [B, nkv, T, hd] (FlashVarlen: [B*T, nh|nkv, hd]);
// no autograd (selective-op's forward runs under no-grad). `mask`: additive [B, 1, T, T] or
// undefined (causal); `segments`: FlashVarlen's.
KeptAttention keep_attention(KeptAttentionOp op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& mask, const VarlenSegments& segments);

// In the replay: returns kept.out, differentiable in q, k, v through the op's own backward with
// the kept output, logsumexp and RNG state (no forward recomputed). k, v are repeated for an op
// without GQA under autograd, so their gradients are summed back over each group.
at::Tensor kept_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const KeptAttention& kept);

// A block's attention as the run computes it, not kept: SDPA (Causal, Masked) or the varlen flash
// op (Varlen, differentiable through ATen's own derivative FlashAttentionBackward0).
// q [B, nh, T, hd], k/v [B, nkv, T, hd] -> [B, T, nh*hd].
at::Tensor block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                           const VarlenSegments& segments);

// The [B*T, heads, hd] layout the varlen kernels take, from [B, heads, T, hd].
at::Tensor to_varlen(const at::Tensor& x);
// An attention output [B, nh, T, hd] (or the varlen [B*T, nh, hd]) as the rows [B, T, nh*hd] wo
// takes, for queries q [B, nh, T, hd].
at::Tensor attention_rows(const at::Tensor& out, const at::Tensor& q);

}  // namespace zb::models
