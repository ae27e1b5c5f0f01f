"""common.py — what every crossval reference runner shares: the work directory zerobench wrote
(spec.json, weights/ as an HF Llama safetensors checkpoint, batches.safetensors), the device and
process-group backend crossval gives (--device cpu: Gloo; --device cuda: NCCL, one GPU per rank,
torch.cuda.set_device(LOCAL_RANK) as accelerate's PartialState.set_device does, state.py), the lr schedule, the
training loop with zerobench's step boundaries, per-step collective counts, memory and timing,
and writing one JSON per rank.

Weights and batches are read to the CPU (safetensors) and moved: batches to the rank's device up
front; the model by each runner, as its framework places it (FSDP1 device_id, FSDP2 the mesh's
device, DeepSpeed zero.Init on the accelerator's current device). On CUDA the step time ends
after torch.cuda.synchronize(), and the GPU peak (torch.cuda.max_memory_allocated) is taken from
zerobench's first measured step on (bench/run/trainer.cpp peak_from_step).

Owns: the loop's semantics, which match bench/run/trainer.cpp: per optimizer step, grad_accum
micro-batches (rank r's micro-batch a of step s is the batch zerobench's DataSource gives it),
the loss scaled by 1/grad_accum before backward, then clip + AdamW at lr_at(step); the step time
covers forward, backward and the optimizer (data are loaded up front); model-state bytes are
taken at the end of the last micro-batch's backward of the last step. Must not: know a
framework — a runner supplies forward_backward / optimizer_step / model_state_bytes.

Per-document batches (--batching pad|pack): batches.safetensors carries each micro-batch's
position_ids and document_ids too; the model gets position_ids (model.py: RoPE at the positions,
the block-diagonal causal mask HF derives from them, checked here to be zerobench's document
partition) and returns the summed cross-entropy of the label tokens; the step's label count over
every rank and micro-batch (HF Trainer's num_items_in_batch, gathered across devices with
average_tokens_across_devices) scales it before backward by world / labels, as bench/run/trainer.cpp
does (HF: loss / num_items_in_batch, then * num_processes, and no 1 / gradient_accumulation_steps;
DeepSpeed's backward with scale_wrt_gas=False), and the step's loss reported is the mean over its
label tokens.

The process exits with os._exit(0) after a barrier and destroy_process_group(): torch 2.11 +
Gloo can abort at interpreter exit while a Gloo worker thread releases a finished all-gather's
tensors (../../shared/UPSTREAM_ON_CPU.md); every result is on disk by then.
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

import comm_counter


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", required=True, help="crossval work directory (spec.json, weights/, batches.safetensors)")
    p.add_argument("--device", default="cpu", help="cpu (Gloo) or cuda (NCCL, one GPU per rank); default cpu")
    return p.parse_args()


_usage_line = None  # the last usage_error line, for failure_line


def usage_error(message):
    """Bad input: one line naming the bad value on stderr, exit 2 (zerobench's convention)."""
    global _usage_line
    _usage_line = f"{os.path.basename(sys.argv[0])}: {message}"
    print(_usage_line, file=sys.stderr, flush=True)
    sys.exit(2)


def failure_line(exc):
    """The one line that says why this rank failed: a SystemExit's message (a runner's refusal),
    the usage_error line before a sys.exit(2), else the exception's type and first message line;
    None for an exit without a message."""
    if isinstance(exc, SystemExit):
        if isinstance(exc.code, str):
            lines = exc.code.strip().splitlines()
            return lines[-1] if lines else None
        return _usage_line if exc.code not in (0, None) else None
    text = str(exc).strip()
    return type(exc).__name__ + (": " + text.splitlines()[0] if text else "")


def record_failure(work, exc):
    """Writes failure_line(exc) to <work>/upstream/error_rank<RANK>.txt: torchrun reports a failed
    child only as ChildFailedError, and crossval puts this line in its own message."""
    line = failure_line(exc)
    if not line:
        return
    try:
        out_dir = os.path.join(work, "upstream")
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, f"error_rank{os.environ.get('RANK', '0')}.txt"), "w") as f:
            f.write(line + "\n")
    except OSError:
        pass  # the log still has the traceback


class Device:
    """Where this rank computes and how it communicates: kind "cpu" | "cuda", torch (the
    torch.device), backend ("gloo" | "nccl": the process group's, and DeepSpeed's dist_backend)."""

    def __init__(self, kind, index=None):
        self.kind = kind
        self.torch = torch.device(kind) if index is None else torch.device(kind, index)
        self.backend = "nccl" if kind == "cuda" else "gloo"

    def synchronize(self):
        if self.kind == "cuda":
            torch.cuda.synchronize(self.torch)

    def describe(self):
        name = torch.cuda.get_device_name(self.torch) if self.kind == "cuda" else "cpu"
        return {"kind": self.kind, "index": self.torch.index, "backend": self.backend, "name": name}


def setup_device(kind):
    """The rank's Device, checked before any process group exists: cuda needs torch.cuda and one
    GPU per rank on this machine (NCCL cannot run two ranks on one GPU: "Duplicate GPU
    detected"); then torch.cuda.set_device(LOCAL_RANK). Refusals exit 2 with one line."""
    if kind == "cpu":
        return Device("cpu")
    if kind != "cuda":
        usage_error(f"--device must be cpu or cuda, got '{kind}'")
    if not torch.cuda.is_available():
        usage_error(f"--device cuda: torch.cuda is not available (torch {torch.__version__}, CUDA "
                    f"{torch.version.cuda or 'none'}, {torch.cuda.device_count()} visible GPU(s))")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    count = torch.cuda.device_count()
    if local_world > count:
        usage_error(f"--device cuda: {local_world} ranks on this machine (LOCAL_WORLD_SIZE) but {count} visible "
                    f"GPU(s), and NCCL cannot run two ranks on one GPU")
    torch.cuda.set_device(local_rank)
    return Device("cuda", local_rank)


def load_spec(work):
    with open(os.path.join(work, "spec.json")) as f:
        return json.load(f)


def lr_at(train, step):
    """backends/common/optim.cpp lr_at for zerobench's own schedule, line for line: linear warm-up,
    then constant or cosine from lr to min_lr_ratio * lr at the last step. (A DeepSpeed scheduler
    section is never computed here: run_deepspeed.py lets DeepSpeed build and step it.)"""
    lr, warm = train["lr"], train["lr_warmup_steps"]
    if train["lr_schedule"].startswith("hf:"):  # transformers' scheduler owns the lr (hf_scheduler)
        return None
    if train["lr_schedule"] == "none":  # a DeepSpeed scheduler section without a type: the optimizer's lr
        return lr
    if warm > 0 and step < warm:
        return lr * float(step + 1) / float(warm)
    if train["lr_schedule"] == "constant":
        return lr
    decay_steps = max(1, train["steps"] - warm - 1)
    progress = min(1.0, float(step - warm) / float(decay_steps))
    min_lr = train["min_lr_ratio"] * lr
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def hf_scheduler(train, optimizer):
    """For an --lr-scheduler-type run (lr_schedule "hf:NAME"): the scheduler HF's Trainer builds
    (Trainer.create_scheduler -> transformers.get_scheduler(lr_scheduler_type, optimizer,
    num_warmup_steps=args.get_warmup_steps(num_training_steps), num_training_steps,
    scheduler_specific_kwargs=lr_scheduler_kwargs)), --min-lr-ratio as the min-lr types'
    min_lr_rate. The Trainer steps it after every optimizer step that was not skipped
    (step_hf_scheduler). None for any other schedule."""
    if not train["lr_schedule"].startswith("hf:"):
        return None
    from transformers import get_scheduler
    name = train["lr_schedule"][3:]
    kwargs = {"min_lr_rate": train["min_lr_ratio"]} if name in ("cosine_with_min_lr", "cosine_warmup_with_min_lr") else None
    return get_scheduler(name, optimizer, num_warmup_steps=train["lr_warmup_steps"],
                         num_training_steps=train["steps"], scheduler_specific_kwargs=kwargs)


def hf_scheduler_note(train):
    import transformers
    return (f"lr: transformers {transformers.__version__} get_scheduler('{train['lr_schedule'][3:]}', "
            f"num_warmup_steps={train['lr_warmup_steps']}, num_training_steps={train['steps']}), stepped after "
            "every applied optimizer step as HF's Trainer steps it")


def step_hf_scheduler(scheduler, amp):
    """HF Trainer's `if not accelerator.optimizer_step_was_skipped: lr_scheduler.step()`."""
    if scheduler is not None and not (amp is not None and amp.last is not None and amp.last["skipped"]):
        scheduler.step()


def adamw_kwargs(train):
    """torch.optim.AdamW's implementation keywords for zerobench's config.train.adamw_impl
    (config/adamw_impl.hpp): fused=True (HF Trainer's default), nothing (torch's foreach=None),
    foreach=True, or foreach=False (the for-loop)."""
    impl = train.get("adamw_impl", "fused")
    kwargs = {"fused": {"fused": True}, "default": {}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}
    if impl not in kwargs:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: adamw_impl {impl!r} is not one of {sorted(kwargs)}")
    return kwargs[impl]


def adamw_name(train):
    """The constructor call adamw() makes, for notes: "torch.optim.AdamW(fused=True)", ..."""
    kw = adamw_kwargs(train)
    return "torch.optim.AdamW(" + (", ".join(f"{k}={v}" for k, v in kw.items()) or "foreach=None") + ")"


def adamw(params, train):
    """The optimizer zerobench's engines step (backends/common/optim.hpp): torch.optim.AdamW with the
    run's lr, betas, eps, weight decay and implementation."""
    b1, b2 = train["betas"]
    return torch.optim.AdamW(params, lr=train["lr"], betas=(b1, b2), eps=train["eps"],
                             weight_decay=train["weight_decay"], **adamw_kwargs(train))


def group_lr(optimizer):
    """The lr the optimizer's next step() uses: every param group's "lr" (one value; zerobench steps
    every parameter at one lr, so groups that differ are an error naming them)."""
    lrs = [float(g["lr"]) for g in optimizer.param_groups]
    if not lrs or any(v != lrs[0] for v in lrs):
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: the optimizer's param groups have lrs {lrs}; "
                         "zerobench steps every parameter at one lr")
    return lrs[0]


def activation_checkpointing_mode(train, opts):
    """zerobench's resolved --activation-checkpointing (none | full | selective-layer:N); a
    framework file's boolean (accelerate's fsdp_activation_checkpointing) is full."""
    mode = train.get("activation_checkpointing_mode") or ("full" if train.get("activation_checkpointing") else "none")
    if mode == "none" and opts.get("activation_checkpointing"):
        mode = "full"
    return mode


def load_weights_file(work):
    """HF name -> fp32 (or stored dtype) tensor, from weights/ (single file or sharded index)."""
    from safetensors.torch import load_file
    wdir = os.path.join(work, "weights")
    index = os.path.join(wdir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        state = {}
        for name in files:
            state.update(load_file(os.path.join(wdir, name)))
        return state
    return load_file(os.path.join(wdir, "model.safetensors"))


def load_batches(work, spec, rank):
    """[step][micro] -> (tokens, targets) for this rank, as zerobench's trainer builds them; with
    per-document batches (--batching pad|pack) (tokens, targets, position_ids, document_ids)."""
    from safetensors.torch import load_file
    all_batches = load_file(os.path.join(work, "batches.safetensors"))
    t = spec["train"]
    out = []
    for s in range(t["steps"]):
        row = []
        for a in range(t["grad_accum"]):
            key = f"step{s}.micro{a}.rank{rank}"
            batch = (all_batches[key + ".tokens"], all_batches[key + ".targets"])
            if key + ".position_ids" in all_batches:
                batch += (all_batches[key + ".position_ids"], all_batches[key + ".document_ids"])
                check_document_partition(key, batch[2], batch[3])
            row.append(batch)
        out.append(row)
    return out


def check_document_partition(key, position_ids, document_ids):
    """The sequences HF finds in position_ids (model.packed_sequence_ids) must be the documents
    zerobench's mask is built from (document_ids: a block wherever the id changes), else the two
    sides would attend differently; a mismatch stops the runner naming the batch and row."""
    import model as zbmodel
    seq = zbmodel.packed_sequence_ids(position_ids)
    starts_hf = seq[:, 1:] != seq[:, :-1]
    starts_zb = document_ids[:, 1:] != document_ids[:, :-1]
    bad = (starts_hf != starts_zb).any(dim=1).nonzero().flatten().tolist()
    if bad:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: {key} row {bad[0]}: the sequences position_ids "
                         "delimit (HF find_packed_sequence_indices) are not the batch's documents")


def batch_sha256(row):
    """SHA-256 of one step's input on this rank: every micro-batch's tokens, targets and (per-document
    batches) document_ids, their int64 bytes in order — bench/run/trainer.cpp's StepRecord::batch_sha256
    of the same step."""
    import hashlib
    h = hashlib.sha256()
    for batch in row:
        for t in batch[:2] + batch[3:4]:
            h.update(t.detach().to("cpu").contiguous().numpy().tobytes())
    return h.hexdigest()


def step_label_counts(rows, counter):
    """Per step, the label tokens (targets other than -100) of every rank's micro-batches: this
    rank's count all-reduced (HF Trainer's num_items_in_batch, accelerator.gather(...).sum(); an
    uncounted bookkeeping all-reduce as bench/run/trainer.cpp's), as floats."""
    local = torch.tensor([float(sum(int(b[1].ne(-100).sum()) for b in row)) for row in rows], dtype=torch.float64)
    active, counter.active = counter.active, False
    dist.all_reduce(local)
    counter.active = active
    return local.tolist()


def storage_bytes(t):
    """Bytes a tensor's storage holds now (0 once FSDP/DeepSpeed freed it with resize_(0))."""
    if t is None:
        return 0
    return t.untyped_storage().nbytes()


def storage_counter():
    """Returns held(t): the bytes t's storage holds now, counted the first time that storage is
    seen and 0 after (views and aliases of one buffer count once); None counts 0 and a DTensor
    counts its local shard."""
    from torch.distributed.tensor import DTensor
    seen = set()

    def held(t):
        if t is None:
            return 0
        if isinstance(t, DTensor):
            t = t.to_local()
        key = t.untyped_storage().data_ptr()
        n = storage_bytes(t)
        if n == 0 or key in seen:
            return 0
        seen.add(key)
        return n

    return held


def finite_or_text(value):
    """JSON has no NaN or Infinity (Python would write the invalid literals): a non-finite float
    becomes "nan" / "inf" / "-inf", which bench/crossval/crossval_compare.cpp reads back as non-finite and
    counts as a disagreement."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: finite_or_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_text(v) for v in value]
    return value


def module_buffer_bytes(module, held):
    """Registered module buffers (nn.Module.buffers()), counted once per storage: the reference
    model registers none (RoPE tables are computed per call, scripts/crossval/model.py), and
    FSDP1 / FSDP2 keep no persistent communication buffer (they allocate one per collective),
    so zerobench's `buffers` category is compared with what is measured here."""
    return sum(held(b) for b in module.buffers())


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def setup_threads(spec):
    torch.set_num_threads(max(1, int(spec["threads"])))


def peak_from_step(train):
    """bench/run/trainer.cpp's peak window: from the first measured step, never the first step (the
    trace-recording step, first-use allocations) unless it is the only one."""
    return max(train["warmup"], 1 if train["steps"] > 1 else 0)


class AmpScaler:
    """accelerate's fp16 loss scaling with FSDP/FSDP2 (accelerator.py: `self.scaler =
    ShardedGradScaler(**kwargs)`, no GradScalerKwargs: torch's defaults), as its calls run it:
    accelerator.backward -> scaler.scale(loss / gas).backward(); accelerator.clip_grad_norm_ ->
    unscale_gradients() -> scaler.unscale_(optimizer) before the norm; AcceleratedOptimizer.step ->
    scaler.step(optimizer) (skipped on found_inf), scaler.update(), and `step_was_skipped` =
    scale after < scale before (the scheduler does not step then). `last` is the step's record,
    zerobench's steps[j].loss_scale."""

    def __init__(self, device):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        self.scaler = ShardedGradScaler(device=device.kind)
        self.last = None

    def backward(self, loss, grad_accum):
        self.scaler.scale(loss / grad_accum).backward()

    def unscale_(self, optimizer):
        self._before = float(self.scaler.get_scale())
        self.scaler.unscale_(optimizer)

    def step(self, optimizer):
        # torch.optim.AdamW(fused=True) has _step_supports_amp_scaling: GradScaler.step then hands it
        # found_inf, which ShardedGradScaler makes of shape [1] (unscale_: torch.full((1,), ...)) while
        # the fused kernel's step counters have shape [] -> "output with shape [] doesn't match the
        # broadcast shape [1]" (pytorch/pytorch#140514, open). With unscale_ already done the fused
        # path would only skip the update on found_inf; _maybe_opt_step skips the same step.
        optimizer._step_supports_amp_scaling = False
        state = self.scaler._per_optimizer_states[id(optimizer)]
        overflow = bool(sum(v.item() for v in state["found_inf_per_device"].values()))
        self.scaler.step(optimizer)
        self.scaler.update()
        after = float(self.scaler.get_scale())
        self.last = {"kind": "grad_scaler", "scale": self._before, "overflow": overflow,
                     "skipped": after < self._before, "next_scale": after}


def run(make_runner):
    """Drives `make_runner(spec, work, device)` -> runner through spec['train']['steps'] steps and
    writes <work>/upstream/rank<r>.json. The runner initialises the process group with
    device.backend (some frameworks insist on doing it themselves), puts the model on
    device.torch as its framework does, and exposes:
      name, version                       what ran (e.g. "torch FSDP1", torch.__version__)
      forward_backward(tokens, targets, loss_scale, last_micro_batch, position_ids=None) -> float loss
                                          (unscaled); with position_ids (per-document batches) the
                                          model's summed loss, backward on loss * loss_scale
      optimizer_step(lr) -> float grad norm before clipping; sets last_lr, the lr its optimizer
                                          step used (read from the param groups at step time; `lr` is
                                          the schedule's value unless the framework owns the schedule)
      model_state_bytes() -> {category: bytes} and optional details
      notes (list of str)"""
    args = parse_args()
    try:
        _train(make_runner, args)
    except BaseException as exc:  # recorded for crossval's message, then raised as it was
        record_failure(args.work, exc)
        raise


def _train(make_runner, args):
    device = setup_device(args.device)
    work = args.work
    spec = load_spec(work)
    setup_threads(spec)
    counter = comm_counter.install()  # before any framework binds torch.distributed functions
    counter.active = True
    runner = make_runner(spec, work, device)
    counter.active = False
    setup_comm = counter.snapshot()  # what the framework communicated while it was set up
    rank = dist.get_rank()
    rows = load_batches(work, spec, rank)
    hashes = [batch_sha256(row) for row in rows]  # what this rank trains on, step by step
    per_document = len(rows[0][0]) > 2
    labels = step_label_counts(rows, counter) if per_document else None
    batches = [[tuple(x.to(device.torch) for x in b[:3]) for b in row] for row in rows]
    t = spec["train"]
    world = dist.get_world_size()
    steps = []
    states = None
    skipped = 0  # fp16: optimizer steps the loss scaler skipped; the LR schedule does not advance on them
    peak_from = peak_from_step(t)
    dist.barrier()
    for step in range(t["steps"]):
        counter.reset()
        counter.active = True
        lr = lr_at(t, step - skipped)
        if device.kind == "cuda" and step == peak_from:
            device.synchronize()
            torch.cuda.reset_peak_memory_stats(device.torch)
        losses = []
        t0 = time.perf_counter()
        for a in range(t["grad_accum"]):
            last = a + 1 == t["grad_accum"]
            if per_document:  # summed loss x world / labels before backward; reported x grad_accum too
                tokens, targets, position_ids = batches[step][a]
                value = runner.forward_backward(tokens, targets, float(world) / labels[step], last,
                                                position_ids=position_ids)
                losses.append(value * (float(t["grad_accum"]) * float(world) / labels[step]))
            else:
                tokens, targets = batches[step][a]
                losses.append(runner.forward_backward(tokens, targets, 1.0 / t["grad_accum"], last))
            if last and step + 1 == t["steps"]:
                counter.active = False  # memory introspection is not traffic
                states = runner.model_state_bytes()
                counter.active = True
        grad_norm = runner.optimizer_step(lr)
        lr = runner.last_lr  # the lr the optimizer step used, read from its param groups at step time
        device.synchronize()  # the step's kernels are done before the clock stops
        elapsed = time.perf_counter() - t0
        counter.active = False
        steps.append({"step": step, "loss": sum(losses) / len(losses), "micro_losses": losses,
                      "grad_norm": grad_norm, "lr": lr, "batch_sha256": hashes[step], "time_s": elapsed,
                      "comm": counter.snapshot()})
        loss_scale = getattr(getattr(runner, "amp", None), "last", None)
        if loss_scale is not None:
            steps[-1]["loss_scale"] = loss_scale
            skipped += int(loss_scale["skipped"])
    notes = list(getattr(runner, "notes", []))
    import model as zbmodel
    calls = zbmodel.CHECKPOINT_CALLS
    if calls["forwards"]:  # model.py's torch.utils.checkpoint blocks (DeepSpeed's reference)
        notes.append(f"torch.utils.checkpoint: {calls['forwards']} block forwards checkpointed, "
                     f"{calls['runs'] - calls['forwards']} recomputed in backward")
    result = {
        "rank": rank,
        "world_size": dist.get_world_size(),
        "upstream": {"name": runner.name, "version": runner.version},
        "steps": steps,
        "model_states_bytes": states["bytes"],
        "model_states_detail": states.get("detail", {}),
        "setup_comm": setup_comm,
        "peak_rss_bytes": peak_rss_bytes(),
        "device": device.describe(),
        "threads": torch.get_num_threads(),
        "notes": notes,
    }
    if device.kind == "cuda":
        result["peak_cuda_allocated_bytes"] = torch.cuda.max_memory_allocated(device.torch)
        result["peak_cuda_reserved_bytes"] = torch.cuda.max_memory_reserved(device.torch)
        result["peak_cuda_from_step"] = peak_from
    out_dir = os.path.join(work, "upstream")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(finite_or_text(result), f, indent=1, allow_nan=False)
    os.replace(path + ".tmp", path)
    sys.stdout.flush()
    sys.stderr.flush()
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def op_sac_context_fn():
    """torchtitan's per-op selective activation checkpointing (--activation-checkpointing
    selective-op): torchtitan/distributed/activation_checkpoint.py _apply_op_sac with the llama3
    _op_sac_save_list of the selective_ac_option releases, as a checkpoint context_fn. Each call
    (one checkpointed forward) starts the mm counters at 0; the odd-numbered aten.mm / aten.linear
    of a forward (and of its recompute) are saved, every second one recomputed; the other listed
    ops are saved; everything else is recomputed. The CPU SDPA op is not in the list."""
    from collections import defaultdict
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ops = torch.ops
    save_list = {ops.aten.mm.default, ops.aten.linear.default,
                 ops.aten._scaled_dot_product_efficient_attention.default,
                 ops.aten._scaled_dot_product_flash_attention.default,
                 ops.aten._scaled_dot_product_cudnn_attention.default,
                 ops.aten._scaled_dot_product_attention_math.default,
                 ops.aten._scaled_dot_product_fused_attention_overrideable.default,
                 ops._c10d_functional.reduce_scatter_tensor.default,
                 ops.aten.max.default}
    mm_ops = (ops.aten.mm.default, ops.aten.linear.default)
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
        if func in mm_ops:
            meta[key] += 1
        to_save = func in save_list and not (func in mm_ops and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def accelerate_backward(model, amp, tokens, targets, position_ids, loss_scale, grad_accum):
    """One micro-batch's forward and accelerator.backward, as the FSDP runners train it; returns
    the loss. Per-document rows (position_ids): the summed loss x loss_scale (world / the step's
    labels, see above) is backpropagated as is; one causal mask a row: the mean loss / grad_accum.
    `amp` (the fp16 scaler wrapper) scales and divides as accelerate does."""
    if position_ids is not None:
        loss = model(tokens, targets, position_ids)
        if amp:
            amp.backward(loss * loss_scale, 1)
        else:
            (loss * loss_scale).backward()
        return loss.item()
    loss = model(tokens, targets)
    if amp:
        amp.backward(loss, grad_accum)  # accelerator.backward with the scaler
    else:
        (loss / grad_accum).backward()  # accelerator.backward
    return loss.item()
