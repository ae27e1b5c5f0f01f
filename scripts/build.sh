#!/usr/bin/env bash
# build.sh — configures and builds zerobench into build/ (binary: build/bin/zerobench).
# Used by bench.sh and test.sh. Env: BUILD_DIR (default build), ZEROBENCH_CUDA (auto|ON|OFF),
# BUILD_TYPE (default RelWithDebInfo), JOBS (default nproc).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-${root}/build}"
export CCACHE_DIR="${CCACHE_DIR:-${HOME}/.cache/zerobench/ccache}"
# PCH-friendly ccache settings (ccache docs, "Precompiled headers").
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
export CCACHE_BASEDIR="${root}"
if [ ! -f "${build_dir}/build.ninja" ]; then
  cmake -S "${root}" -B "${build_dir}" -G Ninja \
    -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DZEROBENCH_CUDA="${ZEROBENCH_CUDA:-auto}"
fi
cmake --build "${build_dir}" -j "${JOBS:-$(nproc)}"
