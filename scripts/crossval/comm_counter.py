"""comm_counter.py — counts every torch.distributed collective the frameworks issue, per kind, in
zerobench's byte convention (backends/common/comm.hpp, nccl-tests' "size"):
all-gather = output bytes, reduce-scatter = input bytes, all-reduce / broadcast = tensor bytes.

Owns: wrapping torch.distributed's collective entry points at every level a framework can call
them from, so a collective is seen whichever spelling issued it:
  - torch.distributed / distributed_c10d (the in-place API): all_gather_into_tensor,
    _all_gather_base, all_gather, all_gather_coalesced, reduce_scatter_tensor,
    _reduce_scatter_base, reduce_scatter, all_reduce, all_reduce_coalesced, broadcast, and the
    "other" kinds: barrier, monitored_barrier, all_to_all, all_to_all_single, send, recv, isend,
    irecv, batch_isend_irecv, gather, scatter, reduce and the object collectives;
  - torch.distributed._functional_collectives (funcol, DTensor's redistributions: e.g. the
    Partial -> Replicate all-reduce of FSDP2's gradient norm), its autograd variants and its
    in-place remaps (all_gather_tensor_inplace, reduce_scatter_tensor_inplace,
    all_reduce_inplace, all_to_all_inplace, all_gather_inplace);
  - the ops those call, torch.ops._c10d_functional.* (all_reduce, all_reduce_, broadcast,
    broadcast_, all_gather_into_tensor(_out), reduce_scatter_tensor(_out), the _coalesced
    forms, all_to_all_single) and torch.ops._c10d_functional_autograd.*.
Only the outermost call counts (funcol.all_reduce calls torch.ops._c10d_functional.all_reduce;
all_gather_object calls all_gather), so nothing counts twice.

What torch 2.11 and DeepSpeed 0.19.8 call on the crossval paths (read in the installed sources):
FSDP1 and FSDP2 call dist.all_gather_into_tensor / dist.reduce_scatter_tensor / dist.all_reduce,
looked up on the module at call time (fsdp/_fully_shard/_fsdp_collectives.py,
DefaultAllGather / DefaultReduceScatter / foreach_reduce); DTensor calls funcol.<name> through
the module (tensor/placement_types.py, _redistribute.py); DeepSpeed's TorchBackend binds
torch.distributed.all_gather_into_tensor and reduce_scatter_tensor into attributes when
deepspeed.init_distributed() builds it (deepspeed/comm/torch.py, get_all_gather_function /
get_reduce_scatter_function), and calls distributed_c10d.all_gather_into_tensor inside a
_coalescing_manager for all_gather_coalesced — so install() must run before any framework
binds them. Must not: change what a collective does (a wrapper counts, then calls the original
with the same arguments).

Kinds: the four zerobench counts ("kinds") and every other kind by name ("other":
barrier, all_to_all, send, recv, ... with count and bytes), so nothing goes unseen. A call
through an explicit overload (torch.ops._c10d_functional.all_reduce.default) is not seen: none on
these paths. ZEROBENCH_CROSSVAL_TRACE=1 also records every call with its Python callers
(ZEROBENCH_CROSSVAL_TRACE_DEPTH frames, default 4) in each step's "calls".
"""
import functools
import os
import traceback

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

TRACE = os.environ.get("ZEROBENCH_CROSSVAL_TRACE") == "1"  # debugging: record every call and its caller
TRACE_DEPTH = int(os.environ.get("ZEROBENCH_CROSSVAL_TRACE_DEPTH", "4"))
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast")


def _nbytes(t):
    return t.numel() * t.element_size()


def _list_bytes(ts):
    return sum(_nbytes(t) for t in ts)


def _first(args, kwargs, index, name):
    return kwargs[name] if name in kwargs else args[index]


def _none(a, k):
    return 0


def _p2p_bytes(a, k):
    ops = _first(a, k, 0, "p2p_op_list")
    return sum(_nbytes(op.tensor) for op in ops)


# function name -> (kind, bytes(args, kwargs)); signatures as in torch/distributed/distributed_c10d.py.
_C10D = {
    "all_gather_into_tensor": ("all_gather", lambda a, k: _nbytes(_first(a, k, 0, "output_tensor"))),
    "_all_gather_base": ("all_gather", lambda a, k: _nbytes(_first(a, k, 0, "output_tensor"))),
    "all_gather": ("all_gather", lambda a, k: _list_bytes(_first(a, k, 0, "tensor_list"))),
    "all_gather_coalesced": ("all_gather", lambda a, k: sum(_list_bytes(l) for l in _first(a, k, 0, "output_tensor_lists"))),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a, k: _nbytes(_first(a, k, 1, "input"))),
    "_reduce_scatter_base": ("reduce_scatter", lambda a, k: _nbytes(_first(a, k, 1, "input"))),
    "reduce_scatter": ("reduce_scatter", lambda a, k: _list_bytes(_first(a, k, 1, "input_list"))),
    "all_reduce": ("all_reduce", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    "all_reduce_coalesced": ("all_reduce", lambda a, k: _list_bytes(_first(a, k, 0, "tensors"))),
    "broadcast": ("broadcast", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    # other kinds (zerobench's engines issue none of them in a step: any one is a difference)
    "barrier": ("barrier", _none),
    "monitored_barrier": ("barrier", _none),
    "all_to_all": ("all_to_all", lambda a, k: _list_bytes(_first(a, k, 0, "output_tensor_list"))),
    "all_to_all_single": ("all_to_all", lambda a, k: _nbytes(_first(a, k, 0, "output"))),
    "send": ("send", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    "isend": ("send", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    "recv": ("recv", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    "irecv": ("recv", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    "batch_isend_irecv": ("send_recv", _p2p_bytes),
    "gather": ("gather", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    "scatter": ("scatter", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    "reduce": ("reduce", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    "all_gather_object": ("object_collective", _none),
    "broadcast_object_list": ("object_collective", _none),
    "gather_object": ("object_collective", _none),
    "scatter_object_list": ("object_collective", _none),
}


def _group_size(group):
    import torch.distributed._functional_collectives as funcol
    return funcol._expand_group(group)[2]


def _ag_out(index, group_index):
    return lambda a, k: _nbytes(_first(a, k, index, "self")) * _group_size(_first(a, k, group_index, "group"))


# torch.distributed._functional_collectives (signatures as in that file).
_FUNCOL = {
    "broadcast": ("broadcast", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    "all_reduce": ("all_reduce", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    "all_reduce_coalesced": ("all_reduce", lambda a, k: _list_bytes(_first(a, k, 0, "self"))),
    "all_gather_tensor": ("all_gather", _ag_out(0, 2)),
    "all_gather_tensor_autograd": ("all_gather", _ag_out(0, 2)),
    "all_gather_into_tensor_coalesced": ("all_gather",
                                         lambda a, k: _list_bytes(_first(a, k, 0, "self")) * _group_size(_first(a, k, 1, "group"))),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    "reduce_scatter_tensor_autograd": ("reduce_scatter", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", lambda a, k: _list_bytes(_first(a, k, 0, "inputs"))),
    "all_to_all_single": ("all_to_all", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    "all_to_all_single_autograd": ("all_to_all", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    # the in-place remaps of the c10d API
    "all_gather_tensor_inplace": ("all_gather", lambda a, k: _nbytes(_first(a, k, 0, "output_tensor"))),
    "reduce_scatter_tensor_inplace": ("reduce_scatter", lambda a, k: _nbytes(_first(a, k, 1, "input"))),
    "all_reduce_inplace": ("all_reduce", lambda a, k: _nbytes(_first(a, k, 0, "tensor"))),
    "all_to_all_inplace": ("all_to_all", lambda a, k: _nbytes(_first(a, k, 0, "output"))),
    "all_gather_inplace": ("all_gather", lambda a, k: _list_bytes(_first(a, k, 0, "tensor_list"))),
}


def _op_group_size(a, index):
    return int(a[index])


# torch.ops._c10d_functional.<op> (schemas in torch/csrc/distributed/c10d/Functional.cpp):
# positional arguments as funcol passes them.
_OPS = {
    "all_reduce": ("all_reduce", lambda a, k: _nbytes(a[0])),
    "all_reduce_": ("all_reduce", lambda a, k: _nbytes(a[0])),
    "all_reduce_coalesced": ("all_reduce", lambda a, k: _list_bytes(a[0])),
    "all_reduce_coalesced_": ("all_reduce", lambda a, k: _list_bytes(a[0])),
    "broadcast": ("broadcast", lambda a, k: _nbytes(a[0])),
    "broadcast_": ("broadcast", lambda a, k: _nbytes(a[0])),
    "all_gather_into_tensor": ("all_gather", lambda a, k: _nbytes(a[0]) * _op_group_size(a, 1)),
    "all_gather_into_tensor_out": ("all_gather", lambda a, k: _nbytes(a[0]) * _op_group_size(a, 1)),
    "all_gather_into_tensor_coalesced": ("all_gather", lambda a, k: _list_bytes(a[0]) * _op_group_size(a, 1)),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a, k: _nbytes(a[0])),
    "reduce_scatter_tensor_out": ("reduce_scatter", lambda a, k: _nbytes(a[0])),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", lambda a, k: _list_bytes(a[0])),
    "all_to_all_single": ("all_to_all", lambda a, k: _nbytes(a[0])),
}
_AUTOGRAD_OPS = {
    "all_gather_into_tensor": _OPS["all_gather_into_tensor"],
    "reduce_scatter_tensor": _OPS["reduce_scatter_tensor"],
    "all_to_all_single": _OPS["all_to_all_single"],
}


def _caller():
    """The innermost frames outside torch.distributed and this file, as file:function."""
    frames = [f for f in traceback.extract_stack()[:-3] if "torch/distributed/distributed_c10d" not in f.filename]
    return " < ".join(f"{os.path.basename(f.filename)}:{f.name}" for f in reversed(frames[-TRACE_DEPTH:]))


class Counter:
    def __init__(self):
        self.active = False
        self.reset()

    def reset(self):
        self.kinds = {k: {"count": 0, "bytes": 0} for k in KINDS}
        self.other = {}
        self.calls = []  # with ZEROBENCH_CROSSVAL_TRACE=1: (function, bytes, caller) per call

    def snapshot(self):
        snap = {"kinds": {k: dict(v) for k, v in self.kinds.items()},
                "other": {k: dict(v) for k, v in self.other.items()}}
        if TRACE:
            snap["calls"] = list(self.calls)
        return snap


COUNTER = Counter()
_installed = False
_depth = [0]  # collectives are issued from the training thread only


def _wrap(name, original, kind, size_fn):
    @functools.wraps(original)
    def counted(*args, **kwargs):
        # Only the outermost call counts: all_gather_object / broadcast_object_list are built
        # from all_gather / broadcast calls that would otherwise count a second time.
        if COUNTER.active and _depth[0] == 0:
            nbytes = size_fn(args, kwargs)
            bucket = COUNTER.kinds if kind in KINDS else COUNTER.other
            entry = bucket.setdefault(kind, {"count": 0, "bytes": 0})
            entry["count"] += 1
            entry["bytes"] += nbytes
            if TRACE:
                COUNTER.calls.append([name, nbytes, _caller()])
        _depth[0] += 1
        try:
            return original(*args, **kwargs)
        finally:
            _depth[0] -= 1

    counted._zerobench_counted = True
    return counted


class _CountedOp:
    """Stands in for an OpOverloadPacket on torch.ops.<namespace>: a call counts, then runs the
    packet; every attribute (overloads, schema) is the packet's."""

    def __init__(self, name, packet, kind, size_fn):
        self._packet = packet
        self._call = _wrap(name, packet, kind, size_fn)
        self._zerobench_counted = True

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._packet, attr)


def _install_ops(namespace, table):
    ns = getattr(torch.ops, namespace, None)
    if ns is None:
        return
    for op, (kind, size_fn) in table.items():
        try:
            packet = getattr(ns, op)
        except (AttributeError, RuntimeError):
            continue
        if not getattr(packet, "_zerobench_counted", False):
            setattr(ns, op, _CountedOp(f"torch.ops.{namespace}.{op}", packet, kind, size_fn))


def install():
    """Wraps the entry points on torch.distributed and torch.distributed.distributed_c10d (the
    package re-exports the module's functions under separate names), on funcol, and on
    torch.ops._c10d_functional(_autograd). Idempotent."""
    global _installed
    if _installed:
        return COUNTER
    for name, (kind, size_fn) in _C10D.items():
        original = getattr(c10d, name, None) or getattr(dist, name, None)
        if original is None or getattr(original, "_zerobench_counted", False):
            continue
        wrapped = _wrap(name, original, kind, size_fn)
        for module in (dist, c10d):
            if getattr(module, name, None) is original:
                setattr(module, name, wrapped)
    import torch.distributed._functional_collectives as funcol
    for name, (kind, size_fn) in _FUNCOL.items():
        original = getattr(funcol, name, None)
        if original is not None and not getattr(original, "_zerobench_counted", False):
            setattr(funcol, name, _wrap("funcol." + name, original, kind, size_fn))
    _install_ops("_c10d_functional", _OPS)
    _install_ops("_c10d_functional_autograd", _AUTOGRAD_OPS)
    _installed = True
    return COUNTER
