#!/usr/bin/env bash
# workload-table.sh [--check] — puts the committed workload study's table and findings
# (reports/results/cpu/workload/summary.md, written by `zerobench study workload` from the cells'
# reports) into docs/workload.md between its workload-study markers, or checks that they are there.
# Regenerate summary.md itself by re-running the study on that directory (it reuses every cell):
#   build/bin/zerobench study workload --out reports/results/cpu/workload
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode=write
[ "${1:-}" = "--check" ] && mode=--check
exec python3 "${root}/scripts/splice_table.py" workload-study "${mode}" \
  "${root}/reports/results/cpu/workload/summary.md" "${root}/docs/workload.md"
