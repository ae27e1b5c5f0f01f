#!/usr/bin/env bash
# gpu-first.sh — the first call on a lent GPU: one prepared command that fits the device time a
# session gets (15 minutes in all, the machine's start included; at most 10 a command; at most 8
# files come back from $OUT) and returns the numbers zerobench exists for.
#
#   bash scripts/gpu-first.sh            the first call (device tool: carry [".bundle"], timeout_s 540)
#   bash scripts/gpu-first.sh --more     right after, on the still-warm machine: what is left, by value
#   bash scripts/gpu-first.sh --rehearse on a CPU machine: the same script end to end with --device cpu
#                                        substitutions, a planted failing cell and a planted kill at 60%
#   bash scripts/gpu-first.sh --dry-run [--more]   the cells, their limits and the sum of the limits
#
# Owns: the list of cells of both calls, each with its own time limit (a "cap"); the global
# deadline (480 s for the first call, 210 s for --more); packing after every cell so a kill still
# returns what ran. Must not: change GPU settings, build anything not run here, JIT-build a
# DeepSpeed op (the crossval runners forbid it), write more than 8 files under OUT.
#
# Each cell runs as `timeout CAP bash gpu-first.sh --cell NAME` with its log in WORK/logs/NAME.log;
# its status (ok, FAILED, TIMEOUT, skipped: reason) and seconds go to WORK/cells.tsv (call, cell,
# status, exit code, seconds, limit, log), and the cell
# goes on to the next when one fails. "required" cells always run (their caps sum to at most the
# deadline); "if-time" cells run only when the deadline leaves them their minimum, with a limit of
# min(cap, time left). After every cell OUT gets: SUMMARY.md (environment, cells, the numbers table,
# the comparison verdict, crossval verdicts, failed cells' last lines), cells.tsv, compare.md and
# results.tgz (every report and log) — 4 files. A cell in flight when the script is killed is shown
# as "killed".
#
# Paths: OUT ($OUT as the device tool sets it, else --out DIR, else out/gpu-first); WORK
# (GPU_FIRST_WORK, default /tmp/zb-gpu-first; the first call starts it afresh, --more keeps it);
# BUILD_DIR (default build-gpu in the tree: ignored, kept between calls on a warm machine).
# Env: ZEROBENCH_VENV (default /opt/torch/.venv, else the setup venv), LAYERS (Granite-7B blocks of
# the numbers cells; default: what fits the card's memory, at most 8, so two runs fit their cap),
# GPU_FIRST_PLANT_FAIL=<cell> (that cell fails), GPU_FIRST_PLANT_HANG=<cell> (that cell hangs until
# its limit), GPU_FIRST_FAKE=1 (every cell body is a short sleep: the machinery alone, for tests),
# GPU_FIRST_SCALE (caps and the deadline multiplied by it; tests with fake cells), GPU_FIRST_DEADLINE_S
# (another deadline: the test that plants caps over it).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
self="${root}/scripts/gpu-first.sh"
usage="usage: gpu-first.sh [--more] [--rehearse] [--dry-run] [--out DIR]"

mode=first rehearse=0 dry_run=0 cell_name="" out_arg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --more) mode=more ;;
    --rehearse) rehearse=1 ;;
    --dry-run) dry_run=1 ;;
    --out) out_arg="${2:-}"; [ -n "${out_arg}" ] || { echo "gpu-first.sh: --out needs a folder (${usage})" >&2; exit 2; }; shift ;;
    --cell) cell_name="${2:-}"; shift ;;  # internal: run one cell's body
    *) echo "gpu-first.sh: unknown argument '$1' (${usage})" >&2; exit 2 ;;
  esac
  shift
done

# ---- the environment every cell sees (exported: --cell re-enters this script) ----
export GPU_FIRST_REHEARSE="${GPU_FIRST_REHEARSE:-${rehearse}}"
rehearse="${GPU_FIRST_REHEARSE}"
if [ -z "${ZEROBENCH_VENV:-}" ]; then
  if [ -x /opt/torch/.venv/bin/python ]; then export ZEROBENCH_VENV=/opt/torch/.venv
  else export ZEROBENCH_VENV="${HOME}/.cache/zerobench/venv"; fi
fi
python="${ZEROBENCH_VENV}/bin/python"
[ -x "${python}" ] || python="$(command -v python3 || echo python3)"
export WORK="${GPU_FIRST_WORK:-/tmp/zb-gpu-first}"
if [ "${rehearse}" = 1 ]; then
  # The CPU rehearsal reuses the developer build (same flags: ccache hits); the device builds afresh.
  export BUILD_DIR="${BUILD_DIR:-${root}/build}"
else
  export BUILD_DIR="${BUILD_DIR:-${root}/build-gpu}"
fi
[ -d /usr/local/cuda/bin ] && case ":${PATH}:" in *:/usr/local/cuda/bin:*) ;; *) export PATH="${PATH}:/usr/local/cuda/bin" ;; esac
[ -x /usr/local/cuda/bin/nvcc ] && export CUDACXX="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
bin="${BUILD_DIR}/bin/zerobench"
device=cuda; [ "${rehearse}" = 1 ] && device=cpu
scale="${GPU_FIRST_SCALE:-1}"

# The numbers' shape: Granite-7B blocks, micro-batch 8 x 4096 tokens, bf16, activation checkpointing
# (the blog's Table 2 shape); the rehearsal's: the tiny model at 64 tokens.
if [ "${rehearse}" = 1 ]; then
  shape=(--model tiny --layers 2 --seq-len 64 --steps 4 --warmup 1 --activation-checkpointing)
  w4x32=(--model tiny --layers 4 --seq-len 64 --steps 3 --warmup 1 --activation-checkpointing)
else
  # Memory per Granite-7B block at W=1 (FSDP mixed, NO_SHARD: the most per-block state): 202,383,360
  # parameters x 16 B + its checkpointed input 0.27 GB = 3.51 GB; fixed ~18 GB (the root unit's
  # 4.19 GB, one block's recompute, the LM head's logits in bf16 and fp32, workspaces); 85% of the
  # card. At most 8 blocks: two runs (start-up, GEMM probe, 6 + 2 traced steps) fit the cap.
  gpu_mib=0
  command -v nvidia-smi >/dev/null 2>&1 &&
    gpu_mib="$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ')"
  [ "${gpu_mib:-0}" -gt 0 ] 2>/dev/null || gpu_mib=81559
  layers="${LAYERS:-$(awk -v mib="${gpu_mib}" 'BEGIN { n = int((0.85 * mib * 1048576 / 1e9 - 18) / 3.51); if (n < 1) n = 1; if (n > 8) n = 8; print n }')}"
  shape=(--model granite-7b --layers "${layers}" --seq-len 4096 --steps 6 --warmup 2 --activation-checkpointing)
  w4x32=(--model granite-7b --layers 32 --seq-len 4096 --steps 4 --warmup 1 --activation-checkpointing)
fi
small_run=(run --model tiny --micro-batch 4 --seq-len 64 --steps 5 --warmup 1 --data markov --seed 7 --quiet)

# ---- the cells: NAME CAP_S KIND MIN_S DESCRIPTION (KIND: required | if-time) ----
first_cells=(
  "environment 10 required 0 nvidia-smi, nvcc, compilers, torch/CUDA/NCCL versions"
  "bundle 20 required 0 unpack the device bundle (dpkg -x); DeepSpeed's wheels pip-installed in the background"
  "build 170 required 0 configure and build only zerobench and test_cuda, Release (no debug info)"
  "cuda-tests 35 required 0 test_cuda under ZEROBENCH_REQUIRE_GPU=1 (one CUDA stack per process, NCCL, CUPTI, event timer, memory)"
  "numbers 120 required 0 compare: the blog's accelerate FSDP file vs its DeepSpeed ZeRO-3 file, Granite-7B blocks, --profile"
  "crossval-fsdp 40 required 0 crossval at W=1 vs real FSDP1, mixed"
  "crossval-zero3 40 required 0 crossval at W=1 vs real DeepSpeed ZeRO-3, bf16"
  "emulated-w4 20 required 0 emulated W=4 on CUDA equal to the CPU-emulated run (fp32, rel. 1e-4)"
  "launch-blocking 25 required 0 fsdp mixed: normal vs normal (control), then CUDA_LAUNCH_BLOCKING=1 bitwise equal"
  "compare-intervals 90 if-time 70 the numbers' compare with a second round: Table 2/3 with intervals"
  "granite-w4x32 60 if-time 45 emulated W=4 x 32 Granite-7B blocks, fsdp mixed (the blog's Table 3 shape on one GPU)"
)
more_cells=(
  "compare-intervals 100 required 0 the numbers' compare with a second round (skipped when the first call did it)"
  "crossval-fsdp2 45 required 0 crossval at W=1 vs real FSDP2, mixed"
  "gpu-sharing-refused 15 required 0 more ranks than GPUs under NCCL: exit 2 naming --emulate-world-size"
  "attention 40 required 0 test_cuda CudaAttention.*: varlen flash vs masked efficient, kept SDPA ops vs autograd, selective-op on CUDA vs full"
  "launch-blocking-more 30 if-time 20 zero3 bf16 and fsdp2 mixed: control, then CUDA_LAUNCH_BLOCKING=1 bitwise equal"
  "granite-w4x32 60 if-time 45 emulated W=4 x 32 Granite-7B blocks (skipped when the first call did it)"
  "matrix-more 90 if-time 60 fsdp low, zero2 bf16, fsdp SHARD_GRAD_OP at the numbers' shape, --profile"
  "workload-rows 75 if-time 50 fsdp mixed at the numbers' shape on the study's document lengths: pack, pad, pack-naive (pack and pad: the varlen flash path, bf16 on CUDA)"
  "crossval-zero2 45 if-time 35 crossval at W=1 vs real DeepSpeed ZeRO-2, bf16"
  "crossval-fsdp-low 40 if-time 30 crossval at W=1 vs real FSDP1, low"
)
deadline_s=480; [ "${mode}" = more ] && deadline_s=210
deadline_s="${GPU_FIRST_DEADLINE_S:-${deadline_s}}"  # an override for tests (the planted sum check)
if [ "${mode}" = more ]; then cells=("${more_cells[@]}"); else cells=("${first_cells[@]}"); fi
scaled() { awk -v x="$1" -v s="${scale}" 'BEGIN { v = x * s; if (v < 1 && x > 0) v = 1; printf "%d", v }'; }

# ---- cell bodies (run under --cell NAME, inside the cell's time limit) ----
wait_pip() {  # the background install started by the bundle cell
  local i
  for i in $(seq 1 600); do [ -f "${WORK}/pip.rc" ] && break; sleep 0.2; done
  [ -f "${WORK}/pip.rc" ] || { echo "the bundle's pip install has not finished"; return 1; }
  [ "$(cat "${WORK}/pip.rc")" = 0 ] || { echo "the bundle's pip install failed:"; tail -5 "${WORK}/logs/pip.log"; return 1; }
}
pyenv() { PYTHONPATH="${WORK}/pydeps${PYTHONPATH:+:${PYTHONPATH}}" "$@"; }
# losses_equal A.json B.json RTOL — steps[].loss of two reports: equal (RTOL 0: bitwise).
losses_equal() {
  "${python}" - "$@" <<'PY'
import json, sys
a, b, rtol = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
la, lb = [s["loss"] for s in a["steps"]], [s["loss"] for s in b["steps"]]
print("A:", la); print("B:", lb)
bad = len(la) != len(lb) or any((x != y) if rtol == 0 else abs(x - y) > rtol * abs(y) for x, y in zip(la, lb))
print("DIFFER" if bad else ("bitwise equal" if rtol == 0 else f"equal within rel. {rtol}"))
sys.exit(1 if bad else 0)
PY
}
compare_cmd() {  # compare_cmd REPEAT — the blog's two files at the numbers' shape
  "${bin}" compare "${root}/bench/configs/accelerate_fsdp_blog.yaml" "${root}/bench/configs/deepspeed_zero3_blog.json" \
    "${shape[@]}" --nproc 1 --device "${device}" --data markov --repeat "$1" --timeout 55 --out "${WORK}/compare"
}
crossval_w1() {  # crossval_w1 NAME BACKEND PRECISION [FLAG...]
  local name="$1" backend="$2" precision="$3"; shift 3
  wait_pip || return 1
  pyenv "${bin}" crossval --backend "${backend}" --precision "${precision}" --device "${device}" --nproc 1 --model tiny \
    --steps 3 --grad-accum 2 --micro-batch 2 --timeout 35 --python "${python}" --out "${WORK}/crossval/${name}.json" "$@"
}
blocking_pair() {  # blocking_pair BACKEND PRECISION — control (normal twice), then CUDA_LAUNCH_BLOCKING=1
  local b="$1" p="$2" d="${WORK}/blocking"
  mkdir -p "${d}"
  "${bin}" "${small_run[@]}" --backend "${b}" --precision "${p}" --device "${device}" --out "${d}/${b}-normal.json" &&
    "${bin}" "${small_run[@]}" --backend "${b}" --precision "${p}" --device "${device}" --out "${d}/${b}-normal2.json" || return 1
  echo "control (normal vs normal):"
  losses_equal "${d}/${b}-normal.json" "${d}/${b}-normal2.json" 0 || { echo "the normal run is not deterministic: the blocking comparison would mean nothing"; return 1; }
  CUDA_LAUNCH_BLOCKING=1 "${bin}" "${small_run[@]}" --backend "${b}" --precision "${p}" --device "${device}" \
    --out "${d}/${b}-blocking.json" || return 1
  echo "CUDA_LAUNCH_BLOCKING=1 vs normal:"
  losses_equal "${d}/${b}-normal.json" "${d}/${b}-blocking.json" 0
}
done_ok() { awk -F'\t' -v n="$1" '$2 == n { s = $3 } END { exit !(s == "ok") }' "${WORK}/cells.tsv" 2>/dev/null; }

body_environment() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git -C "${root}" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "host: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) memory"
  echo "venv: ${ZEROBENCH_VENV} ($("${python}" --version 2>&1))"
  "${python}" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-", "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())' || return 1
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=name,memory.total,driver_version,mig.mode.current,clocks.max.sm --format=csv
  else echo "nvidia-smi: not found"; fi
  if command -v nvcc >/dev/null 2>&1; then nvcc --version | tail -2; else echo "nvcc: not found"; fi
  echo "c++: $(c++ --version 2>/dev/null | head -1)"; echo "cmake: $(cmake --version | head -1)"; echo "ninja: $(ninja --version)"
  command -v nsys >/dev/null 2>&1 && nsys --version || echo "nsys: not found"
  if [ "${rehearse}" = 1 ]; then echo "rehearsal on a CPU machine: --device cpu substitutions"; return 0; fi
  "${python}" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || { echo "CUDA is not available"; return 1; }
}
body_bundle() {
  "${root}/scripts/device-bundle.sh" --check || return 1
  rm -rf "${WORK}/deps" "${WORK}/pydeps" && mkdir -p "${WORK}/deps" "${WORK}/pydeps"
  local d
  for d in "${root}"/.bundle/debs/*.deb; do dpkg -x "${d}" "${WORK}/deps" || return 1; done
  echo "unpacked $(ls "${root}"/.bundle/debs/*.deb | wc -l) .debs into ${WORK}/deps"
  # DeepSpeed (no dependencies: torch and numpy are the venv's) and its pure-Python side, while the build runs.
  rm -f "${WORK}/pip.rc"
  nohup bash -c "'${python}' -m pip install -q --no-index --no-deps --target '${WORK}/pydeps' '${root}'/.bundle/wheels/deepspeed-*.whl &&
    '${python}' -m pip install -q --no-index --find-links '${root}/.bundle/wheels' --target '${WORK}/pydeps' \
      einops hjson msgpack ninja packaging psutil py-cpuinfo pydantic tqdm safetensors &&
    PYTHONPATH='${WORK}/pydeps' '${python}' -c 'import deepspeed, safetensors; print(\"deepspeed\", deepspeed.__version__)';
    echo \$? > '${WORK}/pip.rc'" > "${WORK}/logs/pip.log" 2>&1 < /dev/null &
  echo "pip install started in the background (log: logs/pip.log)"
}
body_build() {
  local prefix="${WORK}/deps" type=Release cuda=ON
  if [ "${rehearse}" = 1 ]; then prefix="" type="${BUILD_TYPE:-RelWithDebInfo}" cuda=auto; fi
  ZEROBENCH_CUDA="${cuda}" ZEROBENCH_DEPS_PREFIX="${prefix}" BUILD_TYPE="${type}" JOBS="${JOBS:-$(nproc)}" \
    "${root}/scripts/build.sh" zerobench test_cuda || return 1
  ldd "${bin}" | grep -E "cupti|cudart|nccl|torch_cuda" || true
}
body_cuda-tests() {  # CudaAttention.* runs in --more's attention cell
  if [ "${rehearse}" = 1 ]; then "${BUILD_DIR}/bin/test_cuda" --gtest_filter=-CudaAttention.*  # no GPU: every CUDA test skips, saying why
  else ZEROBENCH_REQUIRE_GPU=1 "${BUILD_DIR}/bin/test_cuda" --gtest_filter=-CudaAttention.*; fi
}
body_attention() {
  if [ "${rehearse}" = 1 ]; then "${BUILD_DIR}/bin/test_cuda" --gtest_filter=CudaAttention.*
  else ZEROBENCH_REQUIRE_GPU=1 "${BUILD_DIR}/bin/test_cuda" --gtest_filter=CudaAttention.*; fi
}
body_numbers() { compare_cmd 1; }
body_compare-intervals() {
  if [ "${mode}" = more ] && done_ok compare-intervals; then echo "done by the first call"; return 0; fi
  compare_cmd 2
}
body_crossval-fsdp() { crossval_w1 fsdp-mixed fsdp mixed; }
body_crossval-zero3() { crossval_w1 zero3-bf16 zero3 bf16; }
body_crossval-fsdp2() { crossval_w1 fsdp2-mixed fsdp2 mixed; }
body_crossval-zero2() { crossval_w1 zero2-bf16 zero2 bf16; }
body_crossval-fsdp-low() { crossval_w1 fsdp-low fsdp low; }
body_emulated-w4() {
  local d="${WORK}/emulated"; mkdir -p "${d}"
  "${bin}" "${small_run[@]}" --backend fsdp --precision fp32 --emulate-world-size 4 --device "${device}" --out "${d}/device.json" &&
    "${bin}" "${small_run[@]}" --backend fsdp --precision fp32 --emulate-world-size 4 --device cpu --out "${d}/cpu.json" &&
    losses_equal "${d}/device.json" "${d}/cpu.json" 1e-4
}
body_gpu-sharing-refused() {
  local n rc
  n="$("${python}" -c 'import torch; print(torch.cuda.device_count() + 1)')"
  [ "${rehearse}" = 1 ] && n=2  # no GPU: a --device cuda run is refused as well, naming why
  "${bin}" "${small_run[@]}" --backend fsdp --nproc "${n}" --device cuda --out "${WORK}/sharing.json"; rc=$?
  echo "exit ${rc} (want 2)"
  [ "${rc}" = 2 ]
}
body_launch-blocking() { blocking_pair fsdp mixed; }
body_launch-blocking-more() { blocking_pair zero3 bf16 && blocking_pair fsdp2 mixed; }
body_granite-w4x32() {
  if [ "${mode}" = more ] && done_ok granite-w4x32; then echo "done by the first call"; return 0; fi
  mkdir -p "${WORK}/reports"
  "${bin}" run --config "${root}/bench/configs/accelerate_fsdp_blog.yaml" "${w4x32[@]}" --micro-batch 8 --emulate-world-size 4 \
    --device "${device}" --data markov --profile --profile-steps 2 --out "${WORK}/reports/fsdp-mixed-w4x32-emulated.json"
}
body_matrix-more() {
  mkdir -p "${WORK}/reports"
  local c rc=0
  for c in "fsdp low" "zero2 bf16" "fsdp mixed --sharding-strategy SHARD_GRAD_OP"; do
    set -- ${c}
    local name="$1-$2${3:+-shard-grad-op}"
    "${bin}" run --backend "$1" --precision "$2" "${@:3}" "${shape[@]}" --micro-batch 8 --nproc 1 --device "${device}" \
      --data markov --profile --profile-steps 2 --out "${WORK}/reports/${name}.json" || rc=1
  done
  return "${rc}"
}
# Issue 37's rows of documents on the device (docs/workload.md): the masked kernel SDPA picks on
# CUDA for pad and pack, and the real-token throughput of each against one causal mask.
body_workload-rows() {
  mkdir -p "${WORK}/reports"
  local lengths="${root}/bench/configs/workload/doc_lengths_t4096.json" b rc=0
  [ "${rehearse}" = 1 ] && lengths="${root}/bench/configs/workload/doc_lengths_t256.json"
  for b in pack pad pack-naive; do
    "${bin}" run --backend fsdp --precision mixed "${shape[@]}" --micro-batch 2 --nproc 1 --device "${device}" \
      --data "lengths:${lengths}" --batching "${b}" --out "${WORK}/reports/workload-fsdp-mixed-${b}.json" || rc=1
  done
  return "${rc}"
}

if [ -n "${cell_name}" ]; then
  if [ "${GPU_FIRST_PLANT_HANG:-}" = "${cell_name}" ]; then echo "planted hang (GPU_FIRST_PLANT_HANG)"; sleep 100000; fi
  if [ "${GPU_FIRST_FAKE:-0}" = 1 ]; then echo "fake cell ${cell_name}"; sleep "${GPU_FIRST_FAKE_S:-0.3}"; exit 0; fi
  declare -F "body_${cell_name}" >/dev/null || { echo "gpu-first.sh: no cell '${cell_name}'" >&2; exit 2; }
  "body_${cell_name}"
  exit $?
fi

# ---- dry run: the cells, their limits, the sums ----
if [ "${dry_run}" = 1 ]; then
  req=0 all=0
  printf '%-22s %6s  %-8s %5s  %s\n' cell cap_s kind min_s what
  for c in "${cells[@]}"; do
    read -r name cap kind min what <<<"${c}"
    printf '%-22s %6s  %-8s %5s  %s\n' "${name}" "${cap}" "${kind}" "${min}" "${what}"
    all=$((all + cap)); [ "${kind}" = required ] && req=$((req + cap))
  done
  echo "call: ${mode}; deadline ${deadline_s} s; sum of required caps ${req} s; sum of all caps ${all} s (if-time cells get min(cap, time left))"
  if [ "${req}" -gt "${deadline_s}" ]; then echo "gpu-first.sh: the required cells' caps (${req} s) exceed the deadline (${deadline_s} s)" >&2; exit 1; fi
  exit 0
fi

# ---- the run ----
if [ -n "${out_arg}" ]; then out="${out_arg}"; elif [ -n "${OUT:-}" ]; then out="${OUT}"; else out="${root}/out/gpu-first"; fi
mkdir -p "${out}" || exit 2
out="$(cd "${out}" && pwd)"
if [ "${rehearse}" = 1 ] && [ "${GPU_FIRST_REHEARSE_INNER:-0}" != 1 ]; then
  exec "${root}/scripts/gpu-first-rehearse.sh" "${out}"
fi
[ "${mode}" = first ] && rm -rf "${WORK}"
mkdir -p "${WORK}/logs" "${WORK}/crossval" "${WORK}/reports"
cd "${root}"
t_start="$(date +%s)"
deadline=$((t_start + $(scaled "${deadline_s}")))
echo "gpu-first (${mode}): deadline $(scaled "${deadline_s}") s; work ${WORK}; out ${out}; build ${BUILD_DIR}"
printf '%s\t%s\n' "${mode}" "${t_start}" >> "${WORK}/calls.tsv"

pack() {  # SUMMARY.md, cells.tsv, compare.md, results.tgz under OUT (4 files), each written atomically
  "${python}" "${root}/scripts/gpu_first_summary.py" "${WORK}" "${out}/SUMMARY.md.tmp" > /dev/null 2>"${WORK}/logs/summary.err" ||
    { echo "# gpu-first summary (the summary script failed: see logs/summary.err)"; cat "${WORK}/cells.tsv" 2>/dev/null; } > "${out}/SUMMARY.md.tmp"
  mv -f "${out}/SUMMARY.md.tmp" "${out}/SUMMARY.md"
  cp -f "${WORK}/cells.tsv" "${out}/cells.tsv.tmp" 2>/dev/null && mv -f "${out}/cells.tsv.tmp" "${out}/cells.tsv"
  [ -f "${WORK}/compare/compare.md" ] && cp -f "${WORK}/compare/compare.md" "${out}/compare.md.tmp" && mv -f "${out}/compare.md.tmp" "${out}/compare.md"
  tar czf "${out}/results.tgz.tmp" -C "${WORK}" --exclude=./deps --exclude=./pydeps . 2>/dev/null && mv -f "${out}/results.tgz.tmp" "${out}/results.tgz"
}

for c in "${cells[@]}"; do
  read -r name cap kind min what <<<"${c}"
  cap="$(scaled "${cap}")"; min="$(scaled "${min}")"
  now="$(date +%s)"; left=$((deadline - now))
  limit="${cap}"; [ "${left}" -lt "${limit}" ] && limit="${left}"
  log="logs/${name}.log"; [ "${mode}" = more ] && log="logs/more-${name}.log"
  if [ "${kind}" = if-time ] && [ "${left}" -lt "${min}" ]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${mode}" "${name}" "skipped: ${left} s left, needs ${min}" "-" 0 "${cap}" "${log}" >> "${WORK}/cells.tsv"
    echo "== ${name}: skipped (${left} s left, needs ${min} s)"; pack; continue
  fi
  if [ "${limit}" -le 0 ]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${mode}" "${name}" "skipped: deadline reached" "-" 0 "${cap}" "${log}" >> "${WORK}/cells.tsv"
    echo "== ${name}: skipped (deadline reached)"; pack; continue
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${mode}" "${name}" "running" "-" "${now}" "${limit}" "${log}" > "${WORK}/running.tsv"
  pack
  echo "== ${name} (limit ${limit} s): ${what}"
  t0="$(date +%s)"
  if [ "${GPU_FIRST_PLANT_FAIL:-}" = "${name}" ]; then
    echo "planted failure (GPU_FIRST_PLANT_FAIL=${name}) instead of: ${what}" > "${WORK}/${log}"; rc=1
  else
    timeout -k 5 "${limit}" bash "${self}" --cell "${name}" $([ "${mode}" = more ] && echo --more) > "${WORK}/${log}" 2>&1 < /dev/null
    rc=$?
  fi
  t1="$(date +%s)"
  case "${rc}" in
    0) status=ok ;;
    124|137) status=TIMEOUT ;;
    *) status=FAILED ;;
  esac
  rm -f "${WORK}/running.tsv"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${mode}" "${name}" "${status}" "${rc}" "$((t1 - t0))" "${limit}" "${log}" >> "${WORK}/cells.tsv"
  [ "${status}" != ok ] && { echo "   ${name} ${status} (exit ${rc}); last lines:"; tail -5 "${WORK}/${log}" | sed 's/^/   | /'; }
  pack
done
echo "gpu-first (${mode}): done in $(($(date +%s) - t_start)) s; ${out}/SUMMARY.md"
awk -F'\t' -v m="${mode}" '$1 == m && ($3 == "FAILED" || $3 == "TIMEOUT") { bad = 1 } END { exit bad }' "${WORK}/cells.tsv"
