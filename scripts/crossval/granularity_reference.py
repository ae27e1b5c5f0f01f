"""DeepSpeed's module granularity for zerobench's model (tests/test_zero3.cpp, Zero3Granularity).

Reads {"hidden", "kv_dim", "ffn", "vocab", "layers"} as JSON on stdin, builds HF transformers'
LlamaForCausalLM module tree (the same children, in the same order, with the same parameter shapes;
on the meta device: no memory) and runs DeepSpeed 0.19.8's own
DeepSpeedZeRoOffload._get_granularity_recursively on it (deepspeed/runtime/zero/parameter_offload.py).
Prints {"min_granularity", "module"} as JSON. transformers is not installed here: the classes below
mirror modeling_llama.py's module structure (names matter only for DeepSpeed's container check).
"""
import json
import sys
import types

import torch
from torch import nn
from deepspeed.runtime.zero.parameter_offload import DeepSpeedZeRoOffload


def linear(i, o):
    return nn.Linear(i, o, bias=False, device="meta")


class LlamaRMSNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(h, device="meta"))


class LlamaRotaryEmbedding(nn.Module):  # buffers only
    pass


class LlamaAttention(nn.Module):
    def __init__(self, h, kv):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = linear(h, h), linear(h, kv), linear(h, kv), linear(h, h)


class LlamaMLP(nn.Module):
    def __init__(self, h, f):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = linear(h, f), linear(h, f), linear(f, h)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, h, kv, f):
        super().__init__()
        self.self_attn = LlamaAttention(h, kv)
        self.mlp = LlamaMLP(h, f)
        self.input_layernorm, self.post_attention_layernorm = LlamaRMSNorm(h), LlamaRMSNorm(h)


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"], device="meta")
        self.layers = nn.ModuleList(LlamaDecoderLayer(c["hidden"], c["kv_dim"], c["ffn"]) for _ in range(c["layers"]))
        self.norm = LlamaRMSNorm(c["hidden"])
        self.rotary_emb = LlamaRotaryEmbedding()


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = LlamaModel(c)
        self.lm_head = linear(c["hidden"], c["vocab"])


c = json.load(sys.stdin)
m = LlamaForCausalLM(c)
for p in m.parameters():
    p.ds_numel = p.numel()  # what partition_parameters.py sets; ZeRO-3 reads it
state = types.SimpleNamespace(min_granularity_value=sys.maxsize, min_granularity_layer=None, granularity_info=set())
state._get_granularity_recursively = types.MethodType(DeepSpeedZeRoOffload._get_granularity_recursively, state)
state._get_granularity_recursively(m)
print(json.dumps({"min_granularity": state.min_granularity_value, "module": state.min_granularity_layer}))
