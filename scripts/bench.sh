#!/usr/bin/env bash
# bench.sh — set-up if needed, build, run the default benchmark (tiny model, 2 ranks, CPU, Gloo)
# and print its table and where the JSON report went. Extra arguments go to `zerobench run`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${root}/scripts/setup.sh"
"${root}/scripts/build.sh"
cd "${root}"
exec "${BUILD_DIR:-${root}/build}/bin/zerobench" run --nproc 2 --model tiny --backend ddp --precision fp32 \
  --steps 20 --warmup 3 --data markov --out out/bench-default.json "$@"
