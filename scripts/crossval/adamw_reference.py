"""torch.optim.AdamW's own step, for zerobench's AdamW (backends/common/optim.cpp): each case
builds torch.optim.AdamW over the case's parameters with the implementation it names and steps it
with the case's gradients and lrs; the parameters after every step come back exactly (fp32 and bf16
values are exact as JSON doubles).

stdin: {"cases": [{"impl": "fused" | "foreach" | "for-loop" | "default", "dtype": "float32" | "bfloat16",
                   "params": [[...], ...], "grads": [[[...], ...] per step], "lrs": [...],
                   "betas": [b1, b2], "eps": e, "weight_decay": w,
                   "step_betas": [[b1, b2] per step] (optional: set into the param groups before each
                   step, as DeepSpeed's OneCycle scheduler with cycle_momentum does)}, ...]}
stdout (last line): {"torch": version, "results": [{"params": [[[...], ...] per step],
                    "foreach": bool | null, "fused": bool | null}, ...]}
"""
import json
import sys

import torch

KWARGS = {"fused": {"fused": True}, "default": {}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}


def run_case(case):
    dtype = getattr(torch, case["dtype"])
    params = [torch.nn.Parameter(torch.tensor(p, dtype=dtype)) for p in case["params"]]
    b1, b2 = case["betas"]
    optimizer = torch.optim.AdamW(params, lr=case["lrs"][0], betas=(b1, b2), eps=case["eps"],
                                  weight_decay=case["weight_decay"], **KWARGS[case["impl"]])
    out = []
    step_betas = case.get("step_betas") or [None] * len(case["lrs"])
    for grads, lr, betas in zip(case["grads"], case["lrs"], step_betas):
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g, dtype=dtype)
        for group in optimizer.param_groups:
            group["lr"] = lr
            if betas is not None:
                group["betas"] = (betas[0], betas[1])
        optimizer.step()
        out.append([p.detach().float().tolist() for p in params])
    group = optimizer.param_groups[0]
    return {"params": out, "foreach": group["foreach"], "fused": group["fused"]}


def main():
    cases = json.load(sys.stdin)["cases"]
    print(json.dumps({"torch": torch.__version__, "results": [run_case(c) for c in cases]}))


if __name__ == "__main__":
    main()
