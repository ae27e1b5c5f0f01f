#!/usr/bin/env python3
"""gpu_first_summary.py WORK OUT_FILE — the SUMMARY.md of scripts/gpu-first.sh, rebuilt from WORK
after every cell (so a killed call still returns a complete summary of what ran).

Owns: reading WORK/cells.tsv (call, cell, status, exit, seconds, limit, log), WORK/running.tsv
(the cell in flight), the environment log, every run report (WORK/compare/runs/*.json,
WORK/reports/*.json), the compare verdict (WORK/compare/compare.json) and the crossval documents
(WORK/crossval/*.json); writing one Markdown page. Must not: fail on a missing or half-written
file (each is shown as missing or unreadable), or compute a number the reports do not hold.
Standard library only (the GPU image's venv has no extra packages).
"""
import csv
import glob
import json
import os
import sys

GIB = 2 ** 30


def load(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except Exception as e:  # missing, half-written, not JSON: say so, go on
        return None, f"{type(e).__name__}: {e}"


def rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [r for r in csv.reader(f, delimiter="\t") if len(r) == 7]


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def run_row(name, r):
    status = (r.get("status") or {}).get("state", "?")
    if status != "ok":
        err = str((r.get("status") or {}).get("error", ""))[:100].replace("|", "/").replace("\n", " ")
        return f"| {name} | | | | | | | | | | | | {status}: {err} |"
    s, env, cfg = r.get("summary", {}), r.get("env", {}), r.get("config", {})
    rank = (r.get("ranks") or [{}])[0]
    mem = rank.get("memory", {})
    cuda = mem.get("cuda") or {}
    prof = r.get("profile") or {}
    tok = (s.get("tokens_per_gpu_per_s") or {}).get("median")
    step = (s.get("step_time_s") or {}).get("median")
    world = f"{env.get('world_size', '?')}{' (emulated)' if env.get('emulated') else ''}"
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    backend = cfg.get("backend") if isinstance(cfg.get("backend"), dict) else {}
    layers = model.get("layers", model.get("num_layers", "?"))
    peak_a = cuda.get("peak_allocated_bytes")
    peak_r = cuda.get("peak_reserved_bytes")
    if str(env.get("device", "")).startswith("cpu"):  # a CPU run (the rehearsal): the counting allocator's peak
        peak_a, peak_r = mem.get("peak_tracked_bytes"), None
    return "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | ok |" % (
        name, backend.get("name", "?"), backend.get("precision", "?"), world, layers,
        fmt(tok, ".1f"), fmt(step, ".3f"), fmt(s.get("mfu"), ".3f"), fmt(s.get("mfu_vs_measured_gemm"), ".3f"),
        fmt(None if peak_a is None else peak_a / GIB, ".2f"), fmt(None if peak_r is None else peak_r / GIB, ".2f"),
        "%s / %s" % (fmt(prof.get("exposed_comm_s"), ".4f"), fmt(prof.get("overlap_ratio"), ".2f")))


def main():
    work, out_file = sys.argv[1], sys.argv[2]
    lines = ["# gpu-first summary", ""]
    calls = []
    if os.path.exists(os.path.join(work, "calls.tsv")):
        calls = [l.split("\t")[0] for l in open(os.path.join(work, "calls.tsv")).read().split("\n") if l]
    lines += [f"calls: {', '.join(calls) or 'none'}", ""]
    env = os.path.join(work, "logs", "environment.log")
    if os.path.exists(env):
        lines += ["```"] + open(env, errors="replace").read().strip().splitlines()[:18] + ["```", ""]

    cells = rows(os.path.join(work, "cells.tsv"))
    running = rows(os.path.join(work, "running.tsv"))
    bad = [c for c in cells if c[2] in ("FAILED", "TIMEOUT")]
    lines += [f"{len(cells)} cells ended, {len(bad)} failed or timed out"
              + (": " + ", ".join(c[1] for c in bad) if bad else "")
              + (f"; in flight when this summary was written: {running[0][1]}" if running else ""), "",
              "| call | cell | status | exit | s | limit s | log |", "|---|---|---|---:|---:|---:|---|"]
    lines += [f"| {c[0]} | {c[1]} | {c[2]} | {c[3]} | {c[4]} | {c[5]} | {c[6]} |" for c in cells]
    for c in running:
        lines += [f"| {c[0]} | {c[1]} | in flight (killed, if this is the last summary written) | - | - | {c[5]} | {c[6]} |"]

    reports = sorted(glob.glob(os.path.join(work, "compare", "runs", "*.json"))) + \
        sorted(glob.glob(os.path.join(work, "reports", "*.json")))
    table = []
    for f in reports:
        if os.path.basename(f) == "index.json":
            continue
        r, err = load(f)
        name = os.path.splitext(os.path.basename(f))[0]
        table.append(run_row(name, r) if r is not None else f"| {name} | | | | | | | | | | | | unreadable: {err} |")
    lines += ["", "## The numbers", ""]
    if table:
        lines += ["MFU: against the datasheet's dense peak / against the bf16 GEMM this run measured "
                  "(docs/metrics.md). Peaks: the CUDA caching allocator's, rank 0 (CPU: the tracked peak). "
                  "Exposed comm / overlap: the traced steps (--profile).", "",
                  "| run | backend | precision | W | blocks | tokens/GPU/s | s/step | MFU | MFU vs GEMM | peak alloc GiB | peak reserved GiB | exposed comm s / overlap | status |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"] + table
    else:
        lines += ["no run reports yet"]

    cmp, err = load(os.path.join(work, "compare", "compare.json"))
    lines += ["", "## Comparison (the blog's accelerate FSDP file vs its DeepSpeed ZeRO-3 file)", ""]
    if cmp is not None:
        lines += [str(cmp.get("verdict", "no verdict")), "", "(compare.md beside this file: Table 2/3 with intervals)"]
    else:
        lines += ["no compare.json" + (f" ({err})" if err and "No such file" not in err else "")]

    docs = sorted(glob.glob(os.path.join(work, "crossval", "*.json")))
    lines += ["", "## Crossval on the device (W=1)", ""]
    if not docs:
        lines += ["no crossval documents"]
    for f in docs:
        doc, err = load(f)
        name = os.path.splitext(os.path.basename(f))[0]
        if doc is None:
            lines += [f"- {name}: unreadable ({err})"]
            continue
        v = doc.get("verdict", {})
        lines += [f"- {name} ({doc.get('device', {}).get('kind', 'device not recorded')}, {doc.get('upstream', {}).get('name', '?')} "
                  f"{doc.get('upstream', {}).get('version', '')}): {'agree' if v.get('agree') else 'DISAGREE'}"
                  + (" — " + "; ".join(v.get("reasons", []))[:400] if v.get("reasons") else "")]
        for m in doc.get("modes", []):
            t = m.get("tolerance", {})
            lines += [f"  - {m.get('precision')}: max loss rel diff {m.get('max_loss_rel_diff', '-')}, max grad-norm "
                      f"rel diff {m.get('max_grad_norm_rel_diff', '-')} (tolerance {t.get('loss_rel', '-')} / "
                      f"{t.get('grad_norm_rel', '-')}); comm equal {m.get('comm_equal', '-')}"]

    for c in bad:
        log = os.path.join(work, c[6])
        tail = open(log, errors="replace").read().strip().splitlines()[-10:] if os.path.exists(log) else ["(no log)"]
        lines += ["", f"## {c[1]} ({c[0]}): {c[2]} (exit {c[3]}, {c[4]} s of {c[5]})", "```"] + tail + ["```"]
    with open(out_file, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
