#!/usr/bin/env bash
# crossval-sweeps.sh — the crossval sweep points CI does not run (every bucket size of every ZeRO
# stage, each ZeRO-3 offload choice alone, the other points of ZeRO-1/2 offload, ZeRO-1/2/3 at the
# default buckets, FSDP2's CPU offload in fp32, the remaining packed- and padded-row engines, ZeRO-1/2
# without offload at three ranks), each run as its CI test ran
# it and checked with that test's assertions (scripts/crossval_sweeps.py). Writes the committed
# summary reports/results/cpu/crossval-sweeps/sweeps.json (schema zerobench.crossval_sweeps) and
# sweeps.md; exit 1 when a point fails a check. CI keeps one representative of each sweep
# (docs/testing.md, "What CI runs and what the sweeps prove").
#   ./scripts/crossval-sweeps.sh                 every point (28 crossvals: 15-30 min on 2 cores)
#   ./scripts/crossval-sweeps.sh POINT...        only these points (their entries replaced, the others kept)
#   ./scripts/crossval-sweeps.sh --summary-only  rewrite sweeps.md from the committed sweeps.json
#   ./scripts/crossval-sweeps.sh --check         exit 1 unless sweeps.json records every current point passing (CI)
# Environment: ZEROBENCH_BIN (default build/bin/zerobench), ZB_SWEEPS_WORK (default
# /tmp/zb-crossval-sweeps: the crossval documents and work dirs, not committed), ZB_SWEEPS_OUT
# (default reports/results/cpu/crossval-sweeps), ZB_SWEEPS_REUSE=1 (check the documents already in the
# work folder again instead of running their crossvals: for changing the checks).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ZEROBENCH_BIN:-${root}/build/bin/zerobench}"
work="${ZB_SWEEPS_WORK:-/tmp/zb-crossval-sweeps}"
out_dir="${ZB_SWEEPS_OUT:-${root}/reports/results/cpu/crossval-sweeps}"
[ -x "${bin}" ] || { echo "crossval-sweeps.sh: ${bin} not built (./scripts/build.sh)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "crossval-sweeps.sh: python3 is needed" >&2; exit 2; }
exec python3 "${root}/scripts/crossval_sweeps.py" "${bin}" "${out_dir}" "${work}" "$@"
