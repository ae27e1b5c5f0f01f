#!/usr/bin/env bash
# replay-table.sh — the table of docs/projection.md §5a, generated from the committed traces in
# tests/data/replay/ (scripts/record-replay-traces.sh): each run's traced steps replayed through
# its own schedule (`zerobench project REPORT --replay TRACE`), error = (replayed - measured) /
# measured over every rank and traced step. Usage: scripts/replay-table.sh [DATA_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${BUILD_DIR:-${root}/build}/bin/zerobench"
data="${1:-${root}/tests/data/replay}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
echo "| run | backend | W | rank-steps | measured s (median) | replayed s (median) | median error | largest abs error |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for w in 2 4; do
  for name in ddp fsdp fsdp2 zero3 zero3_small_buckets; do
    cell="${name}_w${w}"
    "${bin}" project "${data}/${cell}.report.json" --replay "${data}/${cell}.trace.json" --out "${tmp}/${cell}.json" > /dev/null
    python3 - "${tmp}/${cell}.json" "${cell}" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
m = statistics.median(s["measured_s"] for s in r["steps"])
p = statistics.median(s["replayed_s"] for s in r["steps"])
print(f"| {sys.argv[2]} | {r['backend']} | {r['world_size']} | {len(r['steps'])} | {m:.4f} | {p:.4f} | "
      f"{100 * r['median_error']:+.2f}% | {100 * r['max_abs_error']:.2f}% |")
PY
  done
done
