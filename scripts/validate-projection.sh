#!/usr/bin/env bash
# validate-projection.sh — the CPU validation of `zerobench project` (docs/projection.md §5):
# for each repetition, run every backend on the tiny and small models at W=1 (profiled: per-unit
# times), W=2 and W=4 (Gloo, 1 thread per rank), calibrate for each W=1 run at each W with
# `zerobench micro --for` (exactly the sizes its step issues, and the square GEMM), project each
# W=1 run to W=2 and W=4, and print `zerobench table` with the predicted beside the measured
# throughput, and each run's `uptime` load average (the host is shared: docs/projection.md §5).
# Usage: scripts/validate-projection.sh OUT_DIR [REPS]
# Env: MODELS (default "tiny small"), CELLS (default "fsdp:fp32 zero3:fp32 ddp:fp32": bf16 matmuls are
# very slow on an AVX2-only CPU), WS (default "2 4"), STEPS (6), WARMUP (2), MICRO_MIN_TIME (0.2).
# The W=2 and W=4 runs also write a trace (`--trace`), replayed through their own schedule
# (`project --replay`, docs/projection.md §5a), and the error is split: schedule error =
# (replayed - measured) / measured, cost error = (projected - replayed) / replayed, both on the
# traced steps' medians. CONCURRENT_GEMM=1 also calibrates with `micro --concurrent-gemm` (each
# rank's square GEMM running beside its collectives, as a training step's compute does) into
# cal/cal_cg_<cell>_wW.json, projects with it too (the compute slowdown still from
# cal_<cell>_wW.json's GEMMs), and prints that cost error beside the other.
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
# `micro --for` measures what each projection needs: its step's collective sizes and the square GEMM.
micro_args=(--benchmark_min_time="${MICRO_MIN_TIME:-0.2}")
ws="${WS:-2 4}"
load() { cut -d' ' -f1-3 /proc/loadavg; }
mkdir -p "${out}"
for rep in $(seq 1 "${reps}"); do
  d="${out}/rep${rep}"
  mkdir -p "${d}/cal" "${d}/traces"
  for model in ${models}; do
    for cell in ${cells}; do
      backend="${cell%%:*}" precision="${cell##*:}"
      name="${model}_${backend}_${precision}"
      for w in 1 ${ws}; do
        trace=()
        [ "${w}" = 1 ] || trace=(--trace "${d}/traces/${name}_w${w}.trace.json")  # not beside the reports: `table` reads those
        if [ ! -f "${d}/${name}_w${w}.json" ]; then
          echo "${name}_w${w} run: load before $(load)" >> "${d}/load.txt"
          "${bin}" run --nproc "${w}" --model "${model}" --backend "${backend}" \
            --precision "${precision}" "${common[@]}" "${trace[@]}" --out "${d}/${name}_w${w}.json"
          echo "${name}_w${w} run: load after $(load)" >> "${d}/load.txt"
        fi
      done
      for w in ${ws}; do
        c="${d}/cal/${name}_w${w}"
        if [ ! -f "${c}.cal.json" ]; then
          echo "${name}_w${w} micro --for: load before $(load)" >> "${d}/load.txt"
          "${bin}" micro --for "${d}/${name}_w1.json" --nproc "${w}" --out "${c}.micro.json" --calibrate "${c}.cal.json" \
            "${micro_args[@]}" > "${c}.micro.log"
        fi
        "${bin}" project "${d}/${name}_w1.json" --calibration "${c}.cal.json" --nproc "${w}" \
          --out "${d}/${name}_w${w}_projected.json" > /dev/null
        if [ "${CONCURRENT_GEMM:-0}" = 1 ]; then  # collectives from cal_cg, the GEMM slowdown from cal
          [ -f "${c}.cg.cal.json" ] || "${bin}" micro --for "${d}/${name}_w1.json" --nproc "${w}" --concurrent-gemm \
            --out "${c}.cg.micro.json" --calibrate "${c}.cg.cal.json" "${micro_args[@]}" > "${c}.cg.micro.log"
          python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); \
b['gemm_square_tflops']=a['gemm_square_tflops']; json.dump(b,open(sys.argv[3],'w'))" \
            "${c}.cal.json" "${c}.cg.cal.json" "${c}.cg_gemm.cal.json"
          "${bin}" project "${d}/${name}_w1.json" --calibration "${c}.cg_gemm.cal.json" --nproc "${w}" \
            --out "${d}/${name}_w${w}_projected_cg.json" > /dev/null
        fi
        "${bin}" project "${d}/${name}_w${w}.json" --replay "${d}/traces/${name}_w${w}.trace.json" \
          --out "${d}/${name}_w${w}.replay" > /dev/null
      done
    done
  done
  "${bin}" table "${d}"
  # Schedule vs cost: medians over the traced steps of every rank.
  python3 - "${d}" <<'EOF'
import glob, json, os, statistics, sys
print("| cell | W | measured s (traced) | replayed s | projected s | schedule error | cost error | total error | "
      "projected s, concurrent-GEMM calibration | its cost error |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.replay"))):
    rep = json.load(open(path))
    cell = os.path.basename(path)[:-len(".replay")]
    proj = json.load(open(os.path.join(sys.argv[1], cell + "_projected.json")))["projection"]["step_time_s"]
    m = statistics.median(s["measured_s"] for s in rep["steps"])
    r = statistics.median(s["replayed_s"] for s in rep["steps"])
    cg = os.path.join(sys.argv[1], cell + "_projected_cg.json")
    cg = json.load(open(cg))["projection"]["step_time_s"] if os.path.exists(cg) else None
    cg_cols = f"{cg:.4f} | {100 * (cg / r - 1):+.1f}% |" if cg else "- | - |"
    print(f"| {cell.rsplit('_w', 1)[0]} | {rep['world_size']} | {m:.4f} | {r:.4f} | {proj:.4f} | {100 * (r / m - 1):+.1f}% | "
          f"{100 * (proj / r - 1):+.1f}% | {100 * (proj / m - 1):+.1f}% | {cg_cols}")
EOF
done
