#!/usr/bin/env bash
# gpu-check.sh — one command for a GPU machine: build with CUDA, run the CUDA tests, run a 1-GPU
# matrix (Granite-7B layer shape, bf16, micro-batch 8 x 4096, activation checkpointing: FSDP
# mixed, FSDP low and ZeRO-3 at W=1 over NCCL with as many blocks as fit, and as one rank of an
# emulated W=4 job with all 32 blocks), every cell profiled (--profile), an Nsight Systems capture
# when nsys is installed, and a summary. Everything lands under OUT (copy it to
# reports/results/<device>/ afterwards).
#   scripts/gpu-check.sh OUT [--dry-run]
# --dry-run prints every command (and the matrix it would run) without running anything.
# Env: ZEROBENCH_VENV  the torch venv (default: /opt/torch/.venv when it exists, else the
#                      setup venv ~/.cache/zerobench/venv)
#      BUILD_DIR       build directory (default build-cuda)
#      LAYERS_W1       blocks at W=1 (default: from the GPU's memory, see layers_that_fit)
#      STEPS           measured + warm-up steps per cell (default 8)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: gpu-check.sh OUT [--dry-run]}"
dry_run=0
[ "${2:-}" = "--dry-run" ] && dry_run=1
run() {  # run CMD... (logged); in a dry run only print it
  echo "+ $*"
  [ "${dry_run}" = 1 ] || "$@"
}

if [ -z "${ZEROBENCH_VENV:-}" ]; then
  if [ -x /opt/torch/.venv/bin/python ]; then
    export ZEROBENCH_VENV=/opt/torch/.venv
  else
    export ZEROBENCH_VENV="${HOME}/.cache/zerobench/venv"
  fi
fi
export BUILD_DIR="${BUILD_DIR:-${root}/build-cuda}"
bin="${BUILD_DIR}/bin/zerobench"
steps="${STEPS:-8}"
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"

# Memory per Granite-7B block at W=1 (NO_SHARD, FSDP mixed: the most per-block state):
# 202,383,360 parameters x 16 B (bf16-loaded fp32 flat shard, fp32 grad, 2 fp32 AdamW states)
# = 3.24 GB, + its checkpointed input 8 x 4096 x 4096 x 2 B = 0.27 GB. Fixed: the root unit
# (embedding + LM head, 262,148,096 parameters x 16 B = 4.19 GB), one block's recompute
# (~6 GB of saved activations), the LM head's logits in bf16 and fp32 for the loss
# (32768 x 32000 x 6 B = 6.3 GB), workspaces: ~18 GB. Use 85% of the card.
layers_that_fit() {
  local mib="$1"
  awk -v mib="${mib}" 'BEGIN { gb = mib * 1048576 / 1e9; n = int((0.85 * gb - 18) / 3.51); if (n < 1) n = 1; if (n > 32) n = 32; print n }'
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git -C "${root}" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "venv: ${ZEROBENCH_VENV}"
  "${ZEROBENCH_VENV}/bin/python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 || true
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || echo "nvidia-smi: not found"
  command -v nsys >/dev/null && nsys --version || echo "nsys: not found"
} | tee "${out}/env.txt"

gpu_mib=0
if command -v nvidia-smi >/dev/null; then
  gpu_mib="$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -d ' ')"
fi
[ "${gpu_mib}" -gt 0 ] 2>/dev/null || gpu_mib=81559  # an 80 GB card when it cannot be read (dry runs)
layers_w1="${LAYERS_W1:-$(layers_that_fit "${gpu_mib}")}"
echo "blocks at W=1: ${layers_w1} (GPU memory ${gpu_mib} MiB); emulated W=4: 32" | tee -a "${out}/env.txt"

# 1. Build with the CUDA path (fails if no CUDA compiler is found).
if [ "${dry_run}" = 1 ]; then
  echo "+ ZEROBENCH_CUDA=ON ${root}/scripts/build.sh > ${out}/build.log"
else
  ZEROBENCH_CUDA=ON "${root}/scripts/build.sh" > "${out}/build.log" 2>&1 || { tail -50 "${out}/build.log"; exit 1; }
  ldd "${bin}" | grep -E "cupti|cudart|nccl|torch_cuda" > "${out}/libraries.txt" || true
fi

# 2. The CUDA tests (they skip, saying why, without a GPU), then the fast CPU-independent suites.
if [ "${dry_run}" = 1 ]; then
  echo "+ (cd ${BUILD_DIR} && ctest -R 'Cuda' --output-on-failure -V) > ${out}/cuda-tests.log"
else
  (cd "${BUILD_DIR}" && ctest -R 'Cuda' --output-on-failure -V) > "${out}/cuda-tests.log" 2>&1 || echo "CUDA tests FAILED (see ${out}/cuda-tests.log)"
  grep -E "Passed|Failed|Skipped|SKIPPED|tests passed" "${out}/cuda-tests.log" | tail -20 || true
fi

# 3. The 1-GPU matrix.
cat > "${out}/matrix.yaml" <<EOF
# Written by scripts/gpu-check.sh: Granite-7B layer shape on one GPU, activation checkpointing
# (docs/backends/fsdp.md: without it 8 x 4096 tokens need ~146 GB of activations for 32 blocks).
name: gpu-check
timeout_s: 1500
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
  - {backend: fsdp, precision: mixed, emulate-world-size: 4}
  - {backend: fsdp, precision: low, emulate-world-size: 4}
  - {backend: zero3, precision: bf16, emulate-world-size: 4, deepspeed-config: bench/configs/deepspeed_zero3_blog.json}
EOF
cd "${root}"
run "${bin}" matrix "${out}/matrix.yaml" --out "${out}/reports" --force
run "${bin}" table "${out}/reports" --format html --out "${out}/reports/table.html"
if [ "${dry_run}" = 1 ]; then
  echo "+ ${bin} table ${out}/reports > ${out}/table.md"
else
  "${bin}" table "${out}/reports" > "${out}/table.md" || true
fi

# 4. Nsight Systems: one FSDP-mixed and one ZeRO-3 run at W=1 (the measured steps only).
if command -v nsys >/dev/null || [ "${dry_run}" = 1 ]; then
  mkdir -p "${out}/nsys"
  for cell in "fsdp mixed" "zero3 bf16"; do
    set -- ${cell}
    run "${root}/scripts/nsys-profile.sh" "${out}/nsys/$1-$2-w1" --backend "$1" --precision "$2" --device cuda \
      --model granite-7b --layers "${layers_w1}" --micro-batch 8 --seq-len 4096 --steps 6 --warmup 2 \
      --activation-checkpointing --out "${out}/nsys/$1-$2-w1.json"
  done
else
  echo "nsys not found: no Nsight Systems capture" | tee -a "${out}/env.txt"
fi

# 5. Summary per cell: tokens/GPU/s, MFU (datasheet and measured GEMM), peak allocated/reserved,
# FSDP's forward overlap (profile), untimed collectives.
summary_py='
import json, os, sys
d = sys.argv[1]
rows = ["| cell | W | tokens/GPU/s | MFU | MFU vs GEMM | peak alloc GiB | peak reserved GiB | outside allocator GiB | overlap | exposed comm s | status |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
for f in sorted(os.listdir(d)):
    if not f.endswith(".json") or f == "index.json": continue
    r = json.load(open(os.path.join(d, f)))
    st = r["status"]["state"]
    if st != "ok":
        err = r["status"]["error"][:80].replace("|", "/").replace("\n", " ")
        rows.append("| %s | | | | | | | | | | %s: %s |" % (f[:-5], st, err)); continue
    s, rk = r["summary"], r["ranks"][0]
    c = rk["memory"]["cuda"]; p = r.get("profile") or {}
    rows.append("| %s | %s%s | %.1f | %.3f | %.3f | %.2f | %.2f | %.2f | %s | %s | ok |" % (
        f[:-5], r["env"]["world_size"], " (emulated)" if r["env"].get("emulated") else "",
        s["tokens_per_gpu_per_s"]["median"], s["mfu"], s.get("mfu_vs_measured_gemm", 0),
        c["peak_allocated_bytes"] / 2**30, c["peak_reserved_bytes"] / 2**30, c.get("outside_allocator_bytes", 0) / 2**30,
        "%.2f" % p["overlap_ratio"] if "overlap_ratio" in p else "-", "%.3f" % p["exposed_comm_s"] if "exposed_comm_s" in p else "-"))
print("\n".join(rows))
'
if [ "${dry_run}" = 1 ]; then
  echo "+ python summary of ${out}/reports > ${out}/SUMMARY.md"
else
  "${ZEROBENCH_VENV}/bin/python" -c "${summary_py}" "${out}/reports" | tee "${out}/SUMMARY.md"
fi
echo "gpu-check: everything is under ${out}"
