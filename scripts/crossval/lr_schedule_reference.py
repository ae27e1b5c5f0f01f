"""DeepSpeed's own lr schedulers driven directly: the lr (and AdamW betas) every optimizer step runs with.

Each case's `scheduler` section is built as the engine builds it —
DeepSpeedEngine._scheduler_from_config (runtime/engine.py; the type from get_scheduler_name and
the params from get_scheduler_params, runtime/config.py) called on a stand-in engine — over a
torch.optim.AdamW with the case's lr, one parameter group. Then, as the engine's
_take_model_step does after every applied optimizer step, scheduler.step(); the lr recorded for
step k is the param group's lr before the k-th step (the constructor sets step 0's), and so are
its betas (OneCycle with cycle_momentum sets them: (momentum, 0.99); otherwise AdamW's defaults).

stdin: {"cases": [{"optimizer_lr": x, "scheduler": {...section...}, "steps": n}, ...]}
stdout: {"results": [{"lrs": [...], "betas": [[b1, b2], ...], "error": null | "ExceptionType: message"}, ...]}
(tests/test_lr_schedule.cpp runs the same sections through config/deepspeed_scheduler.)
"""
import json
import sys

import torch
from deepspeed.runtime.config import get_scheduler_name, get_scheduler_params
from deepspeed.runtime.engine import DeepSpeedEngine


class _Engine:
    """What _scheduler_from_config reads of the engine: scheduler_name() and scheduler_params()."""

    def __init__(self, section):
        param_dict = {"scheduler": section}
        self._name = get_scheduler_name(param_dict)
        self._params = get_scheduler_params(param_dict)

    def scheduler_name(self):
        return self._name

    def scheduler_params(self):
        return self._params


def run_case(case):
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([weight], lr=case["optimizer_lr"])
    lrs, betas = [], []
    try:
        scheduler = DeepSpeedEngine._scheduler_from_config(_Engine(case["scheduler"]), optimizer)
        for _ in range(case["steps"]):
            lrs.append(float(optimizer.param_groups[0]["lr"]))
            betas.append(list(optimizer.param_groups[0]["betas"]))  # as set (a string stays one)
            if scheduler is not None:
                scheduler.step()
    except Exception as e:  # noqa: BLE001 - DeepSpeed's refusal is the answer (ValueError, TypeError, assert)
        return {"lrs": lrs, "betas": betas, "error": f"{type(e).__name__}: {e}"}
    return {"lrs": lrs, "betas": betas, "error": None}


def main():
    spec = json.load(sys.stdin)
    json.dump({"results": [run_case(c) for c in spec["cases"]]}, sys.stdout)


if __name__ == "__main__":
    main()
