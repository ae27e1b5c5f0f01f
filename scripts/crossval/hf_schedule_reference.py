"""transformers' own lr schedulers driven as HF's Trainer drives them: the lr every optimizer step
runs with, for zerobench's --lr-scheduler-type (config/hf_scheduler.cpp).

Each case builds transformers.get_scheduler(type, optimizer, num_warmup_steps, num_training_steps,
scheduler_specific_kwargs) over a torch.optim.AdamW with the case's lr (one parameter group), as
Trainer.create_scheduler does; num_warmup_steps is TrainingArguments.get_warmup_steps of the
case's warmup ("warmup_steps", an int, or "warmup_ratio" < 1: ceil(steps x ratio)). Then for each
step: record get_last_lr() (the lr the optimizer step runs with; checked equal to the param
group's), optimizer.step(), scheduler.step() — the Trainer's order. "shift": n > 0 steps the
scheduler n times before the first record (a planted off-by-one for the test that must see it).

stdin: {"cases": [{"type": "linear", "lr": x, "steps": n, "warmup_steps": w | "warmup_ratio": r,
                   "min_lr_rate": m (optional), "shift": 0}, ...]}
stdout (last line): {"transformers": version, "results": [{"lrs": [...], "warmup_steps": w,
                    "error": null | "ExceptionType: message"}, ...]}
"""
import json
import sys
import types
import warnings

import torch
import transformers
from transformers import TrainingArguments, get_scheduler


def run_case(case):
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([weight], lr=case["lr"])
    lrs = []
    warmup = case.get("warmup_steps", case.get("warmup_ratio", 0))
    # TrainingArguments.get_warmup_steps reads only self.warmup_steps (int, or a ratio below 1).
    num_warmup = TrainingArguments.get_warmup_steps(types.SimpleNamespace(warmup_steps=warmup), case["steps"])
    kwargs = {"min_lr_rate": case["min_lr_rate"]} if "min_lr_rate" in case else None
    try:
        scheduler = get_scheduler(case["type"], optimizer, num_warmup_steps=num_warmup,
                                  num_training_steps=case["steps"], scheduler_specific_kwargs=kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the planted shift steps the scheduler before the optimizer
            for _ in range(case.get("shift", 0)):
                scheduler.step()
        for _ in range(case["steps"]):
            lr = float(scheduler.get_last_lr()[0])
            if lr != float(optimizer.param_groups[0]["lr"]):
                raise RuntimeError(f"get_last_lr {lr} != the param group's {optimizer.param_groups[0]['lr']}")
            lrs.append(lr)
            optimizer.step()
            scheduler.step()
    except Exception as e:  # noqa: BLE001 - transformers' refusal is the answer
        return {"lrs": lrs, "warmup_steps": num_warmup, "error": f"{type(e).__name__}: {e}"}
    return {"lrs": lrs, "warmup_steps": num_warmup, "error": None}


def main():
    spec = json.load(sys.stdin)
    print(json.dumps({"transformers": transformers.__version__, "results": [run_case(c) for c in spec["cases"]]}))


if __name__ == "__main__":
    main()
