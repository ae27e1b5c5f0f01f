#!/usr/bin/env bash
# cpu-isa.sh — sourced by the scripts that record or gate deterministic CPU numerics
# (regression-gate.sh, refresh-baseline.sh). Pins every CPU math library to AVX2 kernels so that a
# run rounds the same on every x86 CPU with AVX2, AVX-512 ones included: ATen's own kernels
# (ATEN_CPU_CAPABILITY, read by aten/src/ATen/native/DispatchStub.cpp), oneMKL's GEMMs
# (MKL_ENABLE_INSTRUCTIONS + MKL_CBWR, its conditional numerical reproducibility) and oneDNN's
# bf16 matmuls (ONEDNN_MAX_CPU_ISA). Measured here: the cpu-smoke baselines recorded on an
# AVX2-only EPYC reproduce bitwise on an AVX-512 EPYC with these pins, and not without them
# (docs/regression.md). Set ZEROBENCH_CPU_ISA=native to run with each library's own choice.
if [ "${ZEROBENCH_CPU_ISA:-avx2}" = "avx2" ]; then
  export ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
fi
