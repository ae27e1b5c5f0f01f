#!/usr/bin/env python3
"""memory-estimate-table.py — the estimate-vs-measured table of docs/metrics.md, generated from
committed reports (a `zerobench matrix` output directory), never typed in.

    scripts/memory-estimate-table.py DIR                 # print the Markdown table
    scripts/memory-estimate-table.py DIR --update DOC    # replace the table between DOC's markers
    scripts/memory-estimate-table.py DIR --check DOC     # exit 1 unless DOC holds exactly that table

Per cell: the setting that makes it held out, the largest measured peak over ranks
(ranks[i].memory.peak_program_bytes, the program-order peak; peak_tracked_bytes in reports
recorded before it) next to that rank's estimate
(ranks[i].memory.estimated_peak_bytes), the per-rank peak/est range and the estimate's peak
moment. Markers: <!-- memory-estimate-table:NAME:begin --> ... <!-- ...:end -->, NAME = DIR's
last component.
"""
import json
import os
import sys

MIB = 1024.0 * 1024.0


def peak(rank):
    """A rank's measured peak: the program-order one, or the observed one in older reports."""
    m = rank["memory"]
    return m["peak_program_bytes"] if m.get("peak_program_bytes") is not None else m["peak_tracked_bytes"]

DEFAULTS = {"model": "tiny", "seq-len": "128", "micro-batch": "2", "grad-accum": "1"}


def setting(report):
    cfg = report["config"]
    m = cfg["model"]
    t = cfg["train"]
    parts = []
    dims = f'L{m["layers"]} H{m["hidden"]} heads {m["heads"]}/{m["kv_heads"]} F{m["ffn"]} V{m["vocab"]}'
    parts.append(f'{m.get("preset", "?")} ({dims})')
    if t["seq_len"] != 128:
        parts.append(f'T={t["seq_len"]}')
    if t["grad_accum"] != 1:
        parts.append(f'grad-accum {t["grad_accum"]}')
    mode = t.get("activation_checkpointing_mode", "full" if t["activation_checkpointing"] else "none")
    if mode == "full":
        parts.append("act. ckpt")
    elif mode != "none":
        parts.append(f"act. ckpt {mode}")
    opts = cfg["backend"].get("options", {})
    if opts.get("sharding_strategy") not in (None, "FULL_SHARD"):
        parts.append(f'{opts["sharding_strategy"]} (shard group {opts.get("shard_group_size")})')
    if "stage3_param_persistence_threshold" in opts and int(opts["stage3_param_persistence_threshold"]) != 100000:
        parts.append(f'persistence threshold {int(opts["stage3_param_persistence_threshold"])}')
    if "reduce_bucket_size" in opts and cfg["backend"]["name"] == "zero3" and int(opts["reduce_bucket_size"]) != 500000000:
        parts.append(f'reduce bucket {int(opts["reduce_bucket_size"])}')
    topo = report["ranks"][0]["memory"]["estimate"].get("topology", {})
    if topo and topo.get("ranks_per_node", 0) < topo.get("world", 0):
        parts.append(f'{topo["world"] // topo["ranks_per_node"]} torchrun nodes x {topo["ranks_per_node"]}')
    raf = opts.get("reshard_after_forward")
    if raf not in (None, "true", True):
        parts.append(f"reshard_after_forward={raf}")
    return ", ".join(parts)


def rows(directory):
    names = sorted(f for f in os.listdir(directory) if f.endswith(".json") and f != "index.json")
    out = ["| cell | setting | backend | precision | W | measured peak MiB | estimate MiB | peak/est (per rank) | est. peak moment |",
           "|---|---|---|---|---:|---:|---:|---:|---|"]
    for name in names:
        with open(os.path.join(directory, name)) as f:
            r = json.load(f)
        cell = name[:-5]
        cfg = r["config"]
        if r["status"]["state"] != "ok":
            out.append(f'| {cell} | | {cfg["backend"]["name"]} | {cfg["backend"]["precision"]} | | - | - | - | {r["status"]["state"]} |')
            continue
        ranks = r["ranks"]
        worst = max(ranks, key=peak)
        ratios = [peak(k) / k["memory"]["estimated_peak_bytes"] for k in ranks]
        lo, hi = min(ratios), max(ratios)
        rng = f"{lo:.3f}" if f"{lo:.3f}" == f"{hi:.3f}" else f"{lo:.3f}–{hi:.3f}"
        mem = worst["memory"]
        out.append(f'| {cell} | {setting(r)} | {cfg["backend"]["name"]} | {cfg["backend"]["precision"]} | '
                   f'{r["env"]["world_size"]} | {peak(worst) / MIB:.2f} | '
                   f'{mem["estimated_peak_bytes"] / MIB:.2f} | {rng} | {mem["estimate"]["peak_phase"]} |')
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    directory = argv[1].rstrip("/")
    table = rows(directory)
    if len(argv) == 2:
        sys.stdout.write(table)
        return 0
    if len(argv) != 4 or argv[2] not in ("--update", "--check"):
        sys.stderr.write(__doc__)
        return 2
    name = os.path.basename(directory)
    begin, end = f"<!-- memory-estimate-table:{name}:begin -->\n", f"<!-- memory-estimate-table:{name}:end -->"
    with open(argv[3]) as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        sys.stderr.write(f"{argv[3]}: no markers {begin.strip()} ... {end}\n")
        return 2
    a = doc.index(begin) + len(begin)
    b = doc.index(end)
    if argv[2] == "--check":
        if doc[a:b] != table:
            sys.stderr.write(f"{argv[3]}: the {name} table differs from the reports in {directory}; "
                             f"run scripts/memory-estimate-table.py {directory} --update {argv[3]}\n")
            return 1
        return 0
    with open(argv[3], "w") as f:
        f.write(doc[:a] + table + doc[b:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
