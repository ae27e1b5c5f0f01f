#!/usr/bin/env bash
# translate-table.sh — the key table of `zerobench translate` in docs/configs.md, generated from the
# code (bench/translate/mapping.cpp) by `zerobench translate --list-mapping`, never typed in.
#   scripts/translate-table.sh [--check]    (--check: exit 1 if docs/configs.md is out of date)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="write"
[ "${1:-}" = "--check" ] && mode="--check"
bin="${ZEROBENCH_BIN:-${root}/build/bin/zerobench}"
table_file="$(mktemp)"
trap 'rm -f "${table_file}"' EXIT
"${bin}" translate --list-mapping > "${table_file}"
python3 "${root}/scripts/splice_table.py" translate-mapping "${mode}" "${table_file}" "${root}/docs/configs.md"
