"""size_based_wrap_reference.py — what torch's FSDP1 wraps under accelerate's SIZE_BASED_WRAP, for
zerobench's model presets: torch.distributed.fsdp.wrap._recursive_wrap with
size_based_auto_wrap_policy(min_num_params) over scripts/crossval/model.py's LlamaForCausalLM (built
on the meta device), recording each module the policy wraps, in wrap order. Writes
tests/data/fsdp_size_based_wrap.json, which test_fsdp's FsdpWrap tests compare
backends/fsdp/fsdp_wrap.cpp's size_based_wrapped_modules with.

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


def main():
    result = {"torch": torch.__version__, "presets": {}}
    for name, dims in PRESETS.items():
        cfg = zbmodel.Config(*dims)
        result["presets"][name] = {str(t): wrapped_modules(cfg, t) for t in THRESHOLDS}
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "fsdp_size_based_wrap.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(os.path.normpath(path))


if __name__ == "__main__":
    main()
