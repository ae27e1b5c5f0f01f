"""upstream_config_verdicts.py — whether DeepSpeed 0.19.8 itself accepts a config value, for
tests/test_upstream_refusals.cpp: every value zerobench refuses as invalid must be refused upstream
too, and every value upstream accepts that zerobench refuses must be refused as "not implemented".

Reads a JSON list of cases on stdin, each {"id": ..., "where": ..., "config": {...}}, and prints one
JSON object {id: {"verdict": "accepts" | "rejects", "error": "<type>: <first line>"}}. Where the
value is checked upstream:
  config      deepspeed.runtime.config.DeepSpeedConfig(config) — the pydantic section models
              (DeepSpeedZeroConfig, DeepSpeedFP16Config, DeepSpeedBF16Config, the offload configs,
              extra="forbid"), the removed-key check, the batch assertions and _do_error_check;
              without a process group it sees a world of one, as zerobench's check does with --nproc 1
  initialize  deepspeed.initialize on a 20-parameter nn.Linear with the client
              torch.optim.AdamW (or, when the config has an "optimizer" section, the optimizer
              DeepSpeed builds from it), one process on the CPU accelerator with Gloo (the checks the engine
              and the ZeRO optimizers make when they are built: pre-scaling, pre-division,
              max_grad_norm in the optimizer parameters)
  adamw       torch.optim.AdamW(params, **config["optimizer"]["params"]) — the optimizer DeepSpeed
              builds from an "optimizer" section of type AdamW with torch_adam (engine.py
              _configure_basic_optimizer), which validates lr, betas, eps and weight_decay and
              takes no other keyword
Owns: nothing zerobench reads; a test helper. Must not: compile any op (the shared-memory
all-reduce deepspeed.comm would build on CPU is replaced by a no-op, as run_deepspeed.py does).
"""
import json
import logging
import os
import socket
import sys


def first_line(exc):
    text = str(exc).strip()
    return type(exc).__name__ + (": " + text.splitlines()[0] if text else "")


def verdict(fn):
    try:
        fn()
        return {"verdict": "accepts"}
    except Exception as exc:  # noqa: BLE001 — any refusal is the verdict
        return {"verdict": "rejects", "error": first_line(exc)}


_dist_ready = False


def initialize(config):
    global _dist_ready
    import torch
    import deepspeed
    import deepspeed.comm.torch  # noqa: F401
    if not _dist_ready:
        sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
                           "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
        deepspeed.init_distributed(dist_backend="gloo", verbose=False)
        _dist_ready = True
    net = torch.nn.Linear(4, 4)
    if "optimizer" in config:  # DeepSpeed builds the optimizer from the section (a client one would replace it)
        deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    else:
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
        deepspeed.initialize(model=net, optimizer=optimizer, config=dict(config, zero_allow_untested_optimizer=True))


def adamw(config):
    import torch
    params = dict(config.get("optimizer", {}).get("params", {}))
    params.pop("torch_adam", None)  # DeepSpeed's own switch, popped before the constructor (engine.py)
    params.pop("adam_w_mode", None)
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], **params)


def main():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    logging.disable(logging.WARNING)
    from deepspeed.runtime.config import DeepSpeedConfig
    cases = json.load(sys.stdin)
    checks = {"config": lambda c: DeepSpeedConfig(c), "initialize": initialize, "adamw": adamw}
    out = {}
    for case in cases:
        check = checks[case["where"]]
        out[case["id"]] = verdict(lambda: check(case["config"]))
    sys.stdout.flush()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
