"""model.py — the reference decoder for `zerobench crossval`: models/llama.cpp, op for op, as
torch.nn modules with Hugging Face Llama names.

Owns: the module tree (LlamaForCausalLM -> model.{embed_tokens, layers[i], norm}, lm_head), so
state_dict keys are exactly the names zerobench writes (models/checkpoint/hf_llama.cpp), and
parameters are registered in zerobench's spec order (models/model_config.cpp
unit_param_specs), so FSDP1's flat parameters and DeepSpeed's partitions are laid out like
zerobench's. Must not: know about sharding (runners wrap it from outside) or own buffers
(RoPE tables are a pure function of the config, built per call like make_rope_cache, so no
framework casts or broadcasts them).

Mirrors, each line of models/llama.cpp:
  rms_norm      x.float() * rsqrt(mean(x^2) + eps), cast back to x.dtype, then * weight
  RoPE          inv_freq = theta ** (-arange(0, hd, 2) / hd) in fp32; angles = outer(arange(T),
                inv_freq); emb = cat(angles, angles); cos/sin cast to the compute dtype;
                x * cos + cat(-x2, x1) * sin (rotate-half, HF convention)
  attention     q/k/v linears, view [B, T, h, hd] -> transpose(1, 2), SDPA causal with
                enable_gqa when kv_heads != heads, transpose back, reshape [B, T, H], o_proj
  MLP           down(silu(gate(h)) * up(h))
  loss          logits = lm_head(norm(x)); cross_entropy(logits.reshape(-1, V).float(), targets)

Per-document batches (--batching pad|pack, models/llama.cpp document_attention): with position_ids
[B, T] the RoPE rows are gathered at the positions (HF LlamaRotaryEmbedding computes cos/sin of
inv_freq * position_ids in fp32; the table's row p holds the same products), the documents are
found from position_ids as HF's packed-sequence mask finds them (masking_utils.py
find_packed_sequence_indices: a new sequence wherever the position does not grow by one; the
padding's positions restart at 0 too, so it is a block of its own) and a query sees the earlier
keys of its own sequence only (block-diagonal causal, torchtitan's block_causal). The mask goes to
SDPA as zerobench passes it: additive, 0 / -inf in the compute dtype, made once per forward; the
loss is the sum over label tokens (ignore_index -100: padding, each document's last token), HF's
ForCausalLMLoss with num_items_in_batch before its division (the runner scales it).
"""
import json

import torch
import torch.nn.functional as F
from torch import nn


class Config:
    """The fields of zerobench's ModelConfig, read from the HF config.json zerobench writes."""

    def __init__(self, hidden, ffn, layers, heads, kv_heads, vocab, norm_eps=1e-5, rope_theta=10000.0):
        self.hidden, self.ffn, self.layers = hidden, ffn, layers
        self.heads, self.kv_heads, self.vocab = heads, kv_heads, vocab
        self.norm_eps, self.rope_theta = norm_eps, rope_theta
        self.head_dim = hidden // heads

    @staticmethod
    def from_hf_json(path):
        with open(path) as f:
            c = json.load(f)
        return Config(c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"],
                      c.get("num_key_value_heads", c["num_attention_heads"]), c["vocab_size"], c["rms_norm_eps"],
                      c["rope_theta"])


_rope_cache = {}


def rope_cache(cfg, seq_len, dtype, device):
    """make_rope_cache: cos/sin [T, head_dim] computed in fp32, then cast to `dtype`."""
    key = (cfg.head_dim, cfg.rope_theta, seq_len, dtype, str(device))
    if key not in _rope_cache:
        hd = cfg.head_dim
        inv_freq = torch.pow(cfg.rope_theta, -torch.arange(0, hd, 2, dtype=torch.float32, device=device) / float(hd))
        angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)
        emb = torch.cat([angles, angles], dim=-1)
        _rope_cache[key] = (emb.cos().to(dtype), emb.sin().to(dtype))
    return _rope_cache[key]


def apply_rope(x, cos, sin):
    half = x.size(-1) // 2
    x1, x2 = x.narrow(-1, 0, half), x.narrow(-1, half, half)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        xf = x.to(torch.float32)
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def linear(i, o):
    return nn.Linear(i, o, bias=False)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        kv = cfg.kv_heads * cfg.head_dim
        self.q_proj, self.k_proj = linear(cfg.hidden, cfg.hidden), linear(cfg.hidden, kv)
        self.v_proj, self.o_proj = linear(cfg.hidden, kv), linear(cfg.hidden, cfg.hidden)

    def forward(self, h, rope=None):
        c = self.cfg
        B, T, _ = h.shape
        q = self.q_proj(h).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        if rope is None:
            cos, sin = rope_cache(c, T, q.dtype, q.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            attn = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True,
                                                  enable_gqa=c.kv_heads != c.heads)
        else:  # per-document: RoPE at the positions, the block-diagonal causal mask (additive)
            cos, sin, mask = rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False,
                                                  enable_gqa=c.kv_heads != c.heads)
        return self.o_proj(attn.transpose(1, 2).reshape(B, T, c.hidden))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj, self.up_proj = linear(cfg.hidden, cfg.ffn), linear(cfg.hidden, cfg.ffn)
        self.down_proj = linear(cfg.ffn, cfg.hidden)

    def forward(self, h):
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class DecoderLayer(nn.Module):
    """One block; registration order = zerobench's spec order (attn_norm, q, k, v, o,
    mlp_norm, gate, up, down), the layout of zerobench's FlatParameters and ZeRO-3 partitions;
    with hf_order HF's LlamaDecoderLayer order (self_attn, mlp, then the norms), the order
    zerobench's fsdp2 backend keeps a block's parameters in (fsdp2_engine.cpp kHfBlockOrder)."""

    def __init__(self, cfg, hf_order=False):
        super().__init__()
        if hf_order:
            self.self_attn = Attention(cfg)
            self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        if not hf_order:
            self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        if not hf_order:
            self.mlp = MLP(cfg)

    def forward(self, x, rope=None):
        x1 = x + (self.self_attn(self.input_layernorm(x)) if rope is None else
                  self.self_attn(self.input_layernorm(x), rope=rope))
        return x1 + self.mlp(self.post_attention_layernorm(x1))


class LlamaModel(nn.Module):
    def __init__(self, cfg, hf_order=False):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg, hf_order) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.checkpointed = frozenset()  # block indices run under torch.utils.checkpoint (checkpoint_blocks)

    def forward(self, tokens, position_ids=None):
        x = self.embed_tokens(tokens)
        rope = None if position_ids is None else document_rope(self.layers[0].self_attn.cfg, position_ids, x.dtype)
        for i, layer in enumerate(self.layers):
            if i in self.checkpointed and torch.is_grad_enabled():
                x = _checkpointed_call(layer, x, rope)
            elif rope is None:
                x = layer(x)
            else:
                x = layer(x, rope=rope)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg, hf_order=False):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg, hf_order)
        self.lm_head = linear(cfg.hidden, cfg.vocab)

    def logits(self, tokens, position_ids=None):
        return self.lm_head(self.model(tokens) if position_ids is None else self.model(tokens, position_ids))

    def forward(self, tokens, targets, position_ids=None):
        """Mean next-token cross-entropy over B*T, logits upcast to fp32 (forward_loss); with
        position_ids (per-document batches) the sum over the label tokens (targets -100 ignored)."""
        logits = self.logits(tokens, position_ids)
        return F.cross_entropy(logits.reshape(-1, self.cfg.vocab).to(torch.float32), targets.reshape(-1),
                               reduction="mean" if position_ids is None else "sum", ignore_index=-100)


def packed_sequence_ids(position_ids):
    """HF transformers masking_utils.find_packed_sequence_indices: [B, T] -> the index of the
    sequence each position belongs to, a new one wherever position_ids does not grow by one."""
    first = position_ids[:, :1] - 1
    diff = torch.diff(position_ids, prepend=first, dim=-1)
    return (diff != 1).cumsum(-1)


def document_rope(cfg, position_ids, dtype):
    """(cos, sin, mask) for a per-document batch: cos/sin [B, 1, T, hd] gathered at position_ids
    from the make_rope_cache table in `dtype`, and the block-diagonal causal mask [B, 1, T, T] as
    an additive 0 / -inf mask in `dtype` (models/llama.cpp forward_logits makes the same once)."""
    B, T = position_ids.shape
    cos, sin = rope_cache(cfg, T, dtype, position_ids.device)
    flat = position_ids.reshape(-1)
    cos = cos.index_select(0, flat).view(B, 1, T, cos.size(-1))
    sin = sin.index_select(0, flat).view(B, 1, T, sin.size(-1))
    seq = packed_sequence_ids(position_ids)
    same = seq.unsqueeze(2) == seq.unsqueeze(1)
    causal = torch.ones(T, T, dtype=torch.bool, device=position_ids.device).tril()
    allowed = (same & causal).unsqueeze(1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=position_ids.device).masked_fill_(~allowed, float("-inf"))
    return cos, sin, mask


CHECKPOINT_CALLS = {"forwards": 0, "runs": 0}  # checkpointed block forwards, and their runs (recomputes: runs - forwards)


def _checkpointed_call(layer, x, rope):
    """HF's gradient checkpointing of a decoder layer (transformers 5.x modeling_layers.py
    GradientCheckpointingLayer: torch.utils.checkpoint.checkpoint(partial(forward, self, **kwargs),
    *args) with use_reentrant=False, activation_checkpointing_enable's default): the layer's forward
    is recomputed in backward, its own module hooks (a framework's) stay outside the checkpoint."""
    from torch.utils.checkpoint import checkpoint
    forward = type(layer).forward

    def run(h, *r):
        CHECKPOINT_CALLS["runs"] += 1
        return forward(layer, h) if not r else forward(layer, h, rope=r)
    CHECKPOINT_CALLS["forwards"] += 1
    return checkpoint(run, x, *(rope or ()), use_reentrant=False)


def checkpointed_blocks(layers, mode):
    """The 0-based indices of the blocks zerobench's --activation-checkpointing MODE checkpoints
    (models/activation_checkpointing.hpp: full = every block; selective-layer:N = torchtitan's
    _apply_layer_sac, the blocks counted 1, 2, ... whose count is a multiple of N, N = 0 every
    block; none = none). Any other mode raises ValueError naming it."""
    if mode in ("none", "", None):
        chosen = set()
    elif mode == "full":
        chosen = set(range(layers))
    elif mode.startswith("selective-layer:") and mode.split(":", 1)[1].isdigit():
        every = int(mode.split(":", 1)[1])
        chosen = {i for i in range(layers) if every == 0 or (i + 1) % every == 0}
    else:
        raise ValueError(f"activation checkpointing mode {mode!r} is not none, full or selective-layer:N")
    return sorted(chosen)


def checkpoint_blocks(net, mode):
    """Runs the forward of the blocks checkpointed_blocks(MODE) names under torch.utils.checkpoint
    (non-reentrant, HF's gradient checkpointing of a decoder layer); returns their indices."""
    chosen = checkpointed_blocks(len(net.model.layers), mode)
    net.model.checkpointed = frozenset(chosen)
    return chosen


def load_weights(model, state):
    """Copies `state` (HF name -> tensor) into the model, each cast to its parameter's dtype;
    every parameter must be present and nothing else."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(state))
    extra = sorted(set(state) - set(params))
    if missing or extra:
        raise ValueError(f"weights do not match the model: missing {missing[:4]}, unexpected {extra[:4]}")
    with torch.no_grad():
        for name, p in params.items():
            src = state[name]
            if tuple(src.shape) != tuple(p.shape):
                raise ValueError(f"{name}: shape {tuple(src.shape)} != {tuple(p.shape)}")
            p.copy_(src.to(p.dtype))
