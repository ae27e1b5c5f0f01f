"""comm_counter.py — counts every torch.distributed collective the frameworks issue, per kind, in
zerobench's byte convention (backends/common/comm.hpp, nccl-tests' "size"):
all-gather = output bytes, reduce-scatter = input bytes, all-reduce / broadcast = tensor bytes.

Owns: wrapping torch.distributed's collective entry points. install() must run before a
framework binds them: DeepSpeed's TorchBackend stores torch.distributed.all_gather_into_tensor
and reduce_scatter_tensor in attributes when deepspeed.init_distributed() builds it
(deepspeed/comm/torch.py, get_all_gather_function / get_reduce_scatter_function); FSDP1 and
FSDP2 look functions up on the `dist` module at call time. Must not: change what a collective
does (a wrapper counts, then calls the original with the same arguments).

Functional collectives (DTensor's redistributions) are counted too. Collectives outside the four
kinds (barrier, object collectives, send/recv, ...) are counted under "other" by function name,
so nothing goes unseen. ZEROBENCH_CROSSVAL_TRACE=1 also records every call with its Python
callers (ZEROBENCH_CROSSVAL_TRACE_DEPTH frames, default 4) in each step's "calls".
"""
import functools
import os
import traceback

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


# function name -> (kind, bytes(args, kwargs)); signatures as in torch/distributed/distributed_c10d.py.
_COUNTED = {
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
}


def _group_size(group):
    import torch.distributed._functional_collectives as funcol
    return funcol._expand_group(group)[2]


# Functional collectives (torch.distributed._functional_collectives): what DTensor uses to
# redistribute, e.g. the Partial -> Replicate all-reduce of FSDP2's gradient norm.
_FUNCOL = {
    "broadcast": ("broadcast", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    "all_reduce": ("all_reduce", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    "all_reduce_coalesced": ("all_reduce", lambda a, k: _list_bytes(_first(a, k, 0, "self"))),
    "all_gather_tensor": ("all_gather", lambda a, k: _nbytes(_first(a, k, 0, "self")) * _group_size(_first(a, k, 2, "group"))),
    "all_gather_tensor_autograd": ("all_gather",
                                   lambda a, k: _nbytes(_first(a, k, 0, "self")) * _group_size(_first(a, k, 2, "group"))),
    "all_gather_into_tensor_coalesced": ("all_gather",
                                         lambda a, k: _list_bytes(_first(a, k, 0, "self")) * _group_size(_first(a, k, 1, "group"))),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    "reduce_scatter_tensor_autograd": ("reduce_scatter", lambda a, k: _nbytes(_first(a, k, 0, "self"))),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", lambda a, k: _list_bytes(_first(a, k, 0, "inputs"))),
}
_OTHER = ("barrier", "monitored_barrier", "all_gather_object", "broadcast_object_list", "gather", "scatter", "reduce",
          "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv", "batch_isend_irecv",
          "scatter_object_list", "gather_object")


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
        snap = {"kinds": {k: dict(v) for k, v in self.kinds.items()}, "other": dict(self.other)}
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
            if kind is None:
                COUNTER.other[name] = COUNTER.other.get(name, 0) + 1
            else:
                COUNTER.kinds[kind]["count"] += 1
                COUNTER.kinds[kind]["bytes"] += size_fn(args, kwargs)
            if TRACE:
                COUNTER.calls.append([name, size_fn(args, kwargs) if size_fn else 0, _caller()])
        _depth[0] += 1
        try:
            return original(*args, **kwargs)
        finally:
            _depth[0] -= 1

    counted._zerobench_counted = True
    return counted


def install():
    """Wraps the entry points on both torch.distributed and torch.distributed.distributed_c10d
    (the package re-exports the module's functions under separate names). Idempotent."""
    global _installed
    if _installed:
        return COUNTER
    for name in list(_COUNTED) + list(_OTHER):
        original = getattr(c10d, name, None) or getattr(dist, name, None)
        if original is None or getattr(original, "_zerobench_counted", False):
            continue
        kind, size_fn = _COUNTED.get(name, (None, None))
        wrapped = _wrap(name, original, kind, size_fn)
        for module in (dist, c10d):
            if getattr(module, name, None) is original:
                setattr(module, name, wrapped)
    import torch.distributed._functional_collectives as funcol
    for name, (kind, size_fn) in _FUNCOL.items():
        original = getattr(funcol, name, None)
        if original is not None and not getattr(original, "_zerobench_counted", False):
            setattr(funcol, name, _wrap("funcol." + name, original, kind, size_fn))
    _installed = True
    return COUNTER
