#!/usr/bin/env bash
# validate-projection.sh — the CPU validation of `zerobench project` (docs/projection.md §5):
# for each repetition, calibrate at W=2 and W=4 (`zerobench micro`), run every backend on the
# tiny and small models at W=1 (profiled: per-unit times), W=2 and W=4 (Gloo, 1 thread per
# rank), project each W=1 run to W=2 and W=4, and print `zerobench table` with the predicted
# beside the measured throughput. Usage: scripts/validate-projection.sh OUT_DIR [REPS]
# Env: MODELS (default "tiny small"), CELLS (default "fsdp:fp32 zero3:fp32 ddp:fp32": bf16 matmuls are
# very slow on an AVX2-only CPU), STEPS (6), WARMUP (2), MICRO_MIN_TIME (0.2).
# Run it on a quiet machine: it measures time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${BUILD_DIR:-${root}/build}/bin/zerobench"
out="${1:?usage: validate-projection.sh OUT_DIR [REPS]}"
reps="${2:-3}"
models="${MODELS:-tiny small}"
cells="${CELLS:-fsdp:fp32 zero3:fp32 ddp:fp32}"
common=(--threads 1 --micro-batch 2 --seq-len 128 --steps "${STEPS:-6}" --warmup "${WARMUP:-2}" --profile --profile-steps 3
        --data markov --quiet)
# The calibration needs the collectives and the square GEMM (the compute-slowdown probe).
micro_args=(--benchmark_filter='^(all_gather|reduce_scatter|all_reduce|broadcast)/|^gemm/[a-z0-9]+/square/'
            --benchmark_min_time="${MICRO_MIN_TIME:-0.2}")
mkdir -p "${out}"
for rep in $(seq 1 "${reps}"); do
  d="${out}/rep${rep}"
  mkdir -p "${d}/cal"
  for w in 2 4; do
    [ -f "${d}/cal/micro_w${w}.json" ] || "${bin}" micro --nproc "${w}" --threads 1 --model small --micro-batch 2 \
      --seq-len 128 --max-bytes $((64 << 20)) --out "${d}/cal/micro_w${w}.json" --calibrate "${d}/cal/cal_w${w}.json" \
      "${micro_args[@]}" > "${d}/cal/micro_w${w}.log"
  done
  for model in ${models}; do
    for cell in ${cells}; do
      backend="${cell%%:*}" precision="${cell##*:}"
      name="${model}_${backend}_${precision}"
      for w in 1 2 4; do
        [ -f "${d}/${name}_w${w}.json" ] || "${bin}" run --nproc "${w}" --model "${model}" --backend "${backend}" \
          --precision "${precision}" "${common[@]}" --out "${d}/${name}_w${w}.json"
      done
      for w in 2 4; do
        "${bin}" project "${d}/${name}_w1.json" --calibration "${d}/cal/cal_w${w}.json" --nproc "${w}" \
          --out "${d}/${name}_w${w}_projected.json" > /dev/null
      done
    done
  done
  "${bin}" table "${d}"
done
