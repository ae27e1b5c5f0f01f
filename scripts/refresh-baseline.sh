#!/usr/bin/env bash
# refresh-baseline.sh — re-record the CI regression baseline on purpose (after a change that
# legitimately moves a deterministic metric: engine-owned bytes, comm counts/bytes, FLOPs).
# Review `git diff reports/baselines/` before committing: every changed number should be
# explained by your change.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${root}/scripts/setup.sh"
"${root}/scripts/build.sh"
cd "${root}"
# Same rounding on every AVX2+ x86 CPU, so losses gate bitwise (scripts/cpu-isa.sh).
source "${root}/scripts/cpu-isa.sh"
bin="${BUILD_DIR:-${root}/build}/bin/zerobench"
tmp="$(mktemp -d)"
"${bin}" matrix bench/matrices/cpu-smoke.yaml --out "${tmp}/cpu-smoke"
rm -rf reports/baselines/cpu-smoke
mkdir -p reports/baselines
cp -r "${tmp}/cpu-smoke" reports/baselines/cpu-smoke
rm -rf "${tmp}"
"${bin}" table reports/baselines/cpu-smoke
echo "baseline refreshed: reports/baselines/cpu-smoke (review git diff, then commit)"
