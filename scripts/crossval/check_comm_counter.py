"""check_comm_counter.py — checks scripts/crossval/comm_counter.py on one Gloo rank: every
collective spelling a framework may use (the c10d in-place API, funcol, its in-place remaps, the
torch.ops._c10d_functional ops) counts exactly once, under the right kind, with zerobench's bytes.
Point-to-point calls cannot run in a world of one; for them the wrapper must be installed.

  python check_comm_counter.py [--drop NAME]

--drop NAME restores the original of one c10d function after install() (a planted gap): the
check must then fail naming it (tests/test_crossval.cpp runs both). Exit 0: all counted; 1: a
call was missed, double-counted or mis-sized (each printed).
"""
import argparse
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import comm_counter

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--drop", default="", help="un-wrap this c10d function (planted gap)")
args = p.parse_args()

originals = {name: getattr(c10d, name) for name in comm_counter._C10D if hasattr(c10d, name)}
counter = comm_counter.install()
if args.drop:
    setattr(dist, args.drop, originals[args.drop])
    setattr(c10d, args.drop, originals[args.drop])
init_file = tempfile.mktemp(prefix="zb_comm_counter_")
dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=0, world_size=1)
import torch.distributed._functional_collectives as funcol  # noqa: E402

WORLD = dist.group.WORLD
t = torch.ones(8)  # 32 bytes
problems = []


def check(label, kind, nbytes, call):
    counter.reset()
    counter.active = True
    try:
        out = call()
        if isinstance(out, torch.Tensor):
            funcol.wait_tensor(out) if isinstance(out, funcol.AsyncCollectiveTensor) else None
    except Exception as e:  # noqa: BLE001 — a backend may refuse a call; the wrapper counted it already
        print(f"  ({label}: {type(e).__name__}: {str(e).splitlines()[0][:80]})")
    counter.active = False
    snap = counter.snapshot()
    seen = {k: v for k, v in {**snap["kinds"], **snap["other"]}.items() if v["count"]}
    want = {kind: {"count": 1, "bytes": nbytes}}
    status = "ok" if seen == want else "WRONG"
    if seen != want:
        problems.append(f"{label}: counted {seen}, expected {want}")
    print(f"{status:5} {label}: {seen}")


group_name = c10d._get_group_name(WORLD) if hasattr(c10d, "_get_group_name") else WORLD.group_name
check("dist.all_gather_into_tensor", "all_gather", 32, lambda: dist.all_gather_into_tensor(torch.empty(8), t))
check("dist._all_gather_base", "all_gather", 32, lambda: dist._all_gather_base(torch.empty(8), t))
check("c10d.all_gather_into_tensor", "all_gather", 32, lambda: c10d.all_gather_into_tensor(torch.empty(8), t))
check("dist.all_gather", "all_gather", 32, lambda: dist.all_gather([torch.empty(8)], t))
check("dist.reduce_scatter_tensor", "reduce_scatter", 32, lambda: dist.reduce_scatter_tensor(torch.empty(8), t.clone()))
check("dist._reduce_scatter_base", "reduce_scatter", 32, lambda: dist._reduce_scatter_base(torch.empty(8), t.clone()))
check("dist.reduce_scatter", "reduce_scatter", 32, lambda: dist.reduce_scatter(torch.empty(8), [t.clone()]))
check("dist.all_reduce", "all_reduce", 32, lambda: dist.all_reduce(t.clone()))
check("dist.broadcast", "broadcast", 32, lambda: dist.broadcast(t.clone(), 0))
check("dist.barrier", "barrier", 0, lambda: dist.barrier())
check("dist.all_to_all_single", "all_to_all", 32, lambda: dist.all_to_all_single(torch.empty(8), t))
check("dist.all_to_all", "all_to_all", 32, lambda: dist.all_to_all([torch.empty(8)], [t]))
check("dist.all_gather_object", "object_collective", 0, lambda: dist.all_gather_object([None], {"a": 1}))
check("dist.broadcast_object_list", "object_collective", 0, lambda: dist.broadcast_object_list([1], 0))
check("funcol.all_reduce", "all_reduce", 32, lambda: funcol.all_reduce(t, "sum", WORLD))
check("funcol.broadcast", "broadcast", 32, lambda: funcol.broadcast(t, 0, WORLD))
check("funcol.all_gather_tensor", "all_gather", 32, lambda: funcol.all_gather_tensor(t, 0, WORLD))
check("funcol.reduce_scatter_tensor", "reduce_scatter", 32, lambda: funcol.reduce_scatter_tensor(t, "sum", 0, WORLD))
check("funcol.all_to_all_single", "all_to_all", 32, lambda: funcol.all_to_all_single(t, None, None, WORLD))
check("funcol.all_reduce_inplace", "all_reduce", 32, lambda: funcol.all_reduce_inplace(t.clone(), group=WORLD))
check("funcol.all_gather_tensor_inplace", "all_gather", 32,
      lambda: funcol.all_gather_tensor_inplace(torch.empty(8), t, group=WORLD))
check("funcol.reduce_scatter_tensor_inplace", "reduce_scatter", 32,
      lambda: funcol.reduce_scatter_tensor_inplace(torch.empty(8), t.clone(), group=WORLD))
check("funcol.all_gather_inplace", "all_gather", 32, lambda: funcol.all_gather_inplace([torch.empty(8)], t, group=WORLD))
check("funcol.all_to_all_inplace", "all_to_all", 32, lambda: funcol.all_to_all_inplace(torch.empty(8), t, group=WORLD))
ops = torch.ops._c10d_functional
check("torch.ops._c10d_functional.all_reduce", "all_reduce", 32, lambda: ops.wait_tensor(ops.all_reduce(t, "sum", group_name)))
check("torch.ops._c10d_functional.all_reduce_", "all_reduce", 32, lambda: ops.wait_tensor(ops.all_reduce_(t.clone(), "sum", group_name)))
check("torch.ops._c10d_functional.all_gather_into_tensor", "all_gather", 32,
      lambda: ops.wait_tensor(ops.all_gather_into_tensor(t, 1, group_name)))
check("torch.ops._c10d_functional.reduce_scatter_tensor", "reduce_scatter", 32,
      lambda: ops.wait_tensor(ops.reduce_scatter_tensor(t, "sum", 1, group_name)))
check("torch.ops._c10d_functional.broadcast", "broadcast", 32, lambda: ops.wait_tensor(ops.broadcast(t, 0, group_name)))
for name in ("send", "recv", "isend", "irecv", "batch_isend_irecv", "monitored_barrier", "gather", "scatter", "reduce"):
    if not getattr(getattr(dist, name), "_zerobench_counted", False):
        problems.append(f"dist.{name}: not wrapped")
dist.destroy_process_group()
try:
    os.unlink(init_file)
except OSError:
    pass
for line in problems:
    print("comm_counter: " + line, file=sys.stderr)
print("comm_counter: " + ("every spelling counted once" if not problems else f"{len(problems)} problem(s)"))
sys.exit(1 if problems else 0)
