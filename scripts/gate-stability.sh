#!/usr/bin/env bash
# gate-stability.sh — a gate that flakes gets switched off: re-run one cell N times, identical,
# with every core kept busy by a bounded busy loop, and compare each re-run with the first by
# `zerobench regress` (timings reported, not gated, as in CI). Expected: 0 flagged. Prints each
# re-run's rank-0 peaks — the program-order one (gated exactly) and the observed one (not gated:
# it depends on when collectives complete) — and the spread of each.
#   scripts/gate-stability.sh [N] [zerobench run flags...]
# N defaults to 20, the flags to issue 35's flaky cell (fsdp fp32, 4 steps). Env: ZEROBENCH_BIN,
# GATE_STABILITY_OUT (out/gate-stability), GATE_STABILITY_LOAD (busy loops, default one per core;
# 0 runs unloaded). Exit 1 if any re-run was flagged.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
source "${root}/scripts/cpu-isa.sh"  # the same kernels as regression-gate.sh
bin="${ZEROBENCH_BIN:-${BUILD_DIR:-${root}/build}/bin/zerobench}"
[ -x "${bin}" ] || { echo "gate-stability.sh: ${bin} not built" >&2; exit 2; }
n="${1:-20}"
[[ "${n}" =~ ^[0-9]+$ && "${n}" -ge 2 ]] || { echo "gate-stability.sh: N '${n}': expected an integer >= 2" >&2; exit 2; }
shift || true
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--nproc 2 --model tiny --steps 4 --warmup 1 --seq-len 32 --micro-batch 2
                                 --backend fsdp --precision fp32 --threads 1)
out="${GATE_STABILITY_OUT:-out/gate-stability}"
rm -rf "${out}"
mkdir -p "${out}"

# The load: one busy loop per core, each bounded in time (timeout), stopped on exit by its pid.
loops="${GATE_STABILITY_LOAD:-$(nproc)}"
pids=()
stop_load() { for p in "${pids[@]}"; do kill "${p}" 2>/dev/null || true; done; }
trap stop_load EXIT
for _ in $(seq 1 "${loops}"); do
  timeout "$((n * 300))" sh -c 'while :; do :; done' &
  pids+=("$!")
done
echo "gate-stability: ${n} runs of: zerobench run ${flags[*]}; load: ${loops} busy loop(s) on $(nproc) core(s)"

peak() {  # rank 0's field from a report
  python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['ranks'][0]['memory']; v = m.get(sys.argv[2]); print('-' if v is None else v)" "$1" "$2"
}
flagged=0
printf '| run | s | program-order peak (rank 0) | observed peak (rank 0) | regress vs run 1 |\n|---:|---:|---:|---:|---|\n'
for i in $(seq 1 "${n}"); do
  mkdir -p "${out}/${i}"
  t0=$(date +%s.%N)
  "${bin}" run "${flags[@]}" --quiet --out "${out}/${i}/cell.json" >"${out}/${i}/run.log" 2>&1 ||
    { echo "run ${i} failed:"; cat "${out}/${i}/run.log"; exit 1; }
  secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "${t0}" "$(date +%s.%N)")
  verdict="baseline"
  if [ "${i}" -gt 1 ]; then
    if "${bin}" regress --timing report --baseline "${out}/1" --current "${out}/${i}" >"${out}/${i}/regress.txt" 2>&1; then
      verdict="pass"
    else
      verdict="FLAGGED: $(grep '^|.*| REGRESSION |' "${out}/${i}/regress.txt" | cut -d'|' -f3 | tr -d ' ' | paste -sd, -)"
      flagged=$((flagged + 1))
    fi
  fi
  printf '| %d | %s | %s | %s | %s |\n' "${i}" "${secs}" "$(peak "${out}/${i}/cell.json" peak_program_bytes)" \
    "$(peak "${out}/${i}/cell.json" peak_tracked_bytes)" "${verdict}"
done
python3 - "${out}" "${n}" <<'EOF'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
for key in ("peak_program_bytes", "peak_tracked_bytes"):
    v = [json.load(open(f"{out}/{i}/cell.json"))["ranks"][0]["memory"].get(key) for i in range(1, n + 1)]
    if None in v:  # a binary from before the program-order peak
        print(f"{key} (rank 0): not in these reports")
        continue
    print(f"{key} (rank 0): min {min(v)} max {max(v)} spread {100 * (max(v) - min(v)) / min(v):.2f}% "
          f"distinct values {len(set(v))}")
EOF
echo "gate-stability: ${flagged} of $((n - 1)) re-runs flagged"
[ "${flagged}" -eq 0 ]
