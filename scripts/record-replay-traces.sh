#!/usr/bin/env bash
# record-replay-traces.sh — records the traces tests/test_replay.cpp replays (docs/projection.md
# §5a): each backend on the tiny model at W=2 and W=4 (Gloo, 1 thread per rank, 2 profiled
# steps, `--trace`), and ZeRO-3 once more with small buckets and a low persistence threshold
# (tests/data/replay/ds_small_buckets.json) so that its per-module prefetches and reduce-scatter
# buckets overlap compute. Each run is trimmed to what the replay reads: NAME.report.json (the
# report's config, env and run_id) and NAME.trace.json (the trace's complete events on the
# training thread's lanes: NVTX ranges, compute spans, collectives in flight; ts/dur to the ns).
# Usage: scripts/record-replay-traces.sh [OUT_DIR]   (default tests/data/replay)
# It records once; the test never measures time. Re-recording changes the committed numbers.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${BUILD_DIR:-${root}/build}/bin/zerobench"
out="${1:-${root}/tests/data/replay}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
mkdir -p "${out}"
common=(--model tiny --precision fp32 --threads 1 --micro-batch 2 --seq-len 128 --steps 3 --warmup 1
        --profile-steps 2 --data markov --quiet)
record() {  # record NAME W ARGS...
  local name="$1" w="$2"
  shift 2
  "${bin}" run --nproc "${w}" "${common[@]}" "$@" --trace "${tmp}/${name}.trace.json" --out "${tmp}/${name}.json"
  python3 - "${tmp}/${name}.json" "${tmp}/${name}.trace.json" "${out}/${name}" <<'EOF'
import json, sys
report, trace, dest = (json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3])
lanes = {1000000, 1000002, 1000003}  # profiler/chrome_trace.hpp: NVTX, compute spans, collectives
events = [{k: e[k] for k in ("ph", "name", "pid", "tid", "ts", "dur", "args") if k in e}
          for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("tid") in lanes]
for e in events:
    e["ts"], e["dur"] = round(e["ts"], 3), round(e["dur"], 3)
    if "args" in e:
        e["args"] = {"bytes": e["args"]["bytes"]} if "bytes" in e["args"] else None
        if e["args"] is None: del e["args"]
note = "trimmed by scripts/record-replay-traces.sh; replayed by tests/test_replay.cpp"
json.dump(dict({k: report[k] for k in ("run_id", "env", "config")}, note=note), open(dest + ".report.json", "w"),
          separators=(",", ":"))
json.dump({"traceEvents": events, "otherData": dict(trace.get("otherData", {}), note=note)},
          open(dest + ".trace.json", "w"), separators=(",", ":"))
EOF
}
for w in 2 4; do
  for backend in ddp fsdp fsdp2 zero3; do record "${backend}_w${w}" "${w}" --backend "${backend}"; done
  record "zero3_small_buckets_w${w}" "${w}" --backend zero3 --deepspeed-config "${root}/tests/data/replay/ds_small_buckets.json"
done
ls -l "${out}"
