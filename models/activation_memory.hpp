// activation_memory.hpp — the bytes autograd holds for one micro-batch of this decoder
// (models/llama.cpp), counted tensor by tensor from what each op saves for backward (checked
// against torch.autograd.graph.saved_tensors_hooks on the same ops; docs/metrics.md).
// Owns: the activation formulas. Must not: know about sharding or parameters' storage.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.hpp"

namespace zb::models {

struct MemoryTerm {
  std::string name;
  int64_t bytes = 0;
  std::string formula;  // how `bytes` is computed, in the model's symbols (N = B*T tokens)
};

// Held across forward and backward, and the two moments of backward that peak: the loss head's
// backward (every block's activations still held) and a block's backward (the head's tensors freed).
struct ActivationMemory {
  MemoryTerm blocks;          // every block's saved tensors (their inputs under checkpointing)
  MemoryTerm head_saved;      // the loss head's saved tensors (final RMSNorm, fp32 log-softmax output)
  MemoryTerm head_backward;   // log_softmax's fp32 gradient in and out
  MemoryTerm block_backward;  // a block's gradients at the SwiGLU product (and its recompute)
  int64_t peak_bytes() const {
    return blocks.bytes + std::max(head_saved.bytes + head_backward.bytes, block_backward.bytes);
  }
};

// compute_bytes: 2 (bf16 compute) or 4 (fp32). A checkpointed block (ac.checkpoints_block) keeps
// only its input (selective-op: and its saved ops' outputs) and is recomputed in its backward;
// the others keep their activations.
// `cuda`: a GPU run, where selective-op also keeps SDPA's output (ActivationCheckpointing::keeps_attention).
ActivationMemory activation_memory(const ModelConfig& cfg, int64_t micro_batch, int64_t seq_len, int compute_bytes,
                                   const ActivationCheckpointing& ac, bool cuda = false);

// selective-op, per block: what its forward keeps — its input and the outputs of wq, wv, w_gate and
// w_down (c*N*(3H + KV + F)); on CUDA also SDPA's output and fp32 logsumexp (c*N*H + 4*B*nh*T) —
// and what its replay in backward saves besides them: a block's activations less v (SDPA saves the
// kept wv output) and gate (SiLU saves the kept w_gate output), on CUDA less SDPA's output and
// logsumexp too (the kept attention's backward reads the kept ones).
int64_t op_sac_kept_bytes(const ModelConfig& cfg, int64_t micro_batch, int64_t seq_len, int compute_bytes,
                          bool cuda = false);
int64_t op_sac_replayed_bytes(const ModelConfig& cfg, int64_t micro_batch, int64_t seq_len, int compute_bytes,
                              bool cuda = false);

// One decoder block's saved tensors without checkpointing (the sum of activation_memory's per-block term).
int64_t block_saved_bytes(const ModelConfig& cfg, int64_t micro_batch, int64_t seq_len, int compute_bytes);

}  // namespace zb::models
