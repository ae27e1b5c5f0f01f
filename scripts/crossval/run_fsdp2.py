"""run_fsdp2.py — the reference for zerobench's `fsdp2` backend: PyTorch FSDP2
(torch.distributed.fsdp.fully_shard) on CPU with Gloo, as accelerate 1.x prepares a model for
fsdp_version 2 (accelerate/utils/fsdp_utils.py, fsdp2_prepare_model).

Launched by `zerobench crossval` as
  python -m torch.distributed.run --standalone --nproc-per-node W run_fsdp2.py --work DIR

Units: fully_shard on each decoder block, then on the root (embedding, final norm and LM head
together, reshard_after_forward left to PyTorch's default for the root), the unit structure
zerobench's backends use (models::unit_param_specs). Precision (accelerate's
FullyShardedDataParallelPlugin.set_mixed_precision for fsdp_version 2):
  fp32   fp32 model, MixedPrecisionPolicy()
  mixed  bf16-loaded model upcast to fp32 before sharding ("Upcast to fp32 master weights;
         MixedPrecisionPolicy.param_dtype handles compute cast"), MixedPrecisionPolicy(
         param_dtype=bf16, reduce_dtype=bf16 (or the resolved reduce_dtype), output_dtype=bf16)
  low    bf16 model, MixedPrecisionPolicy()
Gradient accumulation as accelerate does for FSDP2: set_requires_gradient_sync(False) on
non-final micro-batches (its no_sync), loss / gradient_accumulation_steps; clipping with
torch.nn.utils.clip_grad_norm_ over the DTensor gradients (accelerator.clip_grad_norm_ ->
_clip_grad_norm_dtensor_aware with one mesh); the norm is read with .full_tensor() as HF
Trainer's .item() on it does.
"""
import math
import os

import torch
import torch.distributed as dist

import common
import model as zbmodel


def make_runner(spec, work):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dist.init_process_group("gloo")
    precision, opts, t = spec["precision"], spec["options"], spec["train"]
    cfg = zbmodel.Config.from_hf_json(os.path.join(work, "weights", "config.json"))
    load_dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    net = zbmodel.LlamaForCausalLM(cfg).to(load_dtype)
    zbmodel.load_weights(net, common.load_weights_file(work))
    policy = MixedPrecisionPolicy()
    if precision == "mixed":
        net = net.to(torch.float32)  # accelerate's upcast of the bf16-loaded parameters
        reduce = torch.float32 if opts.get("reduce_dtype") == "fp32" else torch.bfloat16
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce, output_dtype=torch.bfloat16)
    reshard = opts.get("reshard_after_forward", True)
    for layer in net.model.layers:
        fully_shard(layer, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(net, mp_policy=policy)
    return Fsdp2Runner(net, t)


class Fsdp2Runner:
    name = "PyTorch FSDP2 (fully_shard)"
    version = torch.__version__

    def __init__(self, net, train):
        self.model, self.train = net, train
        b1, b2 = train["betas"]
        self.optimizer = torch.optim.AdamW(net.parameters(), lr=train["lr"], betas=(b1, b2), eps=train["eps"],
                                           weight_decay=train["weight_decay"])
        self.notes = []

    def forward_backward(self, tokens, targets, loss_scale, last_micro_batch):
        self.model.set_requires_gradient_sync(last_micro_batch)
        loss = self.model(tokens, targets)
        (loss / self.train["grad_accum"]).backward()
        return loss.item()

    def optimizer_step(self, lr):
        from torch.distributed.tensor import DTensor
        clip = self.train["grad_clip"]
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else math.inf)
        value = norm.full_tensor().item() if isinstance(norm, DTensor) else norm.item()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(value)

    def model_state_bytes(self):
        """params = each parameter's padded local shard storage (FSDPParam._sharded_param_data;
        ranks may differ) plus any unsharded/all-gather output still allocated; grads = the
        local gradient storages (deduplicated: gradients may be views of one reduce-scatter
        output); optimizer = AdamW exp_avg + exp_avg_sq (unpadded local shapes), `step` scalars
        separately."""
        from torch.distributed.tensor import DTensor
        seen = set()

        def held(t):
            if t is None:
                return 0
            if isinstance(t, DTensor):
                t = t.to_local()
            key = t.untyped_storage().data_ptr()
            n = common.storage_bytes(t)
            if n == 0 or key in seen:
                return 0
            seen.add(key)
            return n

        params = grads = 0
        for m in self.model.modules():
            state = getattr(m, "_get_fsdp_state", None)
            group = state()._fsdp_param_group if state else None
            if group is None:
                continue
            for fp in group.fsdp_params:
                params += held(fp._sharded_param_data)
                for out in getattr(fp, "all_gather_outputs", []):
                    params += held(out)
                params += held(getattr(fp, "_unsharded_param", None))
        for p in self.model.parameters():
            grads += held(p.grad)
        opt = step_counters = 0
        for s in self.optimizer.state.values():
            opt += held(s["exp_avg"]) + held(s["exp_avg_sq"])
            step_counters += held(s["step"])
        return {"bytes": {"params": params, "master_params": 0, "grads": grads, "optimizer": opt,
                          "optimizer_step_counters": step_counters}}


if __name__ == "__main__":
    common.run(make_runner)
