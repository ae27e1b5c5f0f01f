"""run_deepspeed.py — the reference for zerobench's `zero3` backend: DeepSpeed ZeRO stage 3 (and, by the
stage in the JSON, `zero1` / `zero2`: make_zero12_runner, and `zero0`: make_zero0_runner)
(deepspeed.initialize with the same JSON zerobench's zero3 backend read) on CPU with Gloo or on
CUDA with NCCL.

Launched by `zerobench crossval` as
  DS_ACCELERATOR=cpu|cuda python -m torch.distributed.run --standalone --nproc-per-node W \
      run_deepspeed.py --work DIR --device cpu|cuda

Set-up as transformers + accelerate do it for a ZeRO-3 config (../../shared/UPSTREAM_ON_CPU.md):
  - deepspeed.init_distributed(dist_backend="gloo" | "nccl"), with DeepSpeed's accelerator
    (DS_ACCELERATOR, set by crossval) checked to be the device's; the shared-memory all-reduce op
    that deepspeed.comm JIT-compiles at start on CPU (deepspeed/comm/torch.py, build_shm_op;
    inference/TP only, never used by ZeRO-3 training; on CUDA the accelerator has no
    ShareMemCommBuilder, so build_shm_op returns None) is skipped;
  - no op is compiled, except DeepSpeedCPUAdam's cpu_adam for a run with offload_optimizer (the GPU
    machine may have no compiler and has no network): with the client torch.optim.AdamW and no
    optimizer offload, ZeRO-3 training loads no op (read in 0.19.8:
    engine.py _configure_optimizer takes the client optimizer as the basic optimizer, FusedAdam
    is only imported; stage3.py / partition_parameters.py load QuantizerBuilder only for
    quantized weights/gradients (zero_quantized_*), swap_tensor/ AsyncIOBuilder only for NVMe
    offload, utils/pin_memory.py PinMemoryBuilder only with DS_PIN_MEMORY_BACKEND=native). forbid_op_builds()
    turns any JIT build (OpBuilder.jit_load, torch.utils.cpp_extension.load/load_inline) into
    one clear error naming the op, instead of a compile;
  - the model is built under deepspeed.zero.Init(config_dict_or_path=the JSON), so parameters
    are partitioned at construction in the config's dtype (bf16 when "bf16" is enabled), then
    the weights zerobench wrote are copied in under GatheredParameters(modifier_rank=0)
    (transformers' _load_state_dict_into_zero3_model does the same per module): the fp32
    master DeepSpeed builds in _create_fp32_partitions is then the bf16-rounded weights, as
    zerobench's zero3 engine builds it;
  - with offload_optimizer the JSON carries DeepSpeed's own "optimizer" section (AdamW, with
    torch_adam when zerobench's host optimizer is torch.optim.AdamW), so DeepSpeed builds
    DeepSpeedCPUAdam (engine.py get_optimizer_configuration: zero_use_cpu_optimizer) — the optimizer
    a user's offload file gets; its cpu_adam op builds just in time (g++) on first use;
  - otherwise the client optimizer transformers passes when the JSON has no "optimizer" section
    (integrations/deepspeed.py deepspeed_optim_sched: optimizer = trainer.create_optimizer(),
    HF's default torch.optim.AdamW(fused=True), with "zero_allow_untested_optimizer": true);
    DeepSpeed then steps it on each sub-group's fp32 partition (stage3.py _optimizer_step);
  - activation checkpointing (--activation-checkpointing full | selective-layer:N) as HF's
    gradient_checkpointing_enable does it for a DeepSpeed user (transformers 5.x: each chosen
    decoder layer's forward under torch.utils.checkpoint, use_reentrant=False, the layer's own
    module hooks outside), on the blocks zerobench checkpoints (model.py checkpoint_blocks);
  - per micro-batch engine(...), engine.backward(loss) (scales by 1/gradient_accumulation_steps
    and reduces every micro-batch: ZeRO-3 has no no_sync), engine.step() (applies at the
    accumulation boundary, clipping with "gradient_clipping");
  - the lr: with a "scheduler" section (its "auto"s filled by zerobench as transformers fills them)
    DeepSpeed builds the scheduler itself and steps it; without one crossval's schedule is written
    into the optimizer's param groups before the boundary step. Either way each step records the
    lr its optimizer step read from the param groups (engine.get_lr()), which crossval compares.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

import common
import model as zbmodel


class OpBuildForbidden(RuntimeError):
    pass


def forbid_op_builds(allowed=()):
    """Makes every DeepSpeed op JIT build fail at once, naming the op, except the ops in `allowed`
    (cpu_adam for optimizer offload): OpBuilder.jit_load (what OpBuilder.load calls for an op not
    installed prebuilt, ops/op_builder/builder.py) and, for builders with their own load(),
    torch.utils.cpp_extension.load / load_inline (what jit_load compiles with, looked up at call
    time; allowed only inside an allowed op's jit_load). Prebuilt ops still load."""
    import torch.utils.cpp_extension as cpp_extension
    from deepspeed.ops.op_builder.builder import OpBuilder

    inside_allowed = [False]
    original_jit_load = OpBuilder.jit_load
    original_load, original_load_inline = cpp_extension.load, cpp_extension.load_inline

    def refuse(what, original=None):
        def raise_(*args, **kwargs):
            name = getattr(args[0], "name", "?") if what == "OpBuilder.jit_load" and args else \
                kwargs.get("name", args[0] if args else "?")
            if what == "OpBuilder.jit_load" and name in allowed:
                inside_allowed[0] = True
                try:
                    return original_jit_load(*args, **kwargs)
                finally:
                    inside_allowed[0] = False
            if original is not None and inside_allowed[0]:
                return original(*args, **kwargs)
            raise OpBuildForbidden(f"run_deepspeed.py: DeepSpeed tried to compile op '{name}' ({what}); this "
                                   "reference runs without compiled ops" +
                                   (f" other than {', '.join(allowed)}" if allowed else ""))
        return raise_

    OpBuilder.jit_load = refuse("OpBuilder.jit_load")
    cpp_extension.load = refuse("torch.utils.cpp_extension.load", original_load)
    cpp_extension.load_inline = refuse("torch.utils.cpp_extension.load_inline", original_load_inline)


def offload_devices(ds_config):
    z = ds_config.get("zero_optimization", {}) or {}
    dev = lambda key: ((z.get(key) or {}).get("device") or "none")  # noqa: E731
    return dev("offload_optimizer"), dev("offload_param")


def make_runner(spec, work, device):
    import deepspeed
    import deepspeed.comm.torch  # noqa: F401  (`import ... as` would bind deepspeed.comm's `torch` attribute)
    from deepspeed.accelerator import get_accelerator

    # No 40 s g++ JIT of an op ZeRO-3 training never calls (TorchBackend.__init__ builds it on CPU).
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    accelerator = get_accelerator().device_name()
    if accelerator != device.kind:
        raise SystemExit(f"run_deepspeed.py: DeepSpeed's accelerator is '{accelerator}' (DS_ACCELERATOR="
                         f"{os.environ.get('DS_ACCELERATOR', 'unset')}), asked for '{device.kind}'")
    with open(os.path.join(work, spec["deepspeed_config"])) as f:
        ds_config = json.load(f)
    offload_optimizer, _ = offload_devices(ds_config)
    own_optimizer = offload_optimizer != "none" and "optimizer" in ds_config
    forbid_op_builds(allowed=("cpu_adam",) if own_optimizer else ())
    deepspeed.init_distributed(dist_backend=device.backend, verbose=False)
    cfg = zbmodel.Config.from_hf_json(os.path.join(work, "weights", "config.json"))
    if int((ds_config.get("zero_optimization") or {}).get("stage", 3)) == 0:
        return make_zero0_runner(spec, work, device, ds_config, cfg)
    if int((ds_config.get("zero_optimization") or {}).get("stage", 3)) in (1, 2):
        return make_zero12_runner(spec, work, device, ds_config, cfg)
    with deepspeed.zero.Init(config_dict_or_path=ds_config):
        net = zbmodel.LlamaForCausalLM(cfg)
    checkpointed = zbmodel.checkpoint_blocks(net, common.activation_checkpointing_mode(spec["train"], {}))
    state = common.load_weights_file(work)
    params = list(net.parameters())
    with deepspeed.zero.GatheredParameters(params, modifier_rank=0):
        if dist.get_rank() == 0:
            zbmodel.load_weights(net, state)
    t = spec["train"]
    if own_optimizer:  # DeepSpeed builds it from the JSON's "optimizer" section (DeepSpeedCPUAdam / torch AdamW)
        import time
        started = time.time()
        engine, ds_optimizer, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=ds_config,
                                                          lr_scheduler=hf_scheduler_callable(t))
        build_s = time.time() - started
    else:
        optimizer = common.adamw(net.parameters(), t)
        engine, ds_optimizer, _, _ = deepspeed.initialize(model=net, optimizer=optimizer, config=ds_config,
                                                          lr_scheduler=common.hf_scheduler(t, optimizer))
        build_s = None
    check_setup(engine, spec, ds_config, device)
    runner = DeepSpeedRunner(engine, ds_optimizer, t, deepspeed.__version__, ds_config)
    if own_optimizer:
        runner.notes[0:1] = [f"DeepSpeed's own optimizer from the JSON: {basic_optimizer_name(engine)} on the host "
                        f"(optimizer offload); deepspeed.initialize took {build_s:.1f} s" +
                        (" (with the cpu_adam JIT build on a cold cache)"
                         if type(engine.basic_optimizer).__name__ == "DeepSpeedCPUAdam" else "")]
    note_checkpointing(runner, checkpointed, t)
    return runner


def note_checkpointing(runner, checkpointed, train):
    """The blocks run under torch.utils.checkpoint, as HF's gradient checkpointing does it for a
    DeepSpeed user (model.gradient_checkpointing_enable(): non-reentrant, each decoder layer's
    forward; model.py checkpoint_blocks), in the runner's notes."""
    if checkpointed:
        runner.notes.append(f"activation checkpointing {common.activation_checkpointing_mode(train, {})}: blocks "
                            f"{[i + 1 for i in checkpointed]} (1-based) run their forward under torch.utils.checkpoint(use_reentrant=False), as HF's "
                            "gradient_checkpointing_enable does (transformers modeling_layers.py)")


def check_setup(engine, spec, ds_config, device):
    """Fails unless DeepSpeed runs the stage and precision zerobench was asked for: the engine's
    zero_optimization_stage() (deepspeed/runtime/engine.py) equals the stage in the JSON and in
    zerobench's resolved options (3), the optimizer it wrapped ours in is stage 3's
    (DeepSpeedZeroOptimizer_Stage3, runtime/zero/stage3.py), bf16 is on exactly for bf16, and the
    parameter partitions live on the rank's device."""
    asked = int(spec["options"].get("stage", 3))
    in_json = int(ds_config.get("zero_optimization", {}).get("stage", -1))
    stage = engine.zero_optimization_stage()
    if asked != 3 or in_json != 3 or stage != 3:
        raise SystemExit(f"run_deepspeed.py: asked for ZeRO stage {asked} (JSON: {in_json}), DeepSpeed runs stage {stage}; "
                         "this reference sets up stage 3 only")
    cls = type(engine.optimizer).__name__
    if cls != "DeepSpeedZeroOptimizer_Stage3":
        raise SystemExit(f"run_deepspeed.py: DeepSpeed's optimizer is {cls}, expected DeepSpeedZeroOptimizer_Stage3")
    want_bf16 = spec["precision"] == "bf16"
    if bool(engine.bfloat16_enabled()) != want_bf16:
        raise SystemExit(f"run_deepspeed.py: precision {spec['precision']} but DeepSpeed bf16 enabled = "
                         f"{engine.bfloat16_enabled()}")
    offload_optimizer, offload_param = offload_devices(ds_config)
    opt = engine.optimizer
    if bool(opt.offload_optimizer) != (offload_optimizer == "cpu") or bool(opt.offload_param) != (offload_param == "cpu"):
        raise SystemExit(f"run_deepspeed.py: DeepSpeed offloads optimizer={opt.offload_optimizer} "
                         f"param={opt.offload_param}, the JSON asks {offload_optimizer} / {offload_param}")
    want = torch.device("cpu") if offload_param == "cpu" else device.torch
    for flat in opt.fp16_partitioned_groups_flat:
        if flat.device != want:
            raise SystemExit(f"run_deepspeed.py: a parameter partition is on {flat.device}, expected {want}")


def hf_scheduler_callable(train):
    """An --lr-scheduler-type run with DeepSpeed's own optimizer (HF's DummyOptim): transformers'
    deepspeed_optim_sched hands deepspeed.initialize a callable that builds the Trainer's scheduler
    over the optimizer DeepSpeed made (engine.py _configure_lr_scheduler calls it on
    basic_optimizer); None otherwise. With the client optimizer it passes the scheduler itself."""
    if not train["lr_schedule"].startswith("hf:"):
        return None
    return lambda optimizer: common.hf_scheduler(train, optimizer)


class DeepSpeedRunner:
    name = "DeepSpeed ZeRO-3"

    def __init__(self, engine, optimizer, train, version, ds_config):
        self.engine, self.optimizer, self.train, self.version = engine, optimizer, train, version
        # DeepSpeed steps the lr scheduler: the section's, or the one HF's Trainer passed
        # deepspeed.initialize (--lr-scheduler-type; engine.py _take_model_step steps it after
        # every applied step, the Trainer's own step() is a no-op under DeepSpeed).
        self.deepspeed_schedules = "scheduler" in ds_config or train["lr_schedule"].startswith("hf:")
        self.notes = [f"client optimizer {common.adamw_name(train)} with zero_allow_untested_optimizer, as transformers' "
                      "deepspeed_optim_sched passes HF Trainer's " +
                      ("default optimizer" if train.get("adamw_impl", "fused") == "fused" else "--optim adamw_torch")]
        if train["lr_schedule"].startswith("hf:"):
            self.notes.append(common.hf_scheduler_note(train) + ", passed to deepspeed.initialize (lr_scheduler=)")
        elif self.deepspeed_schedules:
            self.notes.append(f"lr: DeepSpeed's own scheduler from the JSON's section ({type(engine.lr_scheduler).__name__}"
                              f" {json.dumps(ds_config['scheduler'])})" if engine.lr_scheduler is not None else
                              "lr: the JSON's scheduler section has no type, DeepSpeed builds no scheduler: the "
                              "optimizer's lr throughout")

    def forward_backward(self, tokens, targets, loss_scale, last_micro_batch, position_ids=None):
        if position_ids is not None:
            # Per-document: the summed loss x world / the step's labels (common.py), and HF Trainer's
            # scale_wrt_gas=False (trainer.py training_step under DeepSpeed): no 1/gradient_accumulation_steps.
            loss = self.engine(tokens, targets, position_ids)
            self.engine.backward(loss * loss_scale, scale_wrt_gas=False)
        else:
            loss = self.engine(tokens, targets)
            self.engine.backward(loss)
        value = loss.item()
        if not last_micro_batch:
            self.engine.step()  # not a boundary: DeepSpeed only advances its micro-step counter
        return value

    def optimizer_step(self, lr):
        # With a "scheduler" section DeepSpeed owns the lr: it built the scheduler from the section
        # (engine.py _configure_lr_scheduler -> _scheduler_from_config; the constructor set step 0's
        # lr) and steps it after each applied optimizer step (_take_model_step). Without one the lr
        # is crossval's schedule (zerobench's own, common.lr_at), written before the boundary step.
        if not self.deepspeed_schedules:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.last_lr = common.group_lr(self.optimizer)  # what this step's optimizer.step() reads
        self.engine.step()
        return float(self.engine.get_global_grad_norm())

    def model_state_bytes(self):
        """Where ZeRO-3's bytes live (DeepSpeedZeroOptimizer_Stage3): params = the bf16/fp32
        partitions (fp16_partitioned_groups_flat; each p.ds_tensor is a view into them) plus the
        full data of parameters still gathered (persistent ones, ds_persist); master_params =
        fp32_partitioned_groups_flat when it is a separate tensor; grads =
        grad_partitions_flat_buffer; optimizer = the inner AdamW's exp_avg + exp_avg_sq (its
        per-tensor `step` scalars separately); buffers = the IPG bucket buffers allocated up
        front (reduce_bucket_size elements per communication dtype, stage3.py
        _setup_for_real_optimizer)."""
        opt = self.optimizer
        held = common.storage_counter()
        # Where each buffer lives: its tensor's device on a GPU run; on the CPU accelerator (the
        # device is the CPU) where DeepSpeed put it: the partitions on the host with offload_param
        # (_create_param_groups_fp16_flat_cpu_memory), the optimizer side on self.device = cpu
        # with offload_optimizer.
        on_cpu_accelerator = self.engine.device.type == "cpu" if hasattr(self.engine, "device") else True

        def host(t, offloaded):
            if t is None or not torch.is_tensor(t):
                return False
            return offloaded if on_cpu_accelerator else t.device.type == "cpu"

        dev = {"params": 0, "master_params": 0, "grads": 0, "optimizer": 0, "buffers": 0}
        hst = dict(dev)
        pinned = False

        def add(cat, t, offloaded):
            nonlocal pinned
            n = held(t)
            if host(t, offloaded):
                hst[cat] += n
                if n and not on_cpu_accelerator and t.is_pinned():
                    pinned = True
            else:
                dev[cat] += n
            return n

        partition_bytes = sum(add("params", t, bool(opt.offload_param)) for t in opt.fp16_partitioned_groups_flat)
        gathered, persistent = 0, 0
        for p in self.engine.module.parameters():
            if p.data.numel() > 0:
                n = held(p.data)
                gathered += n
                dev["params"] += n
                persistent += int(getattr(p, "ds_persist", False))
            # ZeRO++ hpZ: the secondary partition (_partition_param_sec), a parameter copy on the
            # device; None after the step (invalidate_secondary_tensor).
            secondary = getattr(p, "ds_secondary_tensor", None)
            if secondary is not None:
                dev["params"] += held(secondary)
        oo = bool(opt.offload_optimizer)
        for t in opt.fp32_partitioned_groups_flat:
            add("master_params", t, oo)
        add("grads", opt.grad_partitions_flat_buffer, oo)
        if oo:  # initialize_optimizer_states: each fp32 partition's .grad, a kept host buffer
            for t in opt.fp32_partitioned_groups_flat:
                add("grads", t.grad, oo)
        step_counters = 0
        for state in opt.optimizer.state.values():
            add("optimizer", state["exp_avg"], oo)
            add("optimizer", state["exp_avg_sq"], oo)
            if torch.is_tensor(state.get("step")):  # DeepSpeedCPUAdam's step is a Python int
                step_counters += held(state["step"])
        for b in opt.ipg_buckets.values():
            if b.buffer is not None:
                add("buffers", b.buffer, False)
        out = dict(dev)
        out["optimizer_step_counters"] = step_counters
        if oo or bool(opt.offload_param):
            # On the CPU accelerator nothing can be pinned; report what the config asks, as zerobench does.
            cfg = self.engine._config.zero_config
            asked = (bool(opt.offload_param)) or (oo and cfg.offload_optimizer.pin_memory)
            out["host"] = dict(hst, pinned=bool(pinned or (on_cpu_accelerator and asked)))
        return {"bytes": out,
                "detail": {"partition_bytes": partition_bytes, "gathered_param_bytes": gathered,
                           "persistent_params": persistent, "sub_groups": len(opt.fp16_partitioned_groups_flat),
                           "offload_optimizer": oo, "offload_param": bool(opt.offload_param),
                           "basic_optimizer": type(self.engine.basic_optimizer).__name__,
                           "reduce_bucket_size": opt.reduce_bucket_size,
                           "ipg_dtypes": [str(d) for d in opt.ipg_buckets]}}


def make_zero12_runner(spec, work, device, ds_config, cfg):
    """ZeRO stage 1 or 2 (zerobench's zero1 / zero2): DeepSpeedZeroOptimizer
    (runtime/zero/stage_1_and_2.py). No zero.Init (stages 1/2 keep whole parameters): the model is
    built and loaded on every rank in fp32 (transformers' from_pretrained without zero3), then
    deepspeed.initialize casts it to bf16 when "bf16" is enabled (engine.py
    _configure_distributed_model) and broadcasts rank 0's weights (_broadcast_model); the client
    optimizer is HF's default torch.optim.AdamW(fused=True), as for stage 3. With
    offload_optimizer cpu the JSON carries DeepSpeed's own "optimizer" section (as for stage 3
    offload): DeepSpeedCPUAdam, or torch.optim.AdamW with torch_adam, steps the host fp32
    partition (stage_1_and_2.py cpu_offload)."""
    import deepspeed
    offload_optimizer, _ = offload_devices(ds_config)
    own_optimizer = offload_optimizer != "none" and "optimizer" in ds_config
    net = zbmodel.LlamaForCausalLM(cfg)
    zbmodel.load_weights(net, common.load_weights_file(work))
    t = spec["train"]
    checkpointed = zbmodel.checkpoint_blocks(net, common.activation_checkpointing_mode(t, {}))
    if own_optimizer:
        engine, ds_optimizer, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=ds_config,
                                                          lr_scheduler=hf_scheduler_callable(t))
    else:
        optimizer = common.adamw(net.parameters(), t)
        engine, ds_optimizer, _, _ = deepspeed.initialize(model=net, optimizer=optimizer, config=ds_config,
                                                          lr_scheduler=common.hf_scheduler(t, optimizer))
    stage = engine.zero_optimization_stage()
    asked = int(spec["options"].get("stage", -1))
    in_json = int(ds_config["zero_optimization"]["stage"])
    if not (asked == in_json == stage):
        raise SystemExit(f"run_deepspeed.py: asked for ZeRO stage {asked} (JSON: {in_json}), DeepSpeed runs stage {stage}")
    cls = type(engine.optimizer).__name__
    if cls != "DeepSpeedZeroOptimizer":
        raise SystemExit(f"run_deepspeed.py: DeepSpeed's optimizer is {cls}, expected DeepSpeedZeroOptimizer")
    if bool(engine.bfloat16_enabled()) != (spec["precision"] == "bf16"):
        raise SystemExit(f"run_deepspeed.py: precision {spec['precision']} but DeepSpeed bf16 enabled = "
                         f"{engine.bfloat16_enabled()}")
    if bool(engine.optimizer.cpu_offload) != (offload_optimizer == "cpu"):
        raise SystemExit(f"run_deepspeed.py: DeepSpeed cpu_offload = {engine.optimizer.cpu_offload}, the JSON asks "
                         f"offload_optimizer {offload_optimizer}")
    runner = DeepSpeedZero12Runner(engine, ds_optimizer, t, deepspeed.__version__, stage, ds_config)
    if own_optimizer:
        runner.notes[0:1] = [f"DeepSpeed's own optimizer from the JSON: {basic_optimizer_name(engine)} on the host "
                        "(optimizer offload)"]
    note_checkpointing(runner, checkpointed, t)
    return runner


def make_zero0_runner(spec, work, device, ds_config, cfg):
    """ZeRO stage 0 (zerobench's zero0): no ZeRO optimizer (engine.py _configure_optimizer). The
    model is built and loaded on every rank in fp32, deepspeed.initialize casts it to bf16 when
    "bf16" is enabled and broadcasts rank 0's weights; the client optimizer is HF's default
    torch.optim.AdamW(fused=True), which DeepSpeed steps as it is in fp32 and wraps in
    FP16_UnfusedOptimizer in bf16 (_do_optimizer_sanity_check: DDP_BFLOAT16; it is not FusedAdam).
    The gradients are all-reduced by the engine at the boundary (allreduce_gradients)."""
    import deepspeed
    import deepspeed.runtime.engine as ds_engine
    net = zbmodel.LlamaForCausalLM(cfg)
    zbmodel.load_weights(net, common.load_weights_file(work))
    t = spec["train"]
    checkpointed = zbmodel.checkpoint_blocks(net, common.activation_checkpointing_mode(t, {}))
    optimizer = common.adamw(net.parameters(), t)
    engine, ds_optimizer, _, _ = deepspeed.initialize(model=net, optimizer=optimizer, config=ds_config,
                                                      lr_scheduler=common.hf_scheduler(t, optimizer))
    stage = engine.zero_optimization_stage()
    asked = int(spec["options"].get("stage", -1))
    if not (asked == int(ds_config["zero_optimization"]["stage"]) == stage == 0):
        raise SystemExit(f"run_deepspeed.py: asked for ZeRO stage {asked}, DeepSpeed runs stage {stage}")
    expected = "AdamW" if spec["precision"] == "fp32" else "FP16_UnfusedOptimizer"
    cls = type(engine.optimizer).__name__
    if cls != expected:
        raise SystemExit(f"run_deepspeed.py: DeepSpeed's optimizer is {cls}, expected {expected} at ZeRO stage 0")
    if bool(engine.bfloat16_enabled()) != (spec["precision"] == "bf16"):
        raise SystemExit(f"run_deepspeed.py: precision {spec['precision']} but DeepSpeed bf16 enabled = "
                         f"{engine.bfloat16_enabled()}")
    runner = DeepSpeedZero0Runner(engine, ds_optimizer, t, deepspeed.__version__, ds_config)
    # fp32 with gradient_clipping: the norm DeepSpeed's clip_fp32_gradients computes (runtime/utils.py
    # clip_grad_norm_, which the engine calls and whose result it drops), recorded as it returns.
    original = ds_engine.clip_grad_norm_

    def recording_clip_grad_norm_(*args, **kwargs):
        runner.clip_norm = original(*args, **kwargs)
        return runner.clip_norm

    ds_engine.clip_grad_norm_ = recording_clip_grad_norm_
    note_checkpointing(runner, checkpointed, t)
    return runner


class DeepSpeedZero0Runner(DeepSpeedRunner):
    name = "DeepSpeed ZeRO-0"

    def __init__(self, engine, optimizer, train, version, ds_config):
        super().__init__(engine, optimizer, train, version, ds_config)
        self.clip_norm = None
        if engine.optimizer is engine.basic_optimizer:
            self.notes.append("fp32: DeepSpeed keeps no grad norm at stage 0 (get_global_grad_norm() is None); the "
                              "norm is clip_grad_norm_'s, recorded as it returns (gradient_clipping > 0), else the "
                              "same formula over the reduced gradients, without its all-reduce")

    def optimizer_step(self, lr):
        if self.engine.optimizer is not self.engine.basic_optimizer:  # FP16_UnfusedOptimizer
            return super().optimizer_step(lr)
        norm = None
        if not self.engine.gradient_clipping() > 0.0:
            grads = [p.grad for p in self.engine.module.parameters() if p.grad is not None]
            norm = torch.stack([g.detach().float().norm(2) for g in grads]).pow(2.0).sum().float().pow(0.5)
        self.clip_norm = None
        if not self.deepspeed_schedules:  # as DeepSpeedRunner.optimizer_step
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.last_lr = common.group_lr(self.optimizer)
        self.engine.step()
        return float(norm if norm is not None else self.clip_norm)

    def model_state_bytes(self):
        """What DeepSpeed holds after the last micro-batch's backward at stage 0: params = the
        module's parameters (model dtype), grads = their .grad, master_params = FP16_UnfusedOptimizer's
        fp32_groups (bf16), optimizer = the AdamW's exp_avg + exp_avg_sq."""
        held = common.storage_counter()
        out = {"params": 0, "master_params": 0, "grads": 0, "optimizer": 0, "buffers": 0}
        params = list(self.engine.module.parameters())
        for p in params:
            out["params"] += held(p)
        for p in params:
            out["grads"] += held(p.grad)
        opt = self.engine.optimizer
        for group in getattr(opt, "fp32_groups", []):
            for p in group:
                out["master_params"] += held(p)
        step_counters = 0
        for state in self.engine.basic_optimizer.state.values():
            out["optimizer"] += held(state["exp_avg"]) + held(state["exp_avg_sq"])
            if torch.is_tensor(state.get("step")):
                step_counters += held(state["step"])
        out["optimizer_step_counters"] = step_counters
        return {"bytes": out, "detail": {"stage": 0, "optimizer": type(opt).__name__,
                                         "basic_optimizer": type(self.engine.basic_optimizer).__name__}}


def basic_optimizer_name(engine):
    """The class DeepSpeed built from the "optimizer" section; for torch's AdamW also the foreach and
    fused it was built with (get_optimizer_configuration passes params.foreach, default None)."""
    opt = engine.basic_optimizer
    name = type(opt).__name__
    if isinstance(opt, torch.optim.Optimizer) and type(opt).__module__.startswith("torch.optim"):
        name += f"(foreach={opt.defaults.get('foreach')}, fused={opt.defaults.get('fused')})"
    return name


class DeepSpeedZero12Runner(DeepSpeedRunner):
    def __init__(self, engine, optimizer, train, version, stage, ds_config):
        super().__init__(engine, optimizer, train, version, ds_config)
        self.name = f"DeepSpeed ZeRO-{stage}"

    def model_state_bytes(self):
        """Where DeepSpeedZeroOptimizer's bytes live after the last micro-batch's backward: params =
        bit16_groups_flat (every parameter, whole, aligned); master_params =
        single_partition_of_fp32_groups; grads = every storage still holding a gradient:
        averaged_gradients / all_grad_tensors (views of grads_in_partition), param.grad (stage 1
        between micro-batches), the current grads_in_partition; optimizer = the inner AdamW's
        exp_avg + exp_avg_sq; buffers = the IPG bucket buffers still allocated (the epilogue
        releases them: _release_ipg_buffers). With cpu_offload, on the host ("host"): the fp32
        partition (master_params), its .grad, temp_grad_buffer_for_cpu_offload and
        accumulated_grads_in_cpu (grads), param_buffer_of_bit16_for_cpu_offload_groups (params),
        the optimizer states; on the device temp_grad_buffer_for_gpu_offload (grads)."""
        opt = self.optimizer
        held = common.storage_counter()
        out = {"params": 0, "master_params": 0, "grads": 0, "optimizer": 0, "buffers": 0}
        oo = bool(opt.cpu_offload)
        hst = dict(out)
        on_cpu_accelerator = self.engine.device.type == "cpu" if hasattr(self.engine, "device") else True

        def add(cat, t, offloaded):  # where DeepSpeed put it (the CPU accelerator: by the offload rule)
            on_host = offloaded if on_cpu_accelerator else (torch.is_tensor(t) and t.device.type == "cpu")
            (hst if on_host else out)[cat] += held(t)

        for t in opt.bit16_groups_flat:
            out["params"] += held(t)
        for t in opt.single_partition_of_fp32_groups:
            add("master_params", t, oo)
        if oo:
            for t in opt.single_partition_of_fp32_groups:
                add("grads", t.grad, True)
            for t in opt.param_buffer_of_bit16_for_cpu_offload_groups:
                add("params", t, True)
            add("grads", opt.temp_grad_buffer_for_cpu_offload, True)
            for t in opt.accumulated_grads_in_cpu.values():
                add("grads", t, True)
            add("grads", opt.temp_grad_buffer_for_gpu_offload, False)
        for b in opt.ipg_buckets.values():
            for t in b.buffer:
                out["buffers"] += held(t)
        grads = []
        for group in list(opt.averaged_gradients.values()) + list(opt.all_grad_tensors.values()):
            grads += [g for g in (group or []) if torch.is_tensor(g)]
        for group in opt.bit16_groups:
            grads += [p.grad for p in group if p.grad is not None]
        if opt.grads_in_partition is not None:
            grads.append(opt.grads_in_partition)
        for g in grads:  # the zero tail of a partition reaching into the alignment pad included
            out["grads"] += held(g)
        step_counters = 0
        for state in opt.optimizer.state.values():
            add("optimizer", state["exp_avg"], oo)
            add("optimizer", state["exp_avg_sq"], oo)
            if torch.is_tensor(state.get("step")):  # DeepSpeedCPUAdam's step is a Python int
                step_counters += held(state["step"])
        out["optimizer_step_counters"] = step_counters
        if oo:  # on the CPU accelerator nothing can be pinned: report what the config asks, as zerobench does
            pinned = any(t.is_pinned() for t in opt.single_partition_of_fp32_groups) if not on_cpu_accelerator else \
                bool(self.engine._config.zero_config.offload_optimizer.pin_memory)
            out["host"] = dict(hst, pinned=bool(pinned))
        return {"bytes": out,
                "detail": {"stage": self.engine.zero_optimization_stage(),
                           "partition_size": [int(n) for n in opt.partition_size],
                           "flat_numel": [int(t.numel()) for t in opt.bit16_groups_flat],
                           "reduce_bucket_size": opt.reduce_bucket_size,
                           "allgather_bucket_size": opt.allgather_bucket_size,
                           "overlap_comm": opt.overlap_comm,
                           "cpu_offload": oo,
                           "basic_optimizer": type(self.engine.basic_optimizer).__name__,
                           "ipg_dtypes": [str(d) for d in opt.ipg_buckets]}}


if __name__ == "__main__":
    common.run(make_runner)
