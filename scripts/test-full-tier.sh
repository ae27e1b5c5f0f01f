#!/usr/bin/env bash
# test-full-tier.sh — runs the full tier (tests/full_tier.txt: the long tests CI leaves out, each
# with its kind's representative still in CI) and writes reports/results/cpu/full-tier.md, which
# scripts/test.sh checks. Builds first unless ZEROBENCH_PREPARED=1. About 17 min on 2 cores (92 tests, 1014 s, 2026-11-29).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${ZEROBENCH_PREPARED:-0}" != 1 ]; then
  "${root}/scripts/setup.sh" --crossval
  "${root}/scripts/build.sh"
fi
tier="${root}/tests/full_tier.txt"
log="$(mktemp)"
cd "${BUILD_DIR:-${root}/build}"
jobs="${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}"
[ "${jobs}" -ge 2 ] 2>/dev/null || jobs=2
status=0
ctest --output-on-failure -j "${jobs}" -R "$(python3 "${root}/scripts/full_tier.py" regex "${tier}")" "$@" | tee "${log}" || status=$?
(cd "${root}" && python3 scripts/full_tier.py document "${tier}" "${log}" reports/results/cpu/full-tier.md) || status=1
rm -f "${log}"
exit "${status}"
