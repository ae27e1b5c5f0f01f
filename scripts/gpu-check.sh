#!/usr/bin/env bash
# gpu-check.sh — the acceptance run for a GPU machine (one H100/H200 is enough), needing no network.
#   scripts/gpu-check.sh OUT [--part 1|2|all] [--dry-run]
# Two commands of at most 10 minutes each (the device tool's limit); part 2 reuses part 1's build:
#   --part 1  environment, unpack the device bundle, build with CUDA, the gates:
#             env     CUDA available; exactly one libcudart, libnccl, libcupti loaded (gtest
#                     CudaEnvironment.*, runtime/env_gate.hpp); the CUDA tests of tests/test_cuda.cpp
#                     under ZEROBENCH_REQUIRE_GPU=1 (a skip is a failure): a W=1 NCCL collective with
#                     device time > 0 that CUPTI classifies as communication, the event timer
#                     against the wall clock on a known GEMM, exact allocation accounting, the
#                     engines on one GPU against the CPU run
#             emulated W=4 on CUDA: losses equal the CPU-emulated run's (fp32, rel. 1e-4)
#             CUDA_LAUNCH_BLOCKING=1 run bitwise equal to the normal one (a stream-race detector)
#             more ranks than GPUs under NCCL refused with exit 2 naming --emulate-world-size
#   --part 2  crossval at W=1 on the GPU (NCCL) against real FSDP1 (fp32/mixed/low), FSDP2
#             (fp32/mixed/low) and DeepSpeed ZeRO-3 (fp32/bf16); the 1-GPU
#             Granite-7B-layer matrix with --profile; Nsight Systems captures where nsys exists
#   --part all (default) both, in one go.
# Every step is a "cell": its output goes to OUT/cells/<name>.log, its status to OUT/cells.tsv; a
# failed cell is recorded and the run goes on; OUT/SUMMARY.md (cells, then the matrix table) is
# rewritten after every part, and the script exits 1 if any cell failed (0 otherwise).
# --dry-run prints each cell's command without running it (the summary is still written).
# The device bundle (scripts/device-bundle.sh, run on a development machine; .bundle/ travels with
# the tree: the device tool's `carry: [".bundle"]`) is unpacked with `dpkg -x` into
# BUILD_DIR/deps (never into /) and its wheels pip-installed into BUILD_DIR/pydeps (PYTHONPATH for
# the crossval references). The build uses ZEROBENCH_VENV's torch (default /opt/torch/.venv).
# Env: ZEROBENCH_VENV, BUILD_DIR (default build-cuda; keep it, or carry it, between parts),
#      LAYERS_W1 (Granite-7B blocks at W=1; default: what fits the GPU), STEPS (default 8),
#      NSYS=0 (skip Nsight), GPU_CHECK_PLANT_FAIL=<cell> (make that cell fail: the CI test of the
#      summary, tests/test_gpu_readiness.cpp).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: gpu-check.sh OUT [--part 1|2|all] [--dry-run]"
out="${1:-}"
[ -n "${out}" ] && [ "${out#-}" = "${out}" ] || { echo "gpu-check.sh: ${usage}" >&2; exit 2; }
shift
part=all
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --part) part="${2:-}"; shift ;;
    *) echo "gpu-check.sh: unknown argument '$1' (${usage})" >&2; exit 2 ;;
  esac
  shift
done
case "${part}" in 1|2|all) ;; *) echo "gpu-check.sh: --part must be 1, 2 or all, got '${part}'" >&2; exit 2 ;; esac

if [ -z "${ZEROBENCH_VENV:-}" ]; then
  if [ -x /opt/torch/.venv/bin/python ]; then export ZEROBENCH_VENV=/opt/torch/.venv
  else export ZEROBENCH_VENV="${HOME}/.cache/zerobench/venv"; fi
fi
python="${ZEROBENCH_VENV}/bin/python"
[ -x "${python}" ] || python="$(command -v python3 || echo python3)"
export BUILD_DIR="${BUILD_DIR:-${root}/build-cuda}"
export ZEROBENCH_REQUIRE_GPU=1  # tests/test_cuda.cpp: a skipped CUDA test is a failure here
bin="${BUILD_DIR}/bin/zerobench"
steps="${STEPS:-8}"
deps="${BUILD_DIR}/deps"
pydeps="${BUILD_DIR}/pydeps"
mkdir -p "${out}/cells" || exit 2
out="$(cd "${out}" && pwd)"
cd "${root}"

# cell NAME CMD... — runs CMD (output to OUT/cells/NAME.log), records its status, never stops.
failed=0
cell() {
  local name="$1"; shift
  local log="${out}/cells/${name}.log" status rc=0 t0 t1
  t0="$(date +%s)"
  if [ "${GPU_CHECK_PLANT_FAIL:-}" = "${name}" ]; then
    echo "planted failure (GPU_CHECK_PLANT_FAIL=${name}) instead of: $*" > "${log}"; rc=1
  elif [ "${dry_run}" = 1 ]; then
    echo "+ $*" | tee "${log}"; rc=0
  else
    echo "== ${name}: $*"
    "$@" > "${log}" 2>&1; rc=$?
  fi
  t1="$(date +%s)"
  if [ "${dry_run}" = 1 ] && [ "${rc}" = 0 ]; then status="dry-run"
  elif [ "${rc}" = 0 ]; then status="ok"
  else status="FAILED"; failed=1; fi
  printf '%s\t%s\t%s\t%s\t%s\n' "${name}" "${status}" "${rc}" "$((t1 - t0))" "cells/${name}.log" >> "${out}/cells.tsv"
  [ "${status}" = "FAILED" ] && { echo "   ${name} FAILED (exit ${rc}); last lines of ${log}:"; tail -5 "${log}" | sed 's/^/   | /'; }
  return 0
}

# Shell bodies of the cells (each a function, so the log shows one command).
environment() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git -C "${root}" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "venv: ${ZEROBENCH_VENV}"
  "${python}" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())'
  local ok=$?
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,mig.mode.current --format=csv || echo "nvidia-smi: not found"
  command -v nvcc >/dev/null && nvcc --version | tail -2 || ls /usr/local/cuda/bin/nvcc || echo "nvcc: not found"
  command -v nsys >/dev/null && nsys --version || echo "nsys: not found"
  cmake --version | head -1; ninja --version
  "${python}" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || { echo "CUDA is not available"; return 1; }
  return "${ok}"
}
unpack_bundle() {
  "${root}/scripts/device-bundle.sh" --check || return 1
  rm -rf "${deps}" "${pydeps}" && mkdir -p "${deps}" "${pydeps}"
  for d in "${root}"/.bundle/debs/*.deb; do dpkg -x "${d}" "${deps}" || return 1; done
  echo "unpacked $(ls "${root}"/.bundle/debs/*.deb | wc -l) .debs into ${deps}"
  # DeepSpeed without its dependencies (torch, numpy: the venv's), then its pure-Python side.
  "${python}" -m pip install -q --no-index --no-deps --target "${pydeps}" "${root}"/.bundle/wheels/deepspeed-*.whl || return 1
  "${python}" -m pip install -q --no-index --find-links "${root}/.bundle/wheels" --target "${pydeps}" \
    einops hjson msgpack ninja packaging psutil py-cpuinfo pydantic tqdm safetensors || return 1
  PYTHONPATH="${pydeps}" "${python}" -c 'import deepspeed, safetensors, numpy; print("deepspeed", deepspeed.__version__)'
}
build() {
  ZEROBENCH_CUDA=ON ZEROBENCH_DEPS_PREFIX="${deps}" JOBS="${JOBS:-$(nproc)}" "${root}/scripts/build.sh" || return 1
  ldd "${bin}" | grep -E "cupti|cudart|nccl|torch_cuda|yaml|benchmark|crypto"
}
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
small_run=(run --model tiny --micro-batch 4 --seq-len 64 --steps 6 --warmup 1 --data markov --seed 7 --quiet)
emulated_w4_vs_cpu() {
  "${bin}" "${small_run[@]}" --backend fsdp --precision fp32 --emulate-world-size 4 --device cuda --out "${out}/emulated/cuda.json" &&
    "${bin}" "${small_run[@]}" --backend fsdp --precision fp32 --emulate-world-size 4 --device cpu --out "${out}/emulated/cpu.json" &&
    losses_equal "${out}/emulated/cuda.json" "${out}/emulated/cpu.json" 1e-4
}
launch_blocking_bitwise() {
  local b
  for b in fsdp zero3 fsdp2; do
    local p=mixed; [ "${b}" = zero3 ] && p=bf16
    "${bin}" "${small_run[@]}" --backend "${b}" --precision "${p}" --device cuda --out "${out}/blocking/${b}-normal.json" &&
      CUDA_LAUNCH_BLOCKING=1 "${bin}" "${small_run[@]}" --backend "${b}" --precision "${p}" --device cuda \
        --out "${out}/blocking/${b}-blocking.json" &&
      losses_equal "${out}/blocking/${b}-normal.json" "${out}/blocking/${b}-blocking.json" 0 || return 1
  done
}
gpu_sharing_refused() {
  local n rc
  n="$("${python}" -c 'import torch; print(torch.cuda.device_count() + 1)')"
  "${bin}" "${small_run[@]}" --backend fsdp --nproc "${n}" --device cuda --out "${out}/sharing.json"; rc=$?
  echo "exit ${rc} (want 2)"
  [ "${rc}" = 2 ]
}
# crossval_cuda BACKEND PRECISIONS — zerobench against the real framework on GPU 0 at W=1 (NCCL),
# every precision given, `tiny`, 4 steps x 2 micro-batches (no_sync / DeepSpeed's per-micro-batch
# reduce included). The references import DeepSpeed and safetensors from the bundle's pydeps
# (crossval's children inherit PYTHONPATH; torch is the venv's). Each mode's measured loss and
# grad-norm differences are in OUT/crossval/BACKEND.json and its .md (the CUDA tolerances are
# the CPU's, unmeasured on a GPU until this run: docs/crossval.md).
# crossval_cuda BACKEND PRECISIONS [NAME FLAG...] — NAME (default BACKEND) names the output; the
# FLAGs select a mode, e.g. offload (issue 23: FSDP1's CPUOffload runs only with a CUDA driver, so
# its crossval is this one).
crossval_cuda() {
  local backend="$1" precisions="$2" name="${3:-$1}"
  shift 2; [ $# -gt 0 ] && shift
  PYTHONPATH="${pydeps}${PYTHONPATH:+:${PYTHONPATH}}" "${bin}" crossval --backend "${backend}" --precision "${precisions}" \
    --device cuda --nproc 1 --model tiny --steps 4 --grad-accum 2 --micro-batch 2 --timeout 300 --python "${python}" \
    --out "${out}/crossval/${name}.json" "$@"
}
summary() {
  "${python}" - "${out}" <<'PY'
import csv, glob, json, os, sys
out = sys.argv[1]
latest = {}
if os.path.exists(os.path.join(out, "cells.tsv")):
    for row in csv.reader(open(os.path.join(out, "cells.tsv")), delimiter="\t"):
        if len(row) == 5:
            latest[row[0]] = row  # a re-run cell: its last run stands
lines = ["# gpu-check summary", ""]
env = os.path.join(out, "cells", "environment.log")
if os.path.exists(env):
    lines += ["```"] + open(env).read().strip().splitlines()[:14] + ["```", ""]
failed = [r for r in latest.values() if r[1] == "FAILED"]
lines += [f"{len(latest)} cells, {len(failed)} failed" + (": " + ", ".join(r[0] for r in failed) if failed else ""), "",
          "| cell | status | exit | s | log |", "|---|---|---:|---:|---|"]
lines += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} |" for r in latest.values()]
for r in failed:
    log = os.path.join(out, r[4])
    tail = open(log, errors="replace").read().strip().splitlines()[-8:] if os.path.exists(log) else []
    lines += ["", f"## {r[0]}: FAILED (exit {r[2]})", "```"] + tail + ["```"]
reports = os.path.join(out, "reports")
rows = []
if os.path.isdir(reports):
    for f in sorted(os.listdir(reports)):
        if not f.endswith(".json") or f == "index.json":
            continue
        try:
            r = json.load(open(os.path.join(reports, f)))
        except Exception as e:
            rows.append(f"| {f[:-5]} | | | | | | | | | unreadable: {e} |"); continue
        st = r.get("status", {}).get("state", "?")
        if st != "ok":
            err = str(r.get("status", {}).get("error", ""))[:80].replace("|", "/").replace("\n", " ")
            rows.append(f"| {f[:-5]} | | | | | | | | | {st}: {err} |"); continue
        s, rk = r["summary"], r["ranks"][0]
        c = rk["memory"].get("cuda", {}); p = r.get("profile") or {}
        rows.append("| %s | %s%s | %.1f | %.3f | %.3f | %.2f | %.2f | %s | %s | ok |" % (
            f[:-5], r["env"]["world_size"], " (emulated)" if r["env"].get("emulated") else "",
            s["tokens_per_gpu_per_s"]["median"], s.get("mfu", 0), s.get("mfu_vs_measured_gemm", 0),
            c.get("peak_allocated_bytes", 0) / 2**30, c.get("peak_reserved_bytes", 0) / 2**30,
            "%.2f" % p["overlap_ratio"] if "overlap_ratio" in p else "-",
            "%.3f" % p["exposed_comm_s"] if "exposed_comm_s" in p else "-"))
lines += ["", "## Matrix (1 GPU, Granite-7B layer shape)", ""]
if rows:
    lines += ["| cell | W | tokens/GPU/s | MFU (datasheet) | MFU (measured GEMM) | peak alloc GiB | peak reserved GiB | overlap | exposed comm s | status |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"] + rows
else:
    lines += ["no matrix reports (part 2 not run yet, or a dry run)"]
for f in sorted(glob.glob(os.path.join(out, "crossval", "*.json"))):
    name = os.path.basename(f)[:-len(".json")]
    if os.path.exists(f):
        doc = json.load(open(f))
        v = doc.get("verdict", {})
        lines += [f"- crossval {name} ({doc.get('device', {}).get('kind', '?')}, W={doc.get('world_size', '?')}): "
                  f"{'agree' if v.get('agree') else 'DISAGREE'} {'; '.join(v.get('reasons', []))[:300]}"]
        for m in doc.get("modes", []):  # the measured differences: the basis for CUDA tolerances
            lines += [f"  - {m.get('precision')}: max loss rel diff {m.get('max_loss_rel_diff', '-')}, "
                      f"max grad-norm rel diff {m.get('max_grad_norm_rel_diff', '-')} "
                      f"(tolerance {m.get('tolerance', {}).get('loss_rel', '-')} / "
                      f"{m.get('tolerance', {}).get('grad_norm_rel', '-')})"]
open(os.path.join(out, "SUMMARY.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
}

# Memory per Granite-7B block at W=1 (NO_SHARD, FSDP mixed: the most per-block state):
# 202,383,360 parameters x 16 B (bf16-loaded fp32 flat shard, fp32 grad, 2 fp32 AdamW states)
# = 3.24 GB, + its checkpointed input 8 x 4096 x 4096 x 2 B = 0.27 GB. Fixed: the root unit
# (embedding + LM head, 262,148,096 parameters x 16 B = 4.19 GB), one block's recompute
# (~6 GB of saved activations), the LM head's logits in bf16 and fp32 for the loss
# (32768 x 32000 x 6 B = 6.3 GB), workspaces: ~18 GB. Use 85% of the card.
layers_that_fit() {
  awk -v mib="$1" 'BEGIN { gb = mib * 1048576 / 1e9; n = int((0.85 * gb - 18) / 3.51); if (n < 1) n = 1; if (n > 32) n = 32; print n }'
}

if [ "${part}" = 1 ] || [ "${part}" = all ]; then
  cell environment environment
  cell bundle unpack_bundle
  cell build build
  cell cuda-tests bash -c "cd '${BUILD_DIR}' && ctest -R '^Cuda' --output-on-failure -V"
  mkdir -p "${out}/emulated" "${out}/blocking"
  cell emulated-w4-vs-cpu emulated_w4_vs_cpu
  cell launch-blocking-bitwise launch_blocking_bitwise
  cell gpu-sharing-refused gpu_sharing_refused
fi

if [ "${part}" = 2 ] || [ "${part}" = all ]; then
  gpu_mib=0
  command -v nvidia-smi >/dev/null && gpu_mib="$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -d ' ')"
  [ "${gpu_mib}" -gt 0 ] 2>/dev/null || gpu_mib=81559  # an 80 GB card when it cannot be read (dry runs)
  layers_w1="${LAYERS_W1:-$(layers_that_fit "${gpu_mib}")}"
  echo "blocks at W=1: ${layers_w1} (GPU memory ${gpu_mib} MiB); emulated W=4: 32" | tee "${out}/layers.txt"
  mkdir -p "${out}/crossval"
  cell crossval-fsdp crossval_cuda fsdp fp32,mixed,low
  cell crossval-fsdp2 crossval_cuda fsdp2 fp32,mixed,low
  cell crossval-zero3 crossval_cuda zero3 fp32,bf16
  cell crossval-fsdp-offload crossval_cuda fsdp fp32,mixed,low fsdp-offload --fsdp-offload-params
  cell crossval-fsdp2-offload crossval_cuda fsdp2 fp32,mixed fsdp2-offload --fsdp2-offload-policy cpu
  cell crossval-zero3-offload crossval_cuda zero3 fp32,bf16 zero3-offload --zero3-offload-optimizer cpu --zero3-offload-param cpu
  # Issue 24: ZeRO stages 1/2, fp16 (DeepSpeed runs fp16 on CUDA only), ZeRO++ qwZ (DeepSpeed's CUDA quantizer)
  cell crossval-zero1 crossval_cuda zero1 fp32,bf16
  cell crossval-zero2 crossval_cuda zero2 fp32,bf16
  cell crossval-zero2-offload crossval_cuda zero2 fp32,bf16 zero2-offload --zero-offload-optimizer cpu
  cell crossval-zero3-fp16 crossval_cuda zero3 fp16 zero3-fp16
  cell crossval-zero2-fp16 crossval_cuda zero2 fp16 zero2-fp16
  cell crossval-fsdp-fp16 crossval_cuda fsdp fp16 fsdp-fp16
  cell crossval-zero3-qwz crossval_cuda zero3 bf16 zero3-qwz --zero3-quantized-weights true
  cat > "${out}/matrix.yaml" <<EOF
# Written by scripts/gpu-check.sh: Granite-7B layer shape on one GPU, activation checkpointing
# (docs/backends/fsdp.md: without it 8 x 4096 tokens need ~146 GB of activations for 32 blocks).
name: gpu-check
timeout_s: 600
base:
  model: granite-7b
  device: cuda
  micro-batch: 8
  seq-len: 4096
  steps: ${steps}
  warmup: 2
  data: markov
  activation-checkpointing: true
  profile: true
  profile-steps: 2
include:
  - {backend: fsdp, precision: mixed, layers: ${layers_w1}}
  - {backend: fsdp, precision: low, layers: ${layers_w1}}
  - {backend: zero3, precision: bf16, layers: ${layers_w1}, deepspeed-config: bench/configs/deepspeed_zero3_blog.json}
  - {backend: fsdp, precision: mixed, layers: ${layers_w1}, fsdp-offload-params: true}
  - {backend: fsdp, precision: mixed, layers: ${layers_w1}, sharding-strategy: SHARD_GRAD_OP}
  - {backend: zero2, precision: bf16, layers: ${layers_w1}}
  - {backend: zero3, precision: bf16, layers: ${layers_w1}, deepspeed-config: bench/configs/deepspeed_zero3_blog.json, zero3-offload-optimizer: cpu}
  - {backend: fsdp, precision: mixed, emulate-world-size: 4}
  - {backend: fsdp, precision: low, emulate-world-size: 4}
  - {backend: zero3, precision: bf16, emulate-world-size: 4, deepspeed-config: bench/configs/deepspeed_zero3_blog.json}
EOF
  cell matrix "${bin}" matrix "${out}/matrix.yaml" --out "${out}/reports" --force
  cell table bash -c "'${bin}' table '${out}/reports' > '${out}/table.md' && '${bin}' table '${out}/reports' --format html --out '${out}/reports/table.html'"
  if [ "${NSYS:-1}" != 0 ] && { command -v nsys >/dev/null || [ "${dry_run}" = 1 ]; }; then
    mkdir -p "${out}/nsys"
    for c in "fsdp mixed" "zero3 bf16"; do
      set -- ${c}
      cell "nsys-$1-$2" env BUILD_DIR="${BUILD_DIR}" "${root}/scripts/nsys-profile.sh" "${out}/nsys/$1-$2-w1" --backend "$1" \
        --precision "$2" --device cuda --model granite-7b --layers "${layers_w1}" --micro-batch 8 --seq-len 4096 \
        --steps 4 --warmup 2 --activation-checkpointing --out "${out}/nsys/$1-$2-w1.json"
    done
  else
    echo "nsys not found (or NSYS=0): no Nsight Systems capture" | tee -a "${out}/layers.txt"
  fi
fi

summary > /dev/null
echo "gpu-check: part ${part} done; summary ${out}/SUMMARY.md$([ "${failed}" = 1 ] && echo " (some cells FAILED)")"
exit "${failed}"
