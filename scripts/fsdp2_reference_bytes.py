#!/usr/bin/env python3
# fsdp2_reference_bytes.py — runs PyTorch's real FSDP2 (`fully_shard`) on CPU/Gloo on a model with
# zerobench's Llama parameter shapes and prints, per rank, the bytes FSDP2 holds at the end of the
# last micro-batch's backward (zerobench's measurement point, DESIGN §8), per category:
#   params     storage of the sharded parameters (FSDPParam._sharded_param_data: the padded
#              storage each DTensor's local tensor is a view of; _fsdp_param.py _init_sharded_param)
#   grads      storage of the sharded gradients (views into each group's reduce-scatter output,
#              upcast to the sharded dtype; _fsdp_collectives.py foreach_reduce), deduplicated
#   optimizer  torch.optim.AdamW exp_avg + exp_avg_sq (zeros_like the unpadded local shard);
#              the per-parameter fp32 `step` scalars are printed separately (`adamw_step_bytes`)
# and, per step, the collectives it issued (counted with a wrapper around c10d's functions).
# Not part of the build or the tests; the check that zerobench's `--backend fsdp2` bytes equal
# these (docs/backends/fsdp2.md). Runs as:
#   python -m torch.distributed.run --nproc-per-node 3 scripts/fsdp2_reference_bytes.py \
#       --vocab 251 --precision mixed [--layout root|accelerate] [--grad-accum 2] \
#       [--reshard-after-forward true|false|N] [--replicate R]
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


class RMSNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)


class Block(nn.Module):  # models/llama.cpp's block shapes: attn_norm, wq, wk, wv, wo, mlp_norm, gate, up, down
    def __init__(self, h, kv, f):
        super().__init__()
        self.input_layernorm = RMSNorm(h)
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, kv, bias=False)
        self.v_proj = nn.Linear(h, kv, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h)
        self.gate_proj = nn.Linear(h, f, bias=False)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)

    def forward(self, x):
        # Not attention (bytes do not depend on it): every weight is used, so every gradient exists.
        h = self.input_layernorm(x)
        a = self.q_proj(h) + torch.cat([self.k_proj(h), self.v_proj(h)], -1).narrow(-1, 0, h.size(-1)) \
            if 2 * self.k_proj.out_features >= h.size(-1) else self.q_proj(h)
        x = x + self.o_proj(a)
        h2 = self.post_attention_layernorm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h2)) * self.up_proj(h2))


class Model(nn.Module):
    def __init__(self, layers, h, kv, f, v):
        super().__init__()
        self.embed_tokens = nn.Embedding(v, h)
        self.layers = nn.ModuleList(Block(h, kv, f) for _ in range(layers))
        self.norm = RMSNorm(h)
        self.lm_head = nn.Linear(h, v, bias=False)

    def forward(self, tokens, targets):
        x = self.embed_tokens(tokens)
        for b in self.layers:
            x = b(x)
        logits = self.lm_head(self.norm(x))
        return nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


class CountingComm:
    """Counts c10d collectives (calls and nccl-tests bytes) issued through torch.distributed."""

    def __init__(self):
        self.counts = {}
        for name in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "broadcast"):
            orig = getattr(dist, name)

            def wrap(*args, __orig=orig, __name=name, **kwargs):
                t = kwargs.get("output_tensor", kwargs.get("output", args[0] if args else None))
                if __name == "reduce_scatter_tensor":
                    t = kwargs.get("input", args[1] if len(args) > 1 else None)
                c = self.counts.setdefault(__name, [0, 0])
                c[0] += 1
                c[1] += t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
                return __orig(*args, **kwargs)

            setattr(dist, name, wrap)

    def take(self):
        out, self.counts = self.counts, {}
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--kv", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=352)
    ap.add_argument("--vocab", type=int, default=251)
    ap.add_argument("--precision", choices=["fp32", "low", "mixed"], default="fp32")
    ap.add_argument("--layout", choices=["root", "accelerate"], default="root")
    ap.add_argument("--reshard-after-forward", default="true")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--replicate", type=int, default=1, help="HSDP: mesh (replicate, world / replicate)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Model(a.layers, a.hidden, a.kv, a.ffn, a.vocab)
    if a.precision == "low":
        model = model.to(torch.bfloat16)  # loaded in bf16, no upcast (mixed_precision "no")
    mp = MixedPrecisionPolicy()
    if a.precision == "mixed":  # accelerate's FullyShardedDataParallelPlugin.set_mixed_precision("bf16")
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, output_dtype=torch.bfloat16)
    raf = {"true": True, "false": False}.get(a.reshard_after_forward.lower(), None)
    if raf is None:
        raf = int(a.reshard_after_forward)
    if a.replicate > 1:
        mesh = dist.device_mesh.init_device_mesh("cpu", (a.replicate, world // a.replicate),
                                                 mesh_dim_names=("replicate", "shard"))
    else:
        mesh = dist.device_mesh.init_device_mesh("cpu", (world,))
    kw = dict(mesh=mesh, mp_policy=mp, reshard_after_forward=raf)
    for b in model.layers:
        fully_shard(b, **kw)
    if a.layout == "accelerate":  # accelerate 1.15 utils/fsdp_utils.py fsdp2_prepare_model
        fully_shard(model.embed_tokens, **kw)
        fully_shard([model.norm, model.lm_head], **{**kw, "reshard_after_forward": False})
        fully_shard(model, mesh=mesh, mp_policy=mp)
    else:
        fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    comm = CountingComm()
    gen = torch.Generator().manual_seed(1 + rank)
    result = {}
    for step in range(a.steps):
        comm.take()
        for micro in range(a.grad_accum):
            last = micro + 1 == a.grad_accum
            model.set_requires_gradient_sync(last)  # accelerate's no_sync for FSDP2
            tokens = torch.randint(0, a.vocab, (2, 16), generator=gen)
            loss = model(tokens, torch.roll(tokens, -1, 1))
            (loss / a.grad_accum).backward()
        params, grads, seen = 0, 0, set()
        for p in model.parameters():
            local = p.to_local()
            params += local.untyped_storage().nbytes()
            if p.grad is not None:
                g = p.grad.to_local()
                key = g.untyped_storage().data_ptr()
                if key not in seen:
                    seen.add(key)
                    grads += g.untyped_storage().nbytes()
        optim, step_bytes = 0, 0
        for p in model.parameters():
            st = opt.state.get(p, {})
            for k in ("exp_avg", "exp_avg_sq"):
                if k in st:
                    optim += st[k].to_local().nbytes if hasattr(st[k], "to_local") else st[k].nbytes
            if "step" in st:
                step_bytes += st["step"].nbytes
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        counts = comm.take()
        result = {"rank": rank, "world": world, "precision": a.precision, "layout": a.layout,
                  "params": params, "grads": grads, "optimizer": optim, "adamw_step_bytes": step_bytes,
                  "collectives_last_step": counts, "loss": float(loss)}
    # Rank order: one rank prints at a time.
    for r in range(world):
        if r == rank:
            print(json.dumps(result), flush=True)
            if a.out:
                with open(f"{a.out}.rank{rank}.json", "w") as f:
                    json.dump(result, f)
        dist.barrier()
    dist.destroy_process_group()
    os._exit(0)  # UPSTREAM_ON_CPU.md: avoids Gloo's abort at interpreter exit


if __name__ == "__main__":
    main()
