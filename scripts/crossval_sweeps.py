#!/usr/bin/env python3
"""crossval_sweeps.py — the crossval sweep points CI no longer runs (scripts/crossval-sweeps.sh runs
this): each point is one `zerobench crossval` with the flags its CI test had, checked with the
assertions that test made, and the outcome written to the committed summary
reports/results/cpu/crossval-sweeps/sweeps.json (+ sweeps.md). CI keeps one representative of each
kind (tests/test_crossval.cpp, tests/test_zero3_offload.cpp name theirs); this is the rest of each
sweep, so every property those tests proved is still proven, by a committed document.

Owns: the list of moved points (POINTS), the per-point checks (the tests' expect_agreement and their
extra assertions), the per-stage bucket ordering check, the summary's JSON and Markdown. Must not:
re-implement crossval's comparison — it reads the crossval documents `zerobench crossval` wrote.

  crossval_sweeps.py BIN OUT_DIR WORK_DIR [--summary-only | --check] [POINT...]
Exit 0 when every point passes every check, 1 when one fails (the summary says which and why), 2 on
bad input. --check runs nothing: exit 1 when the committed summary does not record every current point
(by name and command) passing and the bucket ordering holding (CI runs it: a point added or changed
without re-running the sweep fails there).
"""
import json
import os
import subprocess
import sys
import time

# The per-document rows of tests/test_crossval.cpp (document_lengths_file, per_document_flags).
LENGTHS_CSV = "length,count\n3,4\n7,6\n23,4\n40,4\n64,2\n90,2\n130,1\n"
GA = "--steps 2 --grad-accum 2 --micro-batch 2"
THREE = ("--layers 3 --hidden 96 --heads 6 --kv-heads 2 --precision bf16 --steps 2 --grad-accum 2 --micro-batch 1 "
         "--seq-len 32")
BUCKET = "--steps 2 --grad-accum 2 --micro-batch 1 --seq-len 32"
Z3OFF = ("--backend zero3 --precision bf16,fp32 --nproc 2 --model tiny --layers 2 --steps 3 --warmup 1 --micro-batch 2 --seq-len 32 "
         "--reduce-bucket-size 50000 --weight-decay 0.1")


def auto_bucket_file(work, backend):
    """tests/test_crossval.cpp bucket_cases: a DeepSpeed file with reduce_bucket_size "auto" (HF: hidden²)."""
    path = os.path.join(work, backend + "_auto_bucket.json")
    with open(path, "w") as f:
        f.write('{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", '
                '"bf16": {"enabled": true}, "zero_optimization": {"stage": %s, "reduce_bucket_size": "auto"}}'
                % backend[-1])
    return path


def bucket_point(backend, size):
    flag = "--reduce-bucket-size" if backend == "zero3" else "--zero-reduce-bucket-size"
    args = (f"--config {{auto_{backend}}} {BUCKET}" if size == "auto" else
            f"--backend {backend} --precision bf16 {flag} {size} {BUCKET}")
    return {"name": f"{backend}-bucket-{size}", "test": f"Crossval.Zero{backend[-1]}PacksItsBucketsAsDeepSpeed",
            "args": args, "nproc": 2, "upstream": "DeepSpeed ZeRO-" + backend[-1], "modes": 1, "steps": 2,
            "kind": "bucket", "backend": backend, "elements": 128 * 128 if size == "auto" else int(size)}


def pack_point(backend, precision, upstream):
    """Packed rows on one runner, checked with PackedBatchesTrainAsEveryFrameworkTrainsThem's assertions."""
    return {"name": f"{backend}-pack-{precision}", "test": "Crossval.PackedBatchesTrainAsEveryFrameworkTrainsThem",
            "args": f"--backend {backend} --precision {precision} {{pack}}", "nproc": 2, "upstream": upstream,
            "modes": 1, "steps": 2, "kind": "pack"}


# Each moved point: the test it came from, its crossval arguments (as that test ran them, W = `nproc`,
# --model tiny), what expect_agreement was given, and the extra checks of its kind.
def zero12_plain(stage, precision, test):
    """ZeRO-1/2 without offload at DeepSpeed's default bucket, checked with `test`'s assertions."""
    return {"name": f"zero{stage}-{precision}", "test": test,
            "args": f"--backend zero{stage} --precision {precision} {GA}", "nproc": 2,
            "upstream": f"DeepSpeed ZeRO-{stage}", "modes": 1, "steps": 2, "kind": "plain"}


POINTS = [
    # Zero3OffloadCrossval.AgreesWithDeepSpeedWithBothOffloads keeps both offloads together in CI.
    {"name": "zero3-offload-param", "test": "Zero3OffloadCrossval.AgreesWithDeepSpeedWithBothOffloads",
     "args": Z3OFF + " --zero3-offload-param cpu", "nproc": 2, "kind": "zero3-offload"},
    {"name": "zero3-offload-optimizer", "test": "Zero3OffloadCrossval.AgreesWithDeepSpeedWithBothOffloads",
     "args": Z3OFF + " --zero3-offload-optimizer cpu", "nproc": 2, "kind": "zero3-offload"},
    # ZeRO-1/2 offload_optimizer: CI keeps zero2 fp32 at W = 2 (Crossval.Zero2WithOffloadOptimizerAgreesWithDeepSpeedInFp32)
    # and both stages in bf16 at W = 3 (Crossval.Zero1AndZero2AreBitwiseWithDeepSpeedAtThreeRanks), with these checks.
    {"name": "zero1-offload-optimizer-bf16", "test": "Crossval.Zero2WithOffloadOptimizerAgreesWithDeepSpeedInFp32",
     "args": f"--backend zero1 --precision bf16 {GA} --zero-offload-optimizer cpu", "nproc": 2,
     "upstream": "DeepSpeed ZeRO-1", "modes": 1, "steps": 2, "kind": "zero12-offload"},
    {"name": "zero1-offload-optimizer-fp32", "test": "Crossval.Zero2WithOffloadOptimizerAgreesWithDeepSpeedInFp32",
     "args": f"--backend zero1 --precision fp32 {GA} --zero-offload-optimizer cpu", "nproc": 2,
     "upstream": "DeepSpeed ZeRO-1", "modes": 1, "steps": 2, "kind": "zero12-offload"},
    {"name": "zero2-offload-optimizer-bf16", "test": "Crossval.Zero2WithOffloadOptimizerAgreesWithDeepSpeedInFp32",
     "args": f"--backend zero2 --precision bf16 {GA} --zero-offload-optimizer cpu", "nproc": 2,
     "upstream": "DeepSpeed ZeRO-2", "modes": 1, "steps": 2, "kind": "zero12-offload"},
    # ZeRO-1/2 without offload at DeepSpeed's default bucket, both precisions (the test that ran them,
    # Crossval.Zero1AndZero2AgreeWithDeepSpeedInFp32, is gone): CI runs zero1 fp32 in
    # Crossval.Zero1PacksItsBucketsAsDeepSpeed (50,000, overlap_comm), zero2 fp32 in
    # Crossval.PaddedBatchesTrainAsDeepSpeedTrainsThem, both in bf16 in the bucket tests.
    *[zero12_plain(stage, precision, test) for stage, precision, test in (
        (1, "fp32", "Crossval.Zero1PacksItsBucketsAsDeepSpeed"),
        (2, "fp32", "Crossval.PaddedBatchesTrainAsDeepSpeedTrainsThem"),
        (1, "bf16", "Crossval.Zero1PacksItsBucketsAsDeepSpeed"),
        (2, "bf16", "Crossval.Zero2PacksItsBucketsAsDeepSpeed"))],
    # Crossval.Zero3AgreesWithDeepSpeedInFp32: CI keeps fp32 (bf16 at the default buckets runs in the packed
    # and checkpointed-blocks tests).
    {"name": "zero3-bf16", "test": "Crossval.Zero3AgreesWithDeepSpeedInFp32",
     "args": f"--backend zero3 --precision bf16 {GA}", "nproc": 2, "upstream": "DeepSpeed", "modes": 1,
     "steps": 2, "kind": "plain"},
    # Crossval.Fsdp2WithCpuOffloadPolicyAgreesWithPyTorchFsdp2: CI keeps mixed.
    {"name": "fsdp2-offload-fp32", "test": "Crossval.Fsdp2WithCpuOffloadPolicyAgreesWithPyTorchFsdp2",
     "args": f"--backend fsdp2 --precision fp32 {GA} --fsdp2-offload-policy cpu --fsdp2-offload-pin-memory false",
     "nproc": 2, "upstream": "FSDP2", "modes": 1, "steps": 2, "kind": "fsdp2-offload"},
    # Crossval.PackedBatchesTrainAsEveryFrameworkTrainsThem: CI keeps fsdp fp32 and zero3 bf16.
    pack_point("fsdp", "mixed", "FSDP1"),
    pack_point("zero1", "bf16", "DeepSpeed ZeRO-1"),
    pack_point("fsdp2", "fp32", "FSDP2"),
    pack_point("zero2", "bf16", "DeepSpeed ZeRO-2"),
    # Crossval.PaddedBatchesTrainAsDeepSpeedTrainsThem: CI keeps zero2 fp32.
    {"name": "fsdp-pad-fp32", "test": "Crossval.PaddedBatchesTrainAsDeepSpeedTrainsThem",
     "args": "--backend fsdp --precision fp32 {pad}", "nproc": 2, "upstream": "FSDP1", "modes": 1, "steps": 2,
     "kind": "pad"},
    # Crossval.Zero1AndZero2AreBitwiseWithDeepSpeedAtThreeRanks: CI keeps both stages with offload_optimizer.
    {"name": "zero2-three-ranks", "test": "Crossval.Zero1AndZero2AreBitwiseWithDeepSpeedAtThreeRanks",
     "args": "--backend zero2 " + THREE, "nproc": 3, "upstream": "DeepSpeed ZeRO-", "modes": 1, "steps": 2,
     "kind": "comm-equal"},
    {"name": "zero1-three-ranks-no-reduce-scatter", "test": "Crossval.Zero1AndZero2AreBitwiseWithDeepSpeedAtThreeRanks",
     "args": "--backend zero1 --zero-reduce-scatter false --zero-reduce-bucket-size 50000 " + THREE, "nproc": 3,
     "upstream": "DeepSpeed ZeRO-", "modes": 1, "steps": 2, "kind": "comm-equal"},
    # Crossval.Zero1PacksItsBucketsAsDeepSpeed runs overlap_comm in fp32; bf16 here.
    dict(bucket_point("zero1", "50000"), name="zero1-bucket-50000-overlap-bf16",
         args="--backend zero1 --precision bf16 --zero-reduce-bucket-size 50000 --zero-overlap-comm true " + BUCKET),
] + [bucket_point(b, s) for b in ("zero1", "zero2", "zero3") for s in ("auto", "50000", "300000")]
# (The bucket sweep runs every size, the CI representatives too: the ordering check compares them.)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def expect_agreement(doc, upstream, modes, steps, not_bitwise=()):
    """tests/test_crossval.cpp expect_agreement: the failures, as lines."""
    bad = []
    if not doc["verdict"]["agree"]:
        bad.append("verdict: " + "; ".join(doc["verdict"]["reasons"]))
    if upstream not in doc["upstream"]["name"]:
        bad.append(f"upstream {doc['upstream']['name']!r} is not {upstream!r}")
    if len(doc["modes"]) != modes:
        return bad + [f"{len(doc['modes'])} modes, not {modes}"]
    for m in doc["modes"]:
        p = m["precision"]
        if len(m["steps"]) != steps:
            bad.append(f"{p}: {len(m['steps'])} steps, not {steps}")
        for s in m["steps"]:
            if s["loss_rel_diff"] > m["tolerance"]["loss_rel"] or s["grad_norm_rel_diff"] > m["tolerance"]["grad_norm_rel"]:
                bad.append(f"{p}: step {s['step']} beyond the tolerance")
            if p not in not_bitwise and (s["loss_rel_diff"] != 0 or s["grad_norm_rel_diff"] != 0):
                bad.append(f"{p}: step {s['step']} not bitwise ({s['loss_rel_diff']}, {s['grad_norm_rel_diff']})")
        for key in ("all_finite", "lr_equal", "batches_equal", "model_states_differences_explained",
                    "comm_differences_explained"):
            if not m[key]:
                bad.append(f"{p}: {key} is false")
        if m["comm_ranks_compared"] != doc["world_size"]:
            bad.append(f"{p}: {m['comm_ranks_compared']} ranks' collectives compared, not {doc['world_size']}")
        if not m["perf"]["upstream_tokens_per_gpu_per_s"] > 0:
            bad.append(f"{p}: no upstream throughput")
    return bad


def host_categories(mode):
    return {e["category"] for e in mode["model_states"]
            if e["category"].startswith("host.") and isinstance(e["upstream"], int) and e["upstream"] > 0}


def check(point, doc):
    """The failures of one point (the assertions of its CI test), and the facts the summary shows."""
    kind = point["kind"]
    facts = {}
    if kind == "zero3-offload":  # tests/test_zero3_offload.cpp Zero3OffloadCrossval
        bad = []
        for m in doc["modes"]:
            p = m["precision"]
            if m["max_loss_rel_diff"] > (0.0 if p == "bf16" else 1e-5):
                bad.append(f"{p}: max loss rel diff {m['max_loss_rel_diff']}")
            if m["max_grad_norm_rel_diff"] > 1e-5:
                bad.append(f"{p}: max grad-norm rel diff {m['max_grad_norm_rel_diff']}")
            if not m["comm_differences_explained"]:
                bad.append(f"{p}: collectives differ unexplained")
            for e in m["model_states"]:
                if not (e["equal"] or e.get("explanation")):
                    bad.append(f"{p}: rank {e['rank']} {e['category']} unexplained")
                if e["category"].startswith("host.") and not e["equal"]:
                    bad.append(f"{p}: rank {e['rank']} {e['category']} {e['zerobench']} vs upstream {e['upstream']}")
            if not host_categories(m):
                bad.append(f"{p}: nothing on the host")
            facts[p + " host"] = sorted(host_categories(m))
        return bad, facts
    bad = expect_agreement(doc, point["upstream"], point["modes"], point["steps"])
    if kind == "zero12-offload":
        for m in doc["modes"]:
            p = m["precision"]
            for e in m["model_states"]:
                c = e["category"]
                if c != "optimizer_step_counters" and not e["equal"]:
                    bad.append(f"{p}: rank {e['rank']} {c} not equal")
                if c in ("master_params", "optimizer") and e["upstream"] != 0:
                    bad.append(f"{p}: {c} on the device {e['upstream']}")
            want = {"host.params", "host.master_params", "host.grads", "host.optimizer", "host.pinned"}
            if host_categories(m) != want:
                bad.append(f"{p}: host categories {sorted(host_categories(m))}")
            facts[p + " host"] = sorted(host_categories(m))
    elif kind in ("pack", "pad"):
        if doc["train"].get("batching") != kind:
            bad.append(f"batching {doc['train'].get('batching')}")
    elif kind == "fsdp2-offload":  # Crossval.Fsdp2WithCpuOffloadPolicyAgreesWithPyTorchFsdp2
        for m in doc["modes"]:
            p = m["precision"]
            for e in m["model_states"]:
                if e["category"] in ("params", "grads", "optimizer") and e["upstream"] != 0:
                    bad.append(f"{p}: {e['category']} on the device {e['upstream']}")
            if host_categories(m) != {"host.params", "host.grads", "host.optimizer"}:
                bad.append(f"{p}: host categories {sorted(host_categories(m))}")
            facts[p + " host"] = sorted(host_categories(m))
    elif kind == "comm-equal":
        if doc["world_size"] != point["nproc"]:
            bad.append(f"world size {doc['world_size']}")
        if not doc["modes"][0]["comm_equal"]:
            bad.append("collectives not equal")
    elif kind == "bucket":
        backend = point["backend"]
        m = doc["modes"][0]
        if doc["backend"] != backend:
            bad.append(f"backend {doc['backend']}")
        for d in m["comm_differences"]:
            if not (backend == "zero3" and d["kind"] == "broadcast"):
                bad.append(f"comm difference {json.dumps(d)}")
        if backend != "zero3" and not m["comm_equal"]:
            bad.append("collectives not equal")
        ds = read_json(os.path.join(m["work_dir"], "ds_config.json"))
        if ds["zero_optimization"]["reduce_bucket_size"] != point["elements"]:
            bad.append(f"reduce_bucket_size {ds['zero_optimization']['reduce_bucket_size']}, not {point['elements']}")
        reductions = 0
        for s in m["steps"]:
            k = s["comm"]["reduce_scatter" if backend == "zero3" else "all_reduce"]
            if k["count"] != k["upstream_count"]:
                bad.append(f"step {s['step']}: {k['count']} reductions vs upstream {k['upstream_count']}")
            reductions += k["count"]
        facts["reduce_bucket_size"] = point["elements"]
        facts["reductions"] = reductions
    return bad, facts


def per_document(data, batching):
    """tests/test_crossval.cpp per_document_flags."""
    return f"--batching {batching} --data {data} --seq-len 64 --steps 2 --grad-accum 2 --micro-batch 2 --threads 1"


def command_of(point):
    """The point's command as the summary records it (the work folder's files named, not their paths)."""
    return "zerobench crossval " + point["args"].format(
        pack=per_document("lengths:LENGTHS", "pack"), pad=per_document("lengths:LENGTHS", "pad"),
        auto_zero1="AUTO_BUCKET_FILE", auto_zero2="AUTO_BUCKET_FILE", auto_zero3="AUTO_BUCKET_FILE") + (
        "" if point["kind"] == "zero3-offload" else f" --nproc {point['nproc']} --model tiny")


def stale(summary):
    """Why the committed summary does not record the current POINTS passing (empty when it does): every
    point by name with the command it has now and a pass, no point that is not one, the bucket ordering."""
    have = {e["name"]: e for e in summary["points"]}
    bad = []
    for p in POINTS:
        e = have.get(p["name"])
        if e is None:
            bad.append(f"{p['name']}: not in the summary")
        elif e["command"] != command_of(p):
            bad.append(f"{p['name']}: recorded as '{e['command']}', the point is now '{command_of(p)}'")
        elif not e["passed"]:
            bad.append(f"{p['name']}: failed ({'; '.join(e['failures'])})")
    bad += [f"{n}: in the summary, not a point" for n in sorted(set(have) - {p["name"] for p in POINTS})]
    bad += [f"bucket ordering of {b} fails" for b, o in summary["bucket_ordering"].items() if not o["passed"]]
    if set(summary["bucket_ordering"]) != {"zero1", "zero2", "zero3"}:
        bad.append(f"bucket ordering recorded for {sorted(summary['bucket_ordering'])}, not every stage")
    return bad


def run_point(bin_path, point, work):
    out = os.path.join(work, point["name"] + ".json")
    args = point["args"].format(pack=per_document(f"lengths:{work}/lengths.csv", "pack"),
                                pad=per_document(f"lengths:{work}/lengths.csv", "pad"),
                                auto_zero1=auto_bucket_file(work, "zero1"), auto_zero2=auto_bucket_file(work, "zero2"),
                                auto_zero3=auto_bucket_file(work, "zero3"))
    if point["kind"] != "zero3-offload":  # tests/test_crossval.cpp run_case adds these
        args += f" --nproc {point['nproc']} --model tiny"
    argv = [bin_path, "crossval"] + args.split() + ["--quiet", "--out", out]
    t0 = time.time()
    if os.environ.get("ZB_SWEEPS_REUSE") == "1" and os.path.exists(out):  # re-check the documents already there
        r = subprocess.CompletedProcess(argv, 0, "")
        wall = read_json(out + ".wall") if os.path.exists(out + ".wall") else 0.0
    else:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wall = time.time() - t0
        with open(out + ".wall", "w") as f:
            json.dump(wall, f)
    entry = {"name": point["name"], "test": point["test"], "command": command_of(point),
             "exit": r.returncode, "wall_s": round(wall, 1)}
    if r.returncode != 0 or not os.path.exists(out):
        tail = [line for line in r.stdout.splitlines() if line.strip()][-3:]
        entry.update(passed=False, failures=[f"exit {r.returncode}: " + " | ".join(tail)])
        return entry
    doc = read_json(out)
    bad, facts = check(point, doc)
    entry["upstream"] = doc["upstream"]
    entry["modes"] = [{"precision": m["precision"], "max_loss_rel_diff": m["max_loss_rel_diff"],
                       "max_grad_norm_rel_diff": m["max_grad_norm_rel_diff"], "comm_equal": m["comm_equal"],
                       "model_states_equal": m["model_states_equal"]} for m in doc["modes"]]
    entry["facts"] = facts
    entry.update(passed=not bad, failures=bad)
    return entry


def ordering_failures(entries):
    """The bucket sweep's own check: per stage, auto (16,384) < 50,000 < 300,000 in size means
    strictly more reductions (so that the three sizes are not the same run three times)."""
    by_name = {e["name"]: e for e in entries}
    out = {}
    for b in ("zero1", "zero2", "zero3"):
        n = {s: by_name.get(f"{b}-bucket-{s}", {}).get("facts", {}).get("reductions") for s in ("auto", "50000", "300000")}
        if None in n.values():
            continue
        ok = n["auto"] > n["50000"] > n["300000"]
        out[b] = {"reductions": n, "passed": ok}
    return out


def fmt(x):
    return "0 (bitwise)" if x == 0 else f"{x:.2g}"


def write_md(summary, path):
    lines = ["# Crossval sweeps (generated by scripts/crossval-sweeps.sh)", "",
             "The sweep points CI does not run: each is one `zerobench crossval` with the flags its CI test had",
             "(W = 2 unless named, `tiny`), checked with that test's assertions; CI runs one representative of each",
             "sweep (docs/testing.md, \"What CI runs and what the sweeps prove\"). Upstream: " +
             ", ".join(sorted({f"{e['upstream']['name']} {e['upstream']['version']}" for e in summary["points"]
                               if "upstream" in e})) + f". {summary['passed']} of {len(summary['points'])} points pass;"
             f" the sweep took {summary['wall_s']} s of wall time on {summary['machine']}.", "",
             "| point | from CI test | modes | max loss rel diff | max grad-norm rel diff | facts | result |",
             "|---|---|---|---:|---:|---|---|"]
    for e in summary["points"]:
        modes = e.get("modes", [])
        facts = "; ".join(f"{k}: {', '.join(v) if isinstance(v, list) else v}" for k, v in e.get("facts", {}).items())
        result = "pass" if e["passed"] else "FAIL: " + "; ".join(e["failures"])
        lines.append(f"| {e['name']} | {e['test']} | {', '.join(m['precision'] for m in modes) or '-'} | "
                     f"{', '.join(fmt(m['max_loss_rel_diff']) for m in modes) or '-'} | "
                     f"{', '.join(fmt(m['max_grad_norm_rel_diff']) for m in modes) or '-'} | {facts} | {result} |")
    if summary["bucket_ordering"]:
        lines += ["", "Bucket sizes (each stage's reductions over both steps on rank 0; smaller buckets must mean more):", "",
                  "| stage | auto (16,384) | 50,000 | 300,000 | result |", "|---|---:|---:|---:|---|"]
        for b, o in summary["bucket_ordering"].items():
            n = o["reductions"]
            lines.append(f"| {b} | {n['auto']} | {n['50000']} | {n['300000']} | {'pass' if o['passed'] else 'FAIL'} |")
    lines.append("")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines))
    os.replace(path + ".tmp", path)


def main(argv):
    if len(argv) < 3:
        print("usage: crossval_sweeps.py BIN OUT_DIR WORK_DIR [--summary-only | --check] [POINT...]", file=sys.stderr)
        return 2
    bin_path, out_dir, work = argv[:3]
    rest = argv[3:]
    summary_path = os.path.join(out_dir, "sweeps.json")
    if rest == ["--summary-only"]:
        write_md(read_json(summary_path), os.path.join(out_dir, "sweeps.md"))
        return 0
    if rest == ["--check"]:  # CI's freshness check (tests/test_crossval.cpp): runs nothing
        bad = stale(read_json(summary_path)) if os.path.exists(summary_path) else [f"{summary_path}: missing"]
        for line in bad:
            print(f"crossval-sweeps.sh: {summary_path}: {line}", file=sys.stderr)
        if bad:
            print("crossval-sweeps.sh: the committed sweeps are stale: run ./scripts/crossval-sweeps.sh "
                  "(the points named) and commit its summary", file=sys.stderr)
            return 1
        print(f"crossval-sweeps.sh: {summary_path} records every one of the {len(POINTS)} points passing")
        return 0
    names = {p["name"] for p in POINTS}
    for n in rest:
        if n not in names:
            print(f"crossval-sweeps.sh: '{n}' is not a sweep point ({', '.join(sorted(names))})", file=sys.stderr)
            return 2
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "lengths.csv"), "w") as f:
        f.write(LENGTHS_CSV)
    old = {e["name"]: e for e in read_json(summary_path)["points"]} if rest and os.path.exists(summary_path) else {}
    entries = []
    t0 = time.time()
    for p in POINTS:
        if rest and p["name"] not in rest:
            if p["name"] in old:
                entries.append(dict(old[p["name"]], test=p["test"]))  # the CI test that represents it now
            continue
        e = run_point(bin_path, p, work)
        print(f"[crossval-sweeps] {p['name']}: {'pass' if e['passed'] else 'FAIL ' + '; '.join(e['failures'])} "
              f"({e['wall_s']} s)", flush=True)
        entries.append(e)
    ordering = ordering_failures(entries)
    summary = {"schema": {"name": "zerobench.crossval_sweeps", "version": 1},
               "machine": f"{os.cpu_count()} CPUs, Gloo, 1 thread per rank",
               "wall_s": round(sum(e["wall_s"] for e in entries) if rest else time.time() - t0, 1),
               "points": entries, "bucket_ordering": ordering,
               "passed": sum(e["passed"] for e in entries)}
    with open(summary_path + ".tmp", "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    os.replace(summary_path + ".tmp", summary_path)
    write_md(summary, os.path.join(out_dir, "sweeps.md"))
    ok = all(e["passed"] for e in entries) and all(o["passed"] for o in ordering.values())
    print(f"[crossval-sweeps] {summary['passed']} of {len(entries)} points pass; bucket ordering "
          f"{'holds' if all(o['passed'] for o in ordering.values()) else 'FAILS'} — {summary_path} (+ sweeps.md)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
