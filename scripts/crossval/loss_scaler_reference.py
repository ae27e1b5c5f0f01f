"""DeepSpeed's own DynamicLossScaler / LossScaler driven directly with a given overflow sequence.

DeepSpeed's fp16 does not run on a CPU ("Type fp16 is not supported on your device"), so the scale's
state machine is checked against the class itself: CreateLossScaler(dtype=torch.half, ...) as
runtime/zero/stage3.py and stage_1_and_2.py create it, with the `fp16` section's arguments as
runtime/precision_config.py DeepSpeedFP16Config.dynamic_loss_scale_args() builds them.

stdin: {"fp16": {...DeepSpeed fp16 section...}, "overflow": [bool, ...]}
stdout: {"scales": [scale before each step], "skipped": [bool], "final_scale": x, "error": str|null}
(tests/test_loss_scaler.cpp runs the same sequence through backends/common/loss_scaler.)
"""
import json
import sys

import torch
from deepspeed.runtime.fp16 import loss_scaler as ds_loss_scaler
from deepspeed.runtime.precision_config import DeepSpeedFP16Config

# update_scale logs on rank 0 through deepspeed.comm, which needs no process group for this.
ds_loss_scaler.dist.get_rank = lambda *a, **k: 0


def main():
    spec = json.load(sys.stdin)
    cfg = DeepSpeedFP16Config(**dict(spec["fp16"], enabled=True))
    dynamic = cfg.loss_scale == 0
    scaler = ds_loss_scaler.CreateLossScaler(dtype=torch.half,
                                             static_loss_scale=cfg.loss_scale,
                                             dynamic_scaling=dynamic,
                                             dynamic_loss_args=cfg.dynamic_loss_scale_args() if dynamic else None)
    scales, skipped, error = [], [], None
    for overflow in spec["overflow"]:
        scales.append(float(scaler.cur_scale))
        # stage3.py step(): `if self.overflow: ... self._update_scale(self.overflow) ... return` (skipped)
        skipped.append(bool(overflow) and scaler.dynamic)
        try:
            scaler.update_scale(bool(overflow))
        except Exception as e:  # noqa: BLE001 - DeepSpeed raises a bare Exception at the minimum scale
            error = str(e)
            break
    json.dump({"scales": scales, "skipped": skipped, "final_scale": float(scaler.cur_scale), "error": error},
              sys.stdout)


if __name__ == "__main__":
    main()
