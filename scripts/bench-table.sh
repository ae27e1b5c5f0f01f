#!/usr/bin/env bash
# bench-table.sh — the README's benchmark table, generated from the committed cpu-smoke baseline
# (reports/baselines/cpu-smoke, written by refresh-baseline.sh), never typed in.
#   ./scripts/bench-table.sh          rewrite the table between README.md's bench-table markers
#   ./scripts/bench-table.sh --check  exit 1 if README.md differs from the generated table
# The table is `zerobench table DIR --baseline fsdp_mixed`; tests/test_tables_regress.cpp
# (ReadmeBenchTable.*) runs --check.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ZEROBENCH_BIN:-${root}/build/bin/zerobench}"
mode="${1:-write}"
case "${mode}" in write | --check) ;; *) echo "bench-table.sh: unknown argument '${mode}' (--check)" >&2; exit 2 ;; esac
[ -x "${bin}" ] || { echo "bench-table.sh: ${bin} not built (./scripts/build.sh)" >&2; exit 2; }
table_file="$(mktemp)"
trap 'rm -f "${table_file}"' EXIT
"${bin}" table "${root}/reports/baselines/cpu-smoke" --baseline fsdp_mixed >"${table_file}"
python3 "${root}/scripts/splice_table.py" bench-table "${mode}" "${table_file}" "${root}/README.md"
