"""run_fsdp1.py — the reference for zerobench's `fsdp` backend: PyTorch FSDP1
(torch.distributed.fsdp.FullyShardedDataParallel) on CPU with Gloo or on CUDA with NCCL, set up
as accelerate's FSDP plugin sets it up (accelerate/accelerator.py, prepare_model for
DistributedType.FSDP).

Launched by `zerobench crossval` as
  python -m torch.distributed.run --standalone --nproc-per-node W run_fsdp1.py --work DIR --device cpu|cuda

Precision recipes (accelerate >= 0.30 with a model loaded in bf16, the blog's setting):
  fp32   fp32 model, no MixedPrecision
  mixed  bf16-loaded model; MixedPrecision(param_dtype=bf16, reduce_dtype=bf16 (or the
         resolved reduce_dtype), buffer_dtype=bf16) (accelerate utils/dataclasses.py,
         FullyShardedDataParallelPlugin.set_mixed_precision); after wrapping, every
         FlatParameter is upcast to fp32 and _handle._orig_param_dtype set to fp32 — the loop in
         accelerator.py "In the event the model had been loaded in low precision, but mixed
         precision had also been activated ..."
  low    bf16 model, no MixedPrecision (accelerate with mixed_precision "no")
  fp16   fp32 model; MixedPrecision(param_dtype=fp16, reduce_dtype=fp16 (or the resolved
         reduce_dtype), buffer_dtype=fp16) (set_mixed_precision("fp16")) and accelerate's
         ShardedGradScaler with torch's defaults (common.AmpScaler: scale(loss / gas), unscale_
         before clip_grad_norm_, step skipped on found_inf, update)
Wrapping: transformer_auto_wrap_policy on the decoder block (accelerate's
TRANSFORMER_BASED_WRAP), no policy (NO_WRAP: the root is the only unit) or
size_based_auto_wrap_policy(min_num_params) (SIZE_BASED_WRAP), as options.auto_wrap_policy says; device_id=the rank's device (accelerate 1.15 accelerator.py
prepare_model passes "device_id": self.device; the model is built and loaded on the CPU and FSDP
moves it there), use_orig_params=True (accelerate's default,
FullyShardedDataParallelPlugin.use_orig_params; zerobench's fsdp engine takes its norm over the
original parameters' gradient views), the resolved sharding strategy, backward/forward
prefetch, limit_all_gathers and, on CUDA, sync_module_states as zerobench resolved it (FSDP1
refuses it for CPU parameters: off on CPU; its broadcast is setup traffic, not compared).
CPU offload: options.offload_params (accelerate's fsdp_offload_params) passes
cpu_offload=CPUOffload(offload_params=True) (accelerate utils/dataclasses.py
FullyShardedDataParallelPlugin.cpu_offload). FSDP1 pins the host shards and gradients
(_flat_param.py init_flat_param_attributes: `.pin_memory()`), which needs a CUDA driver: the
offload reference runs with --device cuda only (on a GPU); on CPU this script says so
and exits 2. Its model-state bytes are then split by where the storage lives: the categories on
the device, and "host": {the same categories, pinned}.
Gradient accumulation as accelerate does it: non-final micro-batches under model.no_sync()
(every micro-batch synced with sync_each_batch), loss / gradient_accumulation_steps before
backward; clipping through the root's clip_grad_norm_ (accelerator.clip_grad_norm_ for FSDP1);
the optimizer HF Trainer builds by default, torch.optim.AdamW(fused=True) over the original
parameters (transformers training_args.py default_optim = "adamw_torch_fused").
"""
import functools
import math
import os
import sys

import torch
import torch.distributed as dist

import common
import model as zbmodel


def make_runner(spec, work, device):
    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy

    precision, opts, t = spec["precision"], spec["options"], spec["train"]
    offload = bool(opts.get("offload_params", False))
    if offload and device.kind != "cuda":
        # _flat_param.py init_flat_param_attributes pins _local_shard and _cpu_grad: no CUDA driver, no run.
        print("run_fsdp1.py: offload_params true needs --device cuda (FSDP1 CPUOffload pins host memory)", file=sys.stderr)
        raise SystemExit(2)
    dist.init_process_group(device.backend)
    cfg = zbmodel.Config.from_hf_json(os.path.join(work, "weights", "config.json"))
    load_dtype = torch.float32 if precision in ("fp32", "fp16") else torch.bfloat16
    net = zbmodel.LlamaForCausalLM(cfg).to(load_dtype)
    zbmodel.load_weights(net, common.load_weights_file(work))

    mixed = None
    if precision == "mixed":
        reduce = torch.float32 if opts.get("reduce_dtype") == "fp32" else torch.bfloat16
        mixed = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=reduce, buffer_dtype=torch.bfloat16)
    if precision == "fp16":
        reduce = torch.float32 if opts.get("reduce_dtype") == "fp32" else torch.float16
        mixed = MixedPrecision(param_dtype=torch.float16, reduce_dtype=reduce, buffer_dtype=torch.float16)
    # accelerate's HYBRID_SHARD_ZERO2 (number 5) is torch's ShardingStrategy._HYBRID_SHARD_ZERO2.
    name = opts.get("sharding_strategy", "FULL_SHARD")
    strategy = ShardingStrategy["_HYBRID_SHARD_ZERO2" if name == "HYBRID_SHARD_ZERO2" else name]
    prefetch = {"BACKWARD_PRE": BackwardPrefetch.BACKWARD_PRE, "BACKWARD_POST": BackwardPrefetch.BACKWARD_POST,
                "NO_PREFETCH": None}[opts.get("backward_prefetch", "BACKWARD_PRE")]
    kwargs = {}
    if strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2):
        from torch.distributed.device_mesh import init_device_mesh
        shard = opts.get("hybrid_shard_group_size") or int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
        kwargs["device_mesh"] = init_device_mesh(device.kind, (dist.get_world_size() // shard, shard))
    # accelerate's fsdp_auto_wrap_policy (utils/dataclasses.py set_auto_wrap_policy): NO_WRAP and
    # SIZE_BASED_WRAP with min_num_params <= 0 pass no policy (the root is the only unit).
    policy_name = opts.get("auto_wrap_policy", "TRANSFORMER_BASED_WRAP")
    if policy_name == "TRANSFORMER_BASED_WRAP":
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={zbmodel.DecoderLayer})
    elif policy_name == "SIZE_BASED_WRAP" and int(opts.get("min_num_params", 0)) > 0:
        policy = functools.partial(size_based_auto_wrap_policy, min_num_params=int(opts["min_num_params"]))
    elif policy_name in ("NO_WRAP", "SIZE_BASED_WRAP"):
        policy = None
    else:
        raise SystemExit(f"run_fsdp1.py: auto_wrap_policy {policy_name!r} is not one accelerate offers")
    wrapped = FSDP(net,
                   sharding_strategy=strategy,
                   auto_wrap_policy=policy,
                   mixed_precision=mixed,
                   backward_prefetch=prefetch,
                   forward_prefetch=bool(opts.get("forward_prefetch", False)),
                   limit_all_gathers=bool(opts.get("limit_all_gathers", True)),
                   # FSDP1 refuses sync_module_states with CPU parameters (_init_utils.py,
                   # _check_module_states_for_sync_module_states); every rank loads the same
                   # weights, so on CPU only the init-time broadcast is missing.
                   sync_module_states=device.kind == "cuda" and bool(opts.get("sync_module_states", True)),
                   use_orig_params=True,
                   cpu_offload=CPUOffload(offload_params=offload),
                   device_id=device.torch,
                   **kwargs)
    check_setup(wrapped, FSDP, strategy, mixed, device, offload)
    # zerobench runs a unit per decoder block plus the root, or the root alone (backends/fsdp/fsdp_wrap.hpp).
    units = FSDP.fsdp_modules(wrapped)
    want = {1} if policy is None else {cfg.layers + 1} if policy_name == "TRANSFORMER_BASED_WRAP" else {1, cfg.layers + 1}
    if len(units) not in want:
        raise SystemExit(f"run_fsdp1.py: {policy_name} made {len(units)} FSDP units, expected {sorted(want)}")
    if precision == "mixed":  # accelerate's upcast of the bf16-loaded flat parameters
        for m in FSDP.fsdp_modules(wrapped):
            if m._has_params and m._flat_param.dtype != torch.float32 and m._flat_param.requires_grad:
                m._flat_param.data = m._flat_param.data.to(torch.float32)
                m._handle._orig_param_dtype = torch.float32
    mode = common.activation_checkpointing_mode(t, opts)  # opts: accelerate's fsdp_activation_checkpointing
    if mode != "none":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)
        # torchtitan's selective-layer:N (_apply_layer_sac): the blocks counted 1, 2, ... and the
        # one whose count is a multiple of N wrapped (N = 0: every block); full: every block.
        # selective-op (_apply_op_sac): every block, under torchtitan's save-list policy.
        blocks = [m for m in wrapped.modules() if isinstance(m, zbmodel.DecoderLayer)]
        if mode == "selective-op":
            chosen = {id(b) for b in blocks}
            op_sac = {"context_fn": common.op_sac_context_fn}
        else:
            chosen = {id(blocks[i]) for i in zbmodel.checkpointed_blocks(len(blocks), mode)}
            op_sac = {}
        apply_activation_checkpointing(
            wrapped, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT,
                                                             **op_sac),
            check_fn=lambda m: id(m) in chosen)
        wrapped_blocks = sum(1 for m in wrapped.modules() if type(m).__name__ == "CheckpointWrapper")
        if wrapped_blocks != len(chosen):
            raise SystemExit(f"run_fsdp1.py: {wrapped_blocks} blocks checkpoint-wrapped, expected {len(chosen)} ({mode})")
    return Fsdp1Runner(wrapped, t, FSDP, device)


def check_setup(wrapped, fsdp_cls, strategy, mixed, device, offload=False):
    """Fails unless every FSDP instance runs what zerobench was asked for: the sharding strategy
    (FSDP1 itself switches every strategy to NO_SHARD in a world of one: _init_utils.py
    _init_core_state; zerobench's fsdp engine does the same), use_orig_params, the
    MixedPrecision dtypes, one shard group of the expected size, and every FlatParameter on the
    rank's device."""
    from torch.distributed.fsdp import ShardingStrategy
    world = dist.get_world_size()
    expected = ShardingStrategy.NO_SHARD if world == 1 else strategy
    modules = fsdp_cls.fsdp_modules(wrapped)
    if not modules:
        raise SystemExit("run_fsdp1.py: no FullyShardedDataParallel instance after wrapping")
    for m in modules:
        if m.cpu_offload.offload_params != offload:
            raise SystemExit(f"run_fsdp1.py: CPUOffload is {m.cpu_offload}, asked for offload_params={offload}")
        if m.sharding_strategy != expected:
            raise SystemExit(f"run_fsdp1.py: an FSDP instance runs {m.sharding_strategy.name}, asked for {expected.name}")
        if not m._use_orig_params:
            raise SystemExit("run_fsdp1.py: use_orig_params is off")
        mp = m.mixed_precision
        want = mixed or type(mp)()
        if (mp.param_dtype, mp.reduce_dtype, mp.buffer_dtype) != (want.param_dtype, want.reduce_dtype, want.buffer_dtype):
            raise SystemExit(f"run_fsdp1.py: MixedPrecision is {mp}, asked for {want}")
        if expected in (ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP) and m.process_group.size() != world:
            raise SystemExit(f"run_fsdp1.py: shard group of {m.process_group.size()} ranks, expected {world}")
        # With offload the sharded FlatParameter lives on the CPU (_init_param_handle_from_params: flat_param_to(cpu)).
        want_device = torch.device("cpu") if offload else device.torch
        if m._has_params and m._flat_param.device != want_device:
            raise SystemExit(f"run_fsdp1.py: a FlatParameter is on {m._flat_param.device}, asked for {want_device}")


class Fsdp1Runner:
    name = "PyTorch FSDP1 (FullyShardedDataParallel)"
    version = torch.__version__

    def __init__(self, wrapped, train, fsdp_cls, device):
        self.model, self.train, self.fsdp_cls = wrapped, train, fsdp_cls
        # Built after accelerate's upcast (HF Trainer creates the optimizer after prepare_model
        # for FSDP); AdamW's states are created at the first step, over the sharded views.
        self.optimizer = common.adamw(wrapped.parameters(), train)
        self.sync_each_batch = bool(train.get("sync_each_batch", False))
        self.device = device
        self.amp = common.AmpScaler(device) if any(
            m.mixed_precision.param_dtype == torch.float16 for m in fsdp_cls.fsdp_modules(wrapped)) else None
        self.notes = [f"use_orig_params=True and {common.adamw_name(train)}" +
                      (": accelerate's and HF Trainer's defaults" if train.get("adamw_impl", "fused") == "fused" else ""),
                      f"device_id={device.torch}, process group {device.backend}"]
        self.scheduler = common.hf_scheduler(train, self.optimizer)  # HF Trainer's, after its optimizer
        if self.scheduler is not None:
            self.notes.append(common.hf_scheduler_note(train))
        if device.kind == "cpu":
            self.notes.append("sync_module_states=False: FSDP1 refuses it for CPU parameters; every rank loads the same "
                              "weights")

    def forward_backward(self, tokens, targets, loss_scale, last_micro_batch, position_ids=None):
        def run():
            return common.accelerate_backward(self.model, self.amp, tokens, targets, position_ids, loss_scale,
                                              self.train["grad_accum"])
        if last_micro_batch or self.sync_each_batch:  # GradientAccumulationPlugin(sync_each_batch)
            return run()
        with self.model.no_sync():  # accelerate's accumulate() on non-final micro-batches
            return run()

    def optimizer_step(self, lr):
        clip = self.train["grad_clip"]
        if self.amp:
            self.amp.unscale_(self.optimizer)  # accelerator.clip_grad_norm_ unscales first
        fp32_norm = self._fp32_norm_if_low_precision()
        # No clipping still needs the norm zerobench reports: max_norm=inf multiplies by 1.0.
        norm = self.model.clip_grad_norm_(clip if clip > 0 else math.inf)
        if self.scheduler is None:  # else transformers' scheduler set the group lr (common.hf_scheduler)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.last_lr = common.group_lr(self.optimizer)
        if self.amp:
            self.amp.step(self.optimizer)
        else:
            self.optimizer.step()
        common.step_hf_scheduler(self.scheduler, self.amp)
        self.optimizer.zero_grad(set_to_none=True)  # HF Trainer's model.zero_grad()
        return fp32_norm if fp32_norm is not None else float(norm)

    def _fp32_norm_if_low_precision(self):
        """With bf16 gradients clip_grad_norm_ clips with its fp32 total norm but returns it cast
        to bf16 ("the 'largest' dtype across all parameters/gradients"). The fp32 value, the one
        zerobench reports, is recomputed here with the same arithmetic (_get_grad_norm over the
        original parameters' sharded gradient views: fp32 norm per gradient, norm of the stack,
        squared, all-reduced, ** 0.5); the all-reduce is bookkeeping and not counted."""
        # clip_grad_norm_'s order: handle by handle (_all_handles), each FlatParameter's _params.
        grads = [p.grad for handle in self.model._all_handles for p in handle.flat_param._params if p.grad is not None]
        if not grads or all(g.dtype == torch.float32 for g in grads):
            return None
        norms = torch.stack([torch.linalg.vector_norm(g.detach(), 2, dtype=torch.float32) for g in grads])
        # With CPUOffload the gradients are on the host: the all-reduce runs on the device, as
        # clip_grad_norm_'s does (_get_grad_norm(...).to(compute_device)).
        total = torch.linalg.vector_norm(norms, 2, dtype=torch.float32).to(self.device.torch) ** 2.0
        counter = common.comm_counter.COUNTER
        active, counter.active = counter.active, False
        dist.all_reduce(total)
        counter.active = active
        return float(total ** 0.5)

    def model_state_bytes(self):
        """Storage held now, per zerobench's categories: params = each FlatParameter's local shard
        plus any unsharded / low-precision buffer still allocated, grads = the sharded .grad,
        optimizer = AdamW exp_avg + exp_avg_sq (one pair per original parameter with a piece in
        this rank's shard: the others have no gradient, _use_sharded_grad_views); AdamW's
        per-tensor `step` scalars separately."""
        # With CPUOffload a tensor on the CPU of a CUDA run is host memory (_local_shard, _cpu_grad
        # and AdamW's states); every other run keeps the one set of categories.
        offloaded = self.device.kind == "cuda" and any(
            m.cpu_offload.offload_params for m in self.fsdp_cls.fsdp_modules(self.model))
        cats = ("params", "master_params", "grads", "optimizer", "buffers")
        dev, host = dict.fromkeys(cats, 0), dict.fromkeys(cats, 0)
        pinned = []

        def where(t, fsdp_buffer=True):
            if offloaded and t is not None and t.device.type == "cpu":
                if fsdp_buffer:  # FSDP pins _local_shard and _cpu_grad; AdamW's zeros_like states are pageable
                    pinned.append(t.is_pinned())
                return host
            return dev
        held_once = common.storage_counter()
        grads_once = common.storage_counter()
        detail = {"flat_params": []}
        for m in self.fsdp_cls.fsdp_modules(self.model):
            if not m._has_params:
                continue
            fp = m._flat_param
            held = 0
            for name in ("_local_shard", "_full_param_padded", "_mp_shard", "_full_prec_full_param_padded"):
                t = getattr(fp, name, None)
                n = held_once(t)
                where(t)["params"] += n
                held += n
            # flat_param.grad is _cpu_grad with offload (prepare_gradient_for_optim); counted once.
            for t in (fp.grad, getattr(fp, "_cpu_grad", None)):
                where(t)["grads"] += grads_once(t)
            detail["flat_params"].append({"numel": fp.numel(), "dtype": str(fp.dtype), "held_bytes": held,
                                          "grad_bytes": common.storage_bytes(fp.grad)})
        opt_step = 0
        for state in self.optimizer.state.values():
            for name in ("exp_avg", "exp_avg_sq"):
                where(state[name], fsdp_buffer=False)["optimizer"] += common.storage_bytes(state[name])
            opt_step += common.storage_bytes(state["step"])
        dev["buffers"] = common.module_buffer_bytes(self.model, held_once)
        out = dict(dev, optimizer_step_counters=opt_step)
        if offloaded:
            out["host"] = dict(host, pinned=bool(pinned) and all(pinned))
        return {"bytes": out, "detail": detail}


if __name__ == "__main__":
    common.run(make_runner)
