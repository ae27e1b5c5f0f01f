#!/usr/bin/env bash
# test.sh [--all | --full-tier] [ctest args] — set-up if needed, build, run the tests (CTest:
# GoogleTest suites, Gloo multi-rank). This is the README's test command and exactly what .ci/run
# runs. By default every test except the full tier (tests/full_tier.txt: long tests, each kind
# keeping a representative here), after checking that each full-tier name is still a test and is
# "Passed" in reports/results/cpu/full-tier.md (scripts/test-full-tier.sh writes it). --all runs
# every test; --full-tier runs scripts/test-full-tier.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# ZEROBENCH_PREPARED=1: the caller has just run both (.ci/run does, before the regression gate);
# a second set-up check (torch imported three times, DeepSpeed's cpu_adam op loaded: 8 s of CPU,
# 2026-11-28) and a no-op build would install and build nothing.
if [ "${ZEROBENCH_PREPARED:-0}" != 1 ]; then
  "${root}/scripts/setup.sh" --crossval
  "${root}/scripts/build.sh"
fi
cd "${BUILD_DIR:-${root}/build}"
# One test per core, at least two (the crossval tests wait on their reference's start-up much of the time).
jobs="${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}"
[ "${jobs}" -ge 2 ] 2>/dev/null || jobs=2
tier="${root}/tests/full_tier.txt"
case "${1:-}" in
  --all) shift; exec ctest --output-on-failure -j "${jobs}" "$@" ;;
  --full-tier) shift; ZEROBENCH_PREPARED=1 exec "${root}/scripts/test-full-tier.sh" "$@" ;;
esac
listing="$(mktemp)"
ctest -N > "${listing}"
status=0
python3 "${root}/scripts/full_tier.py" check "${tier}" "${root}/reports/results/cpu/full-tier.md" "${listing}" || status=1
rm -f "${listing}"
ctest --output-on-failure -j "${jobs}" -E "$(python3 "${root}/scripts/full_tier.py" regex "${tier}")" "$@" || status=1
exit "${status}"
