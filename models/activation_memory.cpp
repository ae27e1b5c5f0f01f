// activation_memory.cpp — see activation_memory.hpp. Symbols: B micro-batch, T sequence, N = B*T,
// H hidden, KV = kv_heads*head_dim, F ffn, V vocab, nh heads, L layers, c compute-dtype bytes.
#include "models/activation_memory.hpp"

#include <algorithm>

namespace zb::models {

namespace {
// The loss head's saved tensors: rms_norm saves its fp32 input (the upcast copy in bf16, the
// input itself in fp32), the normalised tensor and its output (the LM head's input) in c, the
// rsqrt [N,1] in fp32; log_softmax saves its fp32 output [N,V] (cross_entropy upcasts logits).
int64_t head_saved(const ModelConfig& m, int64_t N, int c) {
  return 4 * N * m.hidden + 2 * int64_t(c) * N * m.hidden + 4 * N + 4 * N * m.vocab;
}
}  // namespace

int64_t block_saved_bytes(const ModelConfig& m, int64_t B, int64_t T, int c) {
  const int64_t N = B * T, H = m.hidden, KV = m.kv_dim(), F = m.ffn;
  // Per block (block_forward): two RMSNorms each keep an fp32 input (8NH) plus the normalised
  // tensor and the output the next linears save (4cNH together); rotated q and the SDPA output
  // (2cNH); rotated k and v (2cN*KV); SwiGLU keeps gate, silu(gate), up and their product (4cNF);
  // two rsqrt [N,1] fp32 (8N); SDPA's logsumexp [B,nh,T] fp32 (flash attention, CPU and CUDA).
  return 8 * N * H + 6 * int64_t(c) * N * H + 2 * int64_t(c) * N * KV + 4 * int64_t(c) * N * F + 8 * N +
         4 * B * m.heads * T;
}

namespace {
// SDPA's output and its fp32 logsumexp [B, nh, T] (the efficient kernel rounds T up to a multiple
// of 32 for its logsumexp: the same where T is one).
int64_t kept_attention_bytes(const ModelConfig& m, int64_t B, int64_t T, int c) {
  return int64_t(c) * B * T * m.hidden + 4 * B * m.heads * T;
}
}  // namespace

int64_t op_sac_kept_bytes(const ModelConfig& m, int64_t B, int64_t T, int c, bool cuda) {
  return int64_t(c) * B * T * (3 * m.hidden + m.kv_dim() + m.ffn) + (cuda ? kept_attention_bytes(m, B, T, c) : 0);
}

int64_t op_sac_replayed_bytes(const ModelConfig& m, int64_t B, int64_t T, int c, bool cuda) {
  return block_saved_bytes(m, B, T, c) - int64_t(c) * B * T * (m.kv_dim() + m.ffn) -
         (cuda ? kept_attention_bytes(m, B, T, c) : 0);
}

ActivationMemory activation_memory(const ModelConfig& m, int64_t B, int64_t T, int c, const ActivationCheckpointing& ac,
                                   bool cuda) {
  ActivationMemory a;
  const int64_t N = B * T, H = m.hidden, F = m.ffn, V = m.vocab, L = m.layers;
  const int64_t block = block_saved_bytes(m, B, T, c);
  const int64_t k = ac.checkpointed_blocks(L);
  const std::string per_block = "(8NH + 6cNH + 2cN*KV + 4cNF + 8N + 4*B*nh*T)";
  const bool kept_sdpa = ac.keeps_attention(cuda);
  if (ac.saves_ops() && L > 0) {
    a.blocks = {"checkpointed block inputs and saved ops", L * op_sac_kept_bytes(m, B, T, c, cuda),
                kept_sdpa ? "L*(c*N*(4H + KV + F) + 4*B*nh*T) (each block keeps its input, the outputs of wq, wv, "
                            "w_gate, w_down: selective-op's odd-numbered mms, and SDPA's CUDA output and logsumexp)"
                          : "L*c*N*(3H + KV + F) (each block keeps its input and the outputs of wq, wv, w_gate, "
                            "w_down: selective-op's odd-numbered mms)"};
  } else if (k == L && L > 0) {
    a.blocks = {"checkpointed block inputs", L * c * N * H, "L*c*N*H (each checkpointed block keeps its input)"};
  } else if (k == 0) {
    a.blocks = {"block activations", L * block, "L*" + per_block + " (what autograd saves per block)"};
  } else {  // selective-layer:N: blocks N, 2N, ... keep their input, the others their activations
    a.blocks = {"block activations and checkpointed inputs", k * c * N * H + (L - k) * block,
                "k*c*N*H + (L-k)*" + per_block + " (k = " + std::to_string(k) + " of L blocks checkpointed, " +
                    ac.name() + ")"};
  }
  a.head_saved = {"loss head", head_saved(m, N, c), "4NH + 2cNH + 4N + 4NV (final RMSNorm, fp32 log-softmax output)"};
  a.head_backward = {"loss-head backward", 8 * N * V, "8NV (fp32 gradient in and out of log_softmax)"};
  // A block's backward: the gradient of its output (cNH) and the three cNF gradients at the
  // SwiGLU product; a checkpointed block's recomputed activations first. The peak is the last
  // block's backward (every earlier block's tensors still held): when an earlier block is the
  // last checkpointed one, the blocks after it hold at least its recompute, so only the last
  // block's checkpointing counts.
  const bool ckpt = L > 0 && ac.checkpoints_block(L);
  if (ac.saves_ops() && ckpt) {
    a.block_backward = {"block replay and backward",
                        c * N * H + 3 * int64_t(c) * N * F + op_sac_replayed_bytes(m, B, T, c, cuda),
                        kept_sdpa ? "block activations - c*N*(H + KV + F) - 4*B*nh*T (v, gate and SDPA's output and "
                                    "logsumexp are kept) + cNH + 3cNF"
                                  : "block activations - c*N*(KV + F) (v and gate are kept) + cNH + 3cNF"};
    return a;
  }
  a.block_backward = {ckpt ? "block recompute and backward" : "block backward",
                      c * N * H + 3 * int64_t(c) * N * F + (ckpt ? block : 0),
                      ckpt ? "block activations + cNH + 3cNF" : "cNH + 3cNF"};
  return a;
}

}  // namespace zb::models
