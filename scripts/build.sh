#!/usr/bin/env bash
# build.sh [TARGET...] — configures and builds zerobench into build/ (binary: build/bin/zerobench);
# with targets, only those (scripts/gpu-first.sh builds zerobench and test_cuda).
# Used by bench.sh, test.sh and gpu-first.sh. Env: BUILD_DIR (default build), ZEROBENCH_CUDA
# (auto|ON|OFF), BUILD_TYPE (default RelWithDebInfo), JOBS (default nproc), ZEROBENCH_VENV /
# ZEROBENCH_PYTHON (the torch to build against), ZEROBENCH_DEPS_PREFIX (Debian packages unpacked
# with dpkg -x instead of installed: cmake/DepsPrefix.cmake), WERROR=1 (compiler warnings are
# errors: -DZEROBENCH_WERROR=ON; .ci/run sets it), UNITY=0|1 (default 1: a unity build,
# -DZEROBENCH_UNITY=ON, each target's files compiled in batches: a cold build in about half the
# CPU; UNITY=0 when editing a few files, so that an edit recompiles one file, not its batch),
# DEBUG_INFO=lines|full (default lines: -g1, line tables without local variables, -DZEROBENCH_DEBUG_INFO;
# full for gdb sessions that print variables).
# Reconfigures when what it configured with changes: it records the CUDA option, the torch it
# finds (interpreter, version, location), the deps prefix, the build type, WERROR, UNITY and DEBUG_INFO in
# <build>/zerobench-configure.stamp and re-runs CMake when they differ — from a fresh cache when
# the torch changed (CMake caches Torch_DIR and would keep the old one).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-${root}/build}"
export CCACHE_DIR="${CCACHE_DIR:-${HOME}/.cache/zerobench/ccache}"
# PCH-friendly ccache settings (ccache docs, "Precompiled headers").
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
export CCACHE_BASEDIR="${root}"
# With -g ccache hashes the working directory unless told not to (ccache docs, "hash_dir"): without
# this a clone at another path (a worktree, CI's checkout) never hits the cache.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

# The interpreter cmake/FindTorchFromVenv.cmake will ask (same order).
if [ -n "${ZEROBENCH_PYTHON:-}" ]; then python="${ZEROBENCH_PYTHON}"
elif [ -n "${ZEROBENCH_VENV:-}" ]; then python="${ZEROBENCH_VENV}/bin/python"
else python="${HOME}/.cache/zerobench/venv/bin/python"; fi
[ -x "${python}" ] || python="$(command -v python3 || echo python3)"
# torch's identity without importing it (fast): version and where it lives.
torch_id="$("${python}" -c 'import importlib.metadata as m, importlib.util as u; s = u.find_spec("torch"); print(m.version("torch"), s.origin if s else "none")' 2>/dev/null || echo "no torch")"
cuda="${ZEROBENCH_CUDA:-auto}"
build_type="${BUILD_TYPE:-RelWithDebInfo}"
deps="${ZEROBENCH_DEPS_PREFIX:-}"
case "${WERROR:-0}" in
  0) werror=OFF ;;
  1) werror=ON ;;
  *) echo "build.sh: WERROR must be 0 or 1, got '${WERROR}'" >&2; exit 2 ;;
esac
case "${UNITY:-1}" in
  0) unity=OFF ;;
  1) unity=ON ;;
  *) echo "build.sh: UNITY must be 0 or 1, got '${UNITY}'" >&2; exit 2 ;;
esac
debug_info="${DEBUG_INFO:-lines}"
case "${debug_info}" in
  lines|full) ;;
  *) echo "build.sh: DEBUG_INFO must be lines or full, got '${debug_info}'" >&2; exit 2 ;;
esac
stamp_file="${build_dir}/zerobench-configure.stamp"
torch_line="torch=${python} ${torch_id}"
want="cuda=${cuda}
${torch_line}
deps=${deps}
build_type=${build_type}
werror=${werror}
unity=${unity}
debug_info=${debug_info}"

have=""
[ -f "${stamp_file}" ] && have="$(cat "${stamp_file}")"
if [ ! -f "${build_dir}/build.ninja" ] || [ "${have}" != "${want}" ]; then
  if [ -f "${build_dir}/CMakeCache.txt" ] && ! grep -qxF "${torch_line}" <<<"${have}"; then
    echo "[build] torch changed (${torch_id}): configuring ${build_dir} from a fresh cache"
    rm -f "${build_dir}/CMakeCache.txt"
  elif [ -f "${build_dir}/CMakeCache.txt" ]; then
    echo "[build] configuration changed (ZEROBENCH_CUDA=${cuda}, deps '${deps}', ${build_type}, ZEROBENCH_WERROR=${werror}, ZEROBENCH_UNITY=${unity}, ZEROBENCH_DEBUG_INFO=${debug_info}): reconfiguring ${build_dir}"
  fi
  cmake -S "${root}" -B "${build_dir}" -G Ninja \
    -DCMAKE_BUILD_TYPE="${build_type}" -DZEROBENCH_CUDA="${cuda}" -DZEROBENCH_DEPS_PREFIX="${deps}" \
    -DZEROBENCH_WERROR="${werror}" -DZEROBENCH_UNITY="${unity}" \
    -DZEROBENCH_DEBUG_INFO="${debug_info}"
  printf '%s\n' "${want}" > "${stamp_file}"
fi
# Arguments name the targets to build (default: all), e.g. `scripts/build.sh zerobench test_cuda`.
cmake --build "${build_dir}" -j "${JOBS:-$(nproc)}" ${1:+--target "$@"}
