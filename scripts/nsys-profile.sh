#!/usr/bin/env bash
# nsys-profile.sh — profile a zerobench run with Nsight Systems: CUDA, NVTX, cuBLAS/cuDNN and OS
# runtime traces, captured only over the measured steps (the NVTX range "measured" in the
# "zerobench" domain opens after --warmup steps and closes after the last one).
#   scripts/nsys-profile.sh OUT_BASENAME [zerobench run options...]
# e.g. scripts/nsys-profile.sh out/fsdp-mixed --backend fsdp --precision mixed --device cuda --model small
# Multi-rank: nsys profiles the launcher and every rank it spawns (one report, one process per rank).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: nsys-profile.sh OUT_BASENAME [zerobench run options...]}"
shift
command -v nsys >/dev/null || { echo "nsys-profile.sh: nsys (Nsight Systems) is not on PATH" >&2; exit 2; }
# NVTX capture ranges match registered strings unless this is 0 (zerobench's names are not registered).
export NSYS_NVTX_PROFILER_REGISTER_ONLY=0
exec nsys profile \
  --trace=cuda,nvtx,osrt,cublas,cudnn \
  --capture-range=nvtx --nvtx-capture='measured@zerobench' --capture-range-end=stop \
  --cuda-memory-usage=true --sample=none \
  --force-overwrite=true --output="${out}" \
  "${BUILD_DIR:-${root}/build}/bin/zerobench" run "$@"
