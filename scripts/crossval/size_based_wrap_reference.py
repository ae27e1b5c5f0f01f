"""size_based_wrap_reference.py — what accelerate's SIZE_BASED_WRAP wraps, for zerobench's model
presets, under FSDP1 and FSDP2:
- "presets" (FSDP1): torch.distributed.fsdp.wrap._recursive_wrap with
  size_based_auto_wrap_policy(min_num_params) over scripts/crossval/model.py's LlamaForCausalLM (built
  on the meta device), recording each module the policy wraps, in wrap order;
- "fsdp2_presets": the modules accelerate's fsdp2_prepare_model hands to fully_shard before the root
  (utils/fsdp_utils.py: fsdp2_prepare_auto_wrap_policy's size branch, `numel > min_num_params`, over
  get_module_children_bottom_up(model)[:-1]; accelerate is not installed here, so that walk is
  written out below), on transformers' own LlamaForCausalLM (meta device) — HF's module names and
  parameter counts.
Writes tests/data/fsdp_size_based_wrap.json, which test_fsdp's FsdpWrap tests compare
backends/fsdp/fsdp_wrap.cpp's size_based_wrapped_modules with, and test_fsdp2's Fsdp2SizePolicy
tests backends/fsdp_family/module_tree.cpp's fsdp2_size_policy_modules.

  ~/.cache/zerobench/venv/bin/python scripts/crossval/size_based_wrap_reference.py
"""
import functools
import json
import os
import sys

import torch
import torch.nn as nn
from torch.distributed.fsdp.wrap import _recursive_wrap, size_based_auto_wrap_policy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as zbmodel  # noqa: E402

# models/model_config.cpp presets: hidden, ffn, layers, heads, kv_heads, vocab
PRESETS = {"tiny": (128, 352, 2, 4, 2, 2048), "small": (512, 1536, 6, 8, 4, 8192),
           "granite-7b": (4096, 11008, 32, 32, 32, 32000)}
THRESHOLDS = [1, 1000, 50000, 150000, 1000000, 10000000, 100000000, 200000000, 1000000000]


def wrapped_modules(cfg, min_num_params):
    with torch.device("meta"):
        net = zbmodel.LlamaForCausalLM(cfg)
    names = {id(m): n for n, m in net.named_modules()}
    out = []

    class Recorder(nn.Module):
        def __init__(self, m):
            super().__init__()
            out.append(names[id(m)])
            self.m = m

    _recursive_wrap(net, functools.partial(size_based_auto_wrap_policy, min_num_params=min_num_params), Recorder,
                    ignored_modules=set(), ignored_params=set(), only_wrap_children=True)
    return out


def fsdp2_selected_modules(net, min_num_params):
    """fsdp2_prepare_model's policy loop: bottom-up (a stack of named_children popped last-first,
    the visit order reversed), the root left out, `numel > min_num_params`; none when <= 0."""
    if min_num_params <= 0:
        return []
    stack, visited = [("", net)], []
    while stack:
        name, module = stack.pop()
        for child_name, child in module.named_children():
            stack.append((f"{name}.{child_name}" if name else child_name, child))
        visited.append((name, module))
    bottom_up = list(reversed(visited))[:-1]
    return [n for n, m in bottom_up if sum(p.numel() for p in m.parameters()) > min_num_params]


def hf_llama(dims):
    from transformers import LlamaConfig, LlamaForCausalLM
    hidden, ffn, layers, heads, kv_heads, vocab = dims
    config = LlamaConfig(hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                         tie_word_embeddings=False)
    with torch.device("meta"):
        return LlamaForCausalLM(config)


def main():
    result = {"torch": torch.__version__, "presets": {}, "fsdp2_presets": {}}
    for name, dims in PRESETS.items():
        cfg = zbmodel.Config(*dims)
        result["presets"][name] = {str(t): wrapped_modules(cfg, t) for t in THRESHOLDS}
        net = hf_llama(dims)
        numels = [sum(p.numel() for p in net.model.parameters()), sum(p.numel() for p in net.parameters())]
        # The thresholds, and the decoder's and the whole model's sizes either side: the largest
        # selection that is not empty and the smallest that is.
        result["fsdp2_presets"][name] = {str(t): fsdp2_selected_modules(net, t)
                                         for t in sorted(set(THRESHOLDS + [numels[0] - 1, numels[0], numels[1]]))}
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "fsdp_size_based_wrap.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(os.path.normpath(path))


if __name__ == "__main__":
    main()
