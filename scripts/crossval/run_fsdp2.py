"""run_fsdp2.py — the reference for zerobench's `fsdp2` backend: PyTorch FSDP2
(torch.distributed.fsdp.fully_shard) on CPU with Gloo or on CUDA with NCCL, as accelerate 1.x
prepares a model for fsdp_version 2 (accelerate/utils/fsdp_utils.py, fsdp2_prepare_model).

Launched by `zerobench crossval` as
  python -m torch.distributed.run --standalone --nproc-per-node W run_fsdp2.py --work DIR --device cpu|cuda

Mesh: one 1-D DeviceMesh over the W ranks on the rank's device type, passed to every
fully_shard — what fully_shard builds itself without one (_fully_shard/_fsdp_init.py,
_init_default_fully_shard_mesh: init_device_mesh(<current accelerator>, (world,))), named so the
device is the one crossval gave; fully_shard moves each module's parameters to that device
(_fsdp_init.py _move_states_to_device).

Units, as zerobench's fsdp2 backend groups them (backends/fsdp2/fsdp2_engine.cpp group_specs):
  root (default)  fully_shard(each decoder block, reshard_after_forward=R), then fully_shard(model)
                  without reshard_after_forward (None -> False for the root): the root group
                  holds the embedding, final norm and LM head (PyTorch's FSDP2 recipe);
  accelerate      accelerate 1.15 fsdp2_prepare_model: each block (TRANSFORMER_BASED_WRAP),
                  fully_shard(embed_tokens), fully_shard([norm, lm_head], reshard_after_forward=
                  False), then fully_shard(model) without reshard_after_forward.
  With auto_wrap_policy NO_WRAP (accelerate's default when the file names none) no block is
  wrapped: the blocks' parameters stay in the root group (fsdp2_prepare_auto_wrap_policy returns
  None; the embedding and [norm, lm_head] are still carved out under the accelerate grouping).
  SIZE_BASED_WRAP evaluates accelerate's size policy (every module but the root, bottom-up, with
  more than min_num_params parameters): zerobench runs it only when that selects nothing, which
  is then NO_WRAP's setup, and this reference fails if it selected any.
Activation checkpointing (fsdp_activation_checkpointing) as accelerate 1.15 fsdp2_apply_ac does
it, before sharding: every child of a module the auto-wrap policy matches (each decoder block's
self_attn, mlp and two norms) is replaced by checkpoint_wrapper(child, preserve_rng_state=False)
(non-reentrant torch.utils.checkpoint); the block itself stays the fully_shard unit. With
--activation-checkpointing selective-layer:N (torchtitan's; accelerate has none) only the blocks
zerobench checkpoints (1-based count a multiple of N) are treated so.
Precision (accelerate's FullyShardedDataParallelPlugin.set_mixed_precision for fsdp_version 2):
  fp32   fp32 model, MixedPrecisionPolicy()
  mixed  bf16-loaded model upcast to fp32 before sharding ("Upcast to fp32 master weights;
         MixedPrecisionPolicy.param_dtype handles compute cast"), MixedPrecisionPolicy(
         param_dtype=bf16, reduce_dtype=bf16, output_dtype=bf16), reduce_dtype / output_dtype as
         zerobench resolved them ("none" = None)
  low    bf16 model, MixedPrecisionPolicy()
  fp16   fp32 model, MixedPrecisionPolicy(param_dtype=fp16, reduce_dtype=fp16, output_dtype=fp16)
         (set_mixed_precision("fp16")) and accelerate's ShardedGradScaler with torch's defaults
         (common.AmpScaler: scale(loss / gas), unscale_ before clip_grad_norm_, step skipped on
         found_inf, update)
Gradient accumulation as accelerate does for FSDP2: set_requires_gradient_sync(False) on
non-final micro-batches (its no_sync; every micro-batch synced with sync_each_batch), loss /
gradient_accumulation_steps; clipping with torch.nn.utils.clip_grad_norm_ over the DTensor
gradients (accelerator.clip_grad_norm_ -> _clip_grad_norm_dtensor_aware with one mesh); the norm
is read with .full_tensor() as HF Trainer's .item() on it does; one torch.optim.AdamW(fused=True)
over the sharded parameters (HF Trainer's default optimizer).
Offload: offload_policy "cpu" passes CPUOffloadPolicy(pin_memory=offload_pin_memory) to every
fully_shard (accelerate's fsdp2_prepare_model passes its plugin's cpu_offload the same way); the
model states are then reported by where they live: a tensor is on the host when its .device is
the CPU and the run's device is not (CUDA), or — on a CPU-only run, where every .device is the
CPU — when the FSDPParam holding it has offload_to_cpu (upstream put it there with `.cpu()`).
pin_memory=True needs CUDA (page-locked memory): on --device cpu it is refused by name. On CUDA
the process group is "cuda:nccl,cpu:gloo" under offload, as torchtune sets it: clip_grad_norm_
all-reduces the norms of host gradients on the CPU backend (pytorch#148532).
Options zerobench's fsdp2 offers that this reference does not set up (HSDP, explicit prefetch,
force_sum_reduction_for_comms, cpu_ram_efficient_loading) are refused by name: the run fails
rather than compare different set-ups.
"""
import math
import os

import torch
import torch.distributed as dist

import common
import model as zbmodel


def _dtype(name, default):
    """zerobench's MixedPrecisionPolicy field spelling: "" = accelerate's default, "none" = None."""
    return {"": default, "none": None, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def make_runner(spec, work, device):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    precision, opts, t = spec["precision"], spec["options"], spec["train"]
    offload = opts.get("offload_policy", "none") == "cpu"
    pin = bool(opts.get("offload_pin_memory", True))
    if offload and pin and device.kind != "cuda":
        raise SystemExit("run_fsdp2.py: fsdp2 option offload_pin_memory=True: CPUOffloadPolicy(pin_memory=True) "
                         "needs CUDA (page-locked memory); pass --fsdp2-offload-pin-memory false on --device cpu")
    dist.init_process_group("cuda:nccl,cpu:gloo" if offload and device.kind == "cuda" else device.backend)
    unsupported = {"dp_replicate_size": 1, "modules_to_forward_prefetch": 0, "modules_to_backward_prefetch": 0,
                   "force_sum_reduction_for_comms": False, "cpu_ram_efficient_loading": False}
    for key, default in unsupported.items():
        if opts.get(key, default) != default:
            raise SystemExit(f"run_fsdp2.py: fsdp2 option {key}={opts[key]!r} is not set up by this reference "
                             f"(only {default!r})")
    if opts.get("dp_shard_size", 0) not in (0, dist.get_world_size()):
        raise SystemExit(f"run_fsdp2.py: fsdp2 option dp_shard_size={opts['dp_shard_size']!r} (HSDP) is not set up")
    cfg = zbmodel.Config.from_hf_json(os.path.join(work, "weights", "config.json"))
    load_dtype = torch.float32 if precision in ("fp32", "fp16") else torch.bfloat16
    # HF's parameter order in a block (self_attn, mlp, norms), as zerobench's fsdp2 backend keeps it:
    # the order of the per-parameter norms in clip_grad_norm_.
    net = zbmodel.LlamaForCausalLM(cfg, hf_order=True).to(load_dtype)
    zbmodel.load_weights(net, common.load_weights_file(work))
    policy = MixedPrecisionPolicy()
    if precision == "mixed":
        net = net.to(torch.float32)  # fsdp2_prepare_model's upcast of the bf16-loaded parameters
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                      reduce_dtype=_dtype(opts.get("reduce_dtype", ""), torch.bfloat16),
                                      output_dtype=_dtype(opts.get("output_dtype", ""), torch.bfloat16))
    if precision == "fp16":
        policy = MixedPrecisionPolicy(param_dtype=torch.float16,
                                      reduce_dtype=_dtype(opts.get("reduce_dtype", ""), torch.float16),
                                      output_dtype=_dtype(opts.get("output_dtype", ""), torch.float16))
    wrap_policy = opts.get("auto_wrap_policy", "TRANSFORMER_BASED_WRAP")
    if wrap_policy not in ("TRANSFORMER_BASED_WRAP", "NO_WRAP", "SIZE_BASED_WRAP"):
        raise SystemExit(f"run_fsdp2.py: fsdp2 option auto_wrap_policy={wrap_policy!r} is not set up by this reference")
    wrap_blocks = wrap_policy == "TRANSFORMER_BASED_WRAP"
    size_selected = []
    if wrap_policy == "SIZE_BASED_WRAP":
        # accelerate fsdp2_prepare_auto_wrap_policy's size branch, as fsdp2_prepare_model runs it:
        # every module but the root, bottom-up, with more than min_num_params parameters (none
        # when min_num_params <= 0: set_auto_wrap_policy passes no policy).
        min_num_params = int(opts.get("min_num_params", 0))
        if min_num_params > 0:
            size_selected = [n for n, m in reversed(list(_pop_order(net)))
                             if n and sum(p.numel() for p in m.parameters()) > min_num_params]
        if size_selected:  # zerobench refuses these up front; the reference says so if it is reached
            raise SystemExit("run_fsdp2.py: SIZE_BASED_WRAP selected " + ", ".join(size_selected) +
                             ": groups other than the root's are not compared")
    ac_mode = common.activation_checkpointing_mode(t, opts)  # opts: accelerate's fsdp_activation_checkpointing
    if ac_mode != "none":
        if not wrap_blocks:  # fsdp2_apply_ac calls the policy function, None under NO_WRAP
            raise SystemExit(f"run_fsdp2.py: activation checkpointing with auto_wrap_policy {wrap_policy}: "
                             "accelerate's fsdp2_apply_ac checkpoints the children of the modules its policy "
                             "selects (it calls None under NO_WRAP), not the decoder blocks zerobench checkpoints")
        apply_activation_checkpointing(net, zbmodel.checkpointed_blocks(len(net.model.layers), ac_mode))
    reshard = opts.get("reshard_after_forward", True)
    mesh = init_device_mesh(device.kind, (dist.get_world_size(),))
    off = CPUOffloadPolicy(pin_memory=pin) if offload else OffloadPolicy()
    for layer in (net.model.layers if wrap_blocks else []):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy, offload_policy=off)
    if opts.get("grouping", "root") == "accelerate":
        fully_shard(net.model.embed_tokens, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy,
                    offload_policy=off)
        fully_shard([net.model.norm, net.lm_head], mesh=mesh, reshard_after_forward=False, mp_policy=policy,
                    offload_policy=off)
    fully_shard(net, mesh=mesh, mp_policy=policy, offload_policy=off)  # reshard_after_forward=None: False for the root
    check_setup(net, reshard if wrap_blocks else None, policy, device, offload)
    runner = Fsdp2Runner(net, t, bool(t.get("sync_each_batch") or opts.get("sync_each_batch")), device,
                         amp=precision == "fp16")
    if wrap_policy == "NO_WRAP":
        runner.notes.append("auto_wrap_policy NO_WRAP: no block is wrapped; the blocks' parameters are in the root "
                            "group (accelerate fsdp2_prepare_model)")
    if wrap_policy == "SIZE_BASED_WRAP":
        runner.notes.append(f"auto_wrap_policy SIZE_BASED_WRAP, min_num_params {opts.get('min_num_params', 0)}: the "
                            "size policy (more parameters than that) selects no module but the root, so no block is "
                            "wrapped (accelerate fsdp2_prepare_auto_wrap_policy, fsdp2_prepare_model)")
    wrapped_blocks = [i + 1 for i, layer in enumerate(net.model.layers)
                      if any(type(m).__name__ == "CheckpointWrapper" for m in layer.children())]
    if wrapped_blocks:
        runner.notes.append("activation checkpointing: checkpoint_wrapper(child, preserve_rng_state=False) on " +
                            ("each block's self_attn, mlp and norms (accelerate fsdp2_apply_ac)" if ac_mode == "full" else
                             f"the self_attn, mlp and norms of blocks {wrapped_blocks} ({ac_mode}: 1-based count a "
                             "multiple of N, torchtitan's _apply_layer_sac; accelerate fsdp2_apply_ac on those blocks)"))
    return runner


def _pop_order(net):
    """accelerate utils/other.py get_module_children_bottom_up(net, return_fqns=True), reversed:
    the depth-first walk that pushes each module's named_children and pops the last."""
    stack = [("", net)]
    while stack:
        name, module = stack.pop()
        for child_name, child in module.named_children():
            stack.append((f"{name}.{child_name}" if name else child_name, child))
        yield name, module


def check_setup(net, reshard, policy, device, offload):
    """Fails unless every block's parameter group (under NO_WRAP, reshard None: the root group
    that holds the blocks) runs what zerobench was asked for: a 1-D mesh over all W ranks (no
    HSDP), reshard_after_forward as resolved (True: the post-forward mesh is the group's own;
    False: none; an int n: a shard mesh of n ranks, 1 meaning False and W meaning True, as
    _fsdp_init.py _get_post_forward_mesh_info normalises it; not checked for the root, whose
    None becomes False at lazy init), the MixedPrecisionPolicy, the offload policy, and every
    local shard on the rank's device (the CPU with offload)."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import HSDPMeshInfo
    world = dist.get_world_size()
    units = list(enumerate(net.model.layers)) if reshard is not None else [("root", net)]
    for i, layer in units:
        group = layer._get_fsdp_state()._fsdp_param_group
        if group is None:
            raise SystemExit(f"run_fsdp2.py: block {i} has no FSDP parameter group")
        info = group.mesh_info
        if isinstance(info, HSDPMeshInfo) or info.mesh.ndim != 1 or info.shard_mesh_size != world:
            raise SystemExit(f"run_fsdp2.py: block {i} shards over a mesh of shape {tuple(info.mesh.shape)}, "
                             f"expected ({world},)")
        post = group.post_forward_mesh_info
        if reshard is None:
            ok = True
        elif reshard is True or (not isinstance(reshard, bool) and reshard == world):
            ok = post is info
        elif reshard is False or reshard == 1:
            ok = post is None
        else:
            ok = post is not None and post.shard_mesh_size == reshard
        if not ok:
            got = None if post is None else post.shard_mesh_size
            raise SystemExit(f"run_fsdp2.py: block {i} reshard_after_forward={reshard!r} but its post-forward mesh "
                             f"shards over {got} ranks")
        if group.mp_policy != policy:
            raise SystemExit(f"run_fsdp2.py: block {i} MixedPrecisionPolicy {group.mp_policy}, asked for {policy}")
        if any(fp.offload_to_cpu != offload for fp in group.fsdp_params):
            raise SystemExit(f"run_fsdp2.py: block {i} offload_to_cpu is not {offload}")
        if info.mesh.device_type != device.kind:
            raise SystemExit(f"run_fsdp2.py: block {i} mesh on {info.mesh.device_type}, asked for {device.kind}")
    want = torch.device("cpu") if offload else device.torch
    for name, p in net.named_parameters():
        if p.to_local().device != want:
            raise SystemExit(f"run_fsdp2.py: {name} is on {p.to_local().device}, asked for {want}")


def apply_activation_checkpointing(net, blocks):
    """accelerate 1.15 fsdp2_apply_ac: each child of a module the TRANSFORMER_BASED_WRAP policy
    matches (a decoder block) becomes checkpoint_wrapper(child, preserve_rng_state=False),
    registered under the same name (parameter order and names below the wrapper unchanged). With
    selective-layer:N (accelerate has no such mode) only the blocks zerobench checkpoints
    (`blocks`, 0-based) are treated so; full: every block."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    for i in blocks:
        layer = net.model.layers[i]
        for name, child in list(layer.named_children()):
            layer.register_module(name, checkpoint_wrapper(child, preserve_rng_state=False))
    wrapped = sum(1 for m in net.modules() if type(m).__name__ == "CheckpointWrapper")
    if wrapped != 4 * len(blocks):
        raise SystemExit(f"run_fsdp2.py: {wrapped} modules under checkpoint_wrapper, expected 4 in each of "
                         f"{len(blocks)} blocks")


class Fsdp2Runner:
    name = "PyTorch FSDP2 (fully_shard)"
    version = torch.__version__

    def __init__(self, net, train, sync_each_batch, device, amp=False):
        self.model, self.train, self.device = net, train, device
        self.optimizer = common.adamw(net.parameters(), train)
        self.sync_each_batch = sync_each_batch
        self.amp = common.AmpScaler(device) if amp else None
        self.notes = [f"{common.adamw_name(train)} over the DTensor parameters" +
                      (" (HF Trainer's default optimizer)" if train.get("adamw_impl", "fused") == "fused" else "")]
        self.scheduler = common.hf_scheduler(train, self.optimizer)  # HF Trainer's, after its optimizer
        if self.scheduler is not None:
            self.notes.append(common.hf_scheduler_note(train))

    def forward_backward(self, tokens, targets, loss_scale, last_micro_batch, position_ids=None):
        self.model.set_requires_gradient_sync(last_micro_batch or self.sync_each_batch)
        return common.accelerate_backward(self.model, self.amp, tokens, targets, position_ids, loss_scale,
                                          self.train["grad_accum"])

    def optimizer_step(self, lr):
        from torch.distributed.tensor import DTensor
        clip = self.train["grad_clip"]
        if self.amp:
            self.amp.unscale_(self.optimizer)  # accelerator.clip_grad_norm_ unscales first
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else math.inf)
        value = norm.full_tensor().item() if isinstance(norm, DTensor) else norm.item()
        if self.scheduler is None:  # else transformers' scheduler set the group lr (common.hf_scheduler)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.last_lr = common.group_lr(self.optimizer)
        if self.amp:
            self.amp.step(self.optimizer)
        else:
            self.optimizer.step()
        common.step_hf_scheduler(self.scheduler, self.amp)
        self.optimizer.zero_grad(set_to_none=True)
        return float(value)

    def model_state_bytes(self):
        """params = each parameter's padded local shard storage (FSDPParam._sharded_param_data;
        ranks may differ) plus any unsharded/all-gather output still allocated; grads = the
        local gradient storages (deduplicated: gradients may be views of one reduce-scatter
        output); optimizer = AdamW exp_avg + exp_avg_sq (unpadded local shapes), `step` scalars
        separately. Each by location (see the module docstring): the device categories at the
        top level, the host ones under "host" (with whether they are page-locked) when any."""
        held = common.storage_counter()
        dev = {"params": 0, "grads": 0, "optimizer": 0}
        host = {"params": 0, "grads": 0, "optimizer": 0}
        pinned = []
        offloaded = {}  # id(sharded parameter) -> FSDPParam.offload_to_cpu

        def add(category, t, offload):
            n = held(t)
            if n == 0:
                return
            local = t.to_local() if hasattr(t, "to_local") else t
            on_host = local.device.type == "cpu" and (self.device.kind != "cpu" or offload)
            (host if on_host else dev)[category] += n
            if on_host and category != "optimizer":
                pinned.append(local.is_pinned() if self.device.kind == "cuda" else False)

        for m in self.model.modules():
            state = getattr(m, "_get_fsdp_state", None)
            group = state()._fsdp_param_group if state else None
            if group is None:
                continue
            for fp in group.fsdp_params:
                offloaded[id(fp.sharded_param)] = fp.offload_to_cpu
                add("params", fp._sharded_param_data, fp.offload_to_cpu)
                for out in getattr(fp, "all_gather_outputs", []):
                    add("params", out, False)
                add("params", getattr(fp, "_unsharded_param", None), False)
        for p in self.model.parameters():
            add("grads", p.grad, offloaded.get(id(p), False))
        step_counters = 0
        for p, s in self.optimizer.state.items():
            add("optimizer", s["exp_avg"], offloaded.get(id(p), False))
            add("optimizer", s["exp_avg_sq"], offloaded.get(id(p), False))
            step_counters += held(s["step"])
        buffers = common.module_buffer_bytes(self.model, held)
        out = {"params": dev["params"], "master_params": 0, "grads": dev["grads"], "optimizer": dev["optimizer"],
               "buffers": buffers, "optimizer_step_counters": step_counters}
        if any(host.values()):
            out["host"] = {"params": host["params"], "master_params": 0, "grads": host["grads"],
                           "optimizer": host["optimizer"], "buffers": 0, "pinned": bool(pinned) and all(pinned)}
        return {"bytes": out}


if __name__ == "__main__":
    common.run(make_runner)
