#!/usr/bin/env bash
# bench.sh — set-up if needed, build, and run the default benchmark: the cpu-smoke matrix
# (tiny model, 2 ranks, CPU with Gloo, every backend and precision mode). Prints the comparison
# table and where the JSON reports and the HTML page went.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${root}/scripts/setup.sh"
"${root}/scripts/build.sh" zerobench  # only what the benchmark runs (the tests: test.sh)
cd "${root}"
bin="${BUILD_DIR:-${root}/build}/bin/zerobench"
out="${ZEROBENCH_BENCH_OUT:-out/bench}"
"${bin}" matrix bench/matrices/cpu-smoke.yaml --out "${out}" --force
"${bin}" table "${out}" --format html --out "${out}/table.html"
echo
"${bin}" table "${out}" --baseline fsdp_mixed
echo
echo "reports: ${out}/<cell>.json (index: ${out}/index.json); page: ${out}/table.html"
