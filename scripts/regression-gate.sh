#!/usr/bin/env bash
# regression-gate.sh — run the cpu-smoke matrix and compare it with the committed baseline.
# On CI's shared 2-core CPU machine timings are printed, not gated (--timing report);
# deterministic metrics (engine-owned bytes, comm counts and bytes, FLOPs) must match exactly,
# every step's loss, grad norm and lr bitwise on the baseline's machine kind (within 2e-2
# otherwise: docs/regression.md), and allocator peaks stay within 5%. Set ZEROBENCH_GATE_TIMING=gate on a dedicated runner.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
# Same rounding on every AVX2+ x86 CPU, so losses gate bitwise (scripts/cpu-isa.sh).
source "${root}/scripts/cpu-isa.sh"
bin="${BUILD_DIR:-${root}/build}/bin/zerobench"
out="${ZEROBENCH_GATE_OUT:-out/ci-smoke}"
rm -rf "${out}"
"${bin}" matrix bench/matrices/cpu-smoke.yaml --out "${out}"
"${bin}" table "${out}"
"${bin}" regress --baseline reports/baselines/cpu-smoke --current "${out}" --timing "${ZEROBENCH_GATE_TIMING:-report}"
