#!/usr/bin/env bash
# setup.sh — installs everything zerobench needs to build and test, idempotently.
# Owns: Debian build dependencies, CMake 4 from pip (~/.cache/zerobench/cmake4: the GPU image's major
# version, for the bundle-configure test), the torch venv (outside the clone) with the Python side of
# `zerobench crossval` (DeepSpeed, safetensors, transformers) and megatron-core (the token-data test), the ccache dir.
# A second run checks and installs nothing. Overrides:
#   ZEROBENCH_VENV   venv holding torch (default $HOME/.cache/zerobench/venv)
#   ZEROBENCH_TORCH  torch version (default 2.11.0, the GPU image's version)
#   ZEROBENCH_UV     uv version that installs torch (default 0.13.9; PyPI's `uv`, cache ~/.cache/uv)
#   ZEROBENCH_MEGATRON_CORE  megatron-core version (default 0.16.1; --crossval)
#   ZEROBENCH_TRANSFORMERS  transformers version (default 5.24.0; crossval, test_lr_schedule)
#   CCACHE_DIR       ccache store (default $HOME/.cache/zerobench/ccache)
set -euo pipefail
# Without --crossval: what building and running the benchmark needs (bench.sh). With it, also
# crossval's Python references and what the tests need (test.sh, .ci/run): DeepSpeed, safetensors,
# transformers, megatron-core, DeepSpeedCPUAdam's op, CMake 4.
crossval=0
case "${1:-}" in
  "") ;;
  --crossval) crossval=1 ;;
  *) echo "setup.sh: unknown argument '$1' (usage: setup.sh [--crossval])" >&2; exit 2 ;;
esac

cache_root="${HOME}/.cache/zerobench"
venv="${ZEROBENCH_VENV:-${cache_root}/venv}"
torch_version="${ZEROBENCH_TORCH:-2.11.0}"
uv_version="${ZEROBENCH_UV:-0.13.9}"
export CCACHE_DIR="${CCACHE_DIR:-${cache_root}/ccache}"

debian_packages=(cmake ninja-build g++ ccache nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
                 libgtest-dev libgmock-dev libbenchmark-dev libgloo-dev libssl-dev python3-venv)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing Debian packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

have_torch() {
  [ -x "${venv}/bin/python" ] &&
    "${venv}/bin/python" -c "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0]=='${torch_version}' else 1)" 2>/dev/null
}
if ! have_torch; then
  echo "[setup] creating venv ${venv} with torch==${torch_version} (one-off, large download)"
  mkdir -p "$(dirname "${venv}")"
  [ -x "${venv}/bin/python" ] || python3 -m venv "${venv}"
  # uv (from PyPI) fetches torch and the CUDA wheels it depends on (4.7 GB) in parallel: 33 s
  # here where pip took 330 s (docs/testing.md, "A newcomer's first run"). pip stays in the venv
  # for the crossval side below.
  "${venv}/bin/python" -m pip install -q "uv==${uv_version}"
  rm -f "${venv}/.zerobench-bytecode"
  "${venv}/bin/uv" pip install -q --compile-bytecode --python "${venv}/bin/python" "torch==${torch_version}" numpy
fi
# Bytecode for everything in the venv, once (a marker remembers it): uv, unlike pip, installs no
# .pyc files, and with PYTHONDONTWRITEBYTECODE set (as on this machine and CI's) Python then
# compiles torch's and sympy's sources on every import: `import torch` 5.5 s of CPU instead of 2.7,
# and one crossval mode (a `zerobench run` and a torchrun of DeepSpeed's reference) 25.7 s instead
# of 10.8 (docs/testing.md). Venvs made before uv installed with --compile-bytecode lack it.
if [ ! -e "${venv}/.zerobench-bytecode" ]; then
  echo "[setup] compiling the venv's Python files to bytecode (once)"
  "${venv}/bin/python" -m compileall -q -j 0 "$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null ||
    echo "[setup] note: some files in the venv did not compile to bytecode (they are compiled when imported)"
  touch "${venv}/.zerobench-bytecode"
fi

if [ "${crossval}" = 0 ]; then
  mkdir -p "${CCACHE_DIR}"
  echo "[setup] ok: torch $("${venv}/bin/python" -c 'import torch; print(torch.__version__)') in ${venv} (crossval's references: scripts/setup.sh --crossval)"
  exit 0
fi

# crossval's references (scripts/crossval/): DeepSpeed as a pure-Python install (no compiled ops,
# no dependency resolution that could replace torch) plus its runtime dependencies, and
# safetensors (the reference loads zerobench's weights; tests read files it writes).
deepspeed_version="${ZEROBENCH_DEEPSPEED:-0.19.8}"
deepspeed_deps=(einops hjson msgpack ninja packaging psutil py-cpuinfo "pydantic>=2" tqdm)
have_python_side() {
  "${venv}/bin/python" - "${deepspeed_version}" "${deepspeed_deps[@]}" <<'PY' 2>/dev/null
import sys
from importlib import metadata
from packaging.requirements import Requirement
want, deps = sys.argv[1], sys.argv[2:]
ok = metadata.version("deepspeed") == want and bool(metadata.version("safetensors"))
for d in deps:
    r = Requirement(d)
    ok = ok and r.specifier.contains(metadata.version(r.name), prereleases=True)
sys.exit(0 if ok else 1)
PY
}
if ! have_python_side; then
  echo "[setup] installing deepspeed==${deepspeed_version} (no compiled ops) and safetensors into ${venv}"
  DS_BUILD_OPS=0 "${venv}/bin/python" -m pip install -q --no-deps "deepspeed==${deepspeed_version}"
  "${venv}/bin/python" -m pip install -q "${deepspeed_deps[@]}" safetensors
  have_python_side || { echo "[setup] deepspeed/safetensors check failed after install" >&2; exit 1; }
fi
# megatron-core (tests/test_token_data.cpp writes a Megatron indexed dataset with its own
# IndexedDatasetBuilder). Its requirements (torch, numpy, packaging) are installed above; --no-deps
# keeps pip from replacing torch. Pure Python for what the test imports; no GPU needed.
megatron_version="${ZEROBENCH_MEGATRON_CORE:-0.16.1}"
have_megatron() {
  "${venv}/bin/python" -c "import sys; from importlib import metadata; sys.exit(metadata.version('megatron-core') != sys.argv[1])" \
    "${megatron_version}" 2>/dev/null
}
if ! have_megatron; then
  echo "[setup] installing megatron-core==${megatron_version} (--no-deps) into ${venv}"
  "${venv}/bin/python" -m pip install -q --no-deps "megatron-core==${megatron_version}"
  have_megatron || { echo "[setup] megatron-core check failed after install" >&2; exit 1; }
fi
# transformers (no torch dependency): crossval's references build HF Trainer's lr scheduler
# (get_scheduler) for an --lr-scheduler-type run; test_lr_schedule compares zerobench's with it.
transformers_version="${ZEROBENCH_TRANSFORMERS:-5.24.0}"
if ! "${venv}/bin/python" -c "import sys; from importlib import metadata; sys.exit(metadata.version('transformers') != '${transformers_version}')" 2>/dev/null; then
  echo "[setup] installing transformers==${transformers_version} into ${venv}"
  "${venv}/bin/python" -m pip install -q "transformers==${transformers_version}"
fi
# DeepSpeedCPUAdam's op (crossval with offload_optimizer: the optimizer a user's offload file gets,
# engine.py get_optimizer_configuration): built once here, not inside a test (a cold build takes
# ~5-18 min on 2 cores). The cache is torch's extension directory (~/.cache/torch_extensions,
# outside the clone); a warm cache loads in seconds. DS_ACCELERATOR=cpu as the runners set it.
echo "[setup] DeepSpeedCPUAdam op (cpu_adam): building once or loading from the torch extension cache"
DS_ACCELERATOR=cpu "${venv}/bin/python" -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()" \
  >/dev/null 2>&1 || { echo "[setup] building DeepSpeed's cpu_adam op failed (g++, the venv's torch headers)" >&2; exit 1; }
# CMake 4 as the GPU image has it (pip's `cmake`; the image's CMake is 4.x, Debian 12's 3.25): the
# bundle-only configure test (tests/test_gpu_readiness.cpp DeviceBundle) runs it too. Kept outside
# the venv (its bin/ would shadow the system cmake in an activated venv).
cmake4="${cache_root}/cmake4"
if ! "${cmake4}/cmake/data/bin/cmake" --version 2>/dev/null | grep -q "cmake version 4\."; then
  echo "[setup] CMake 4 (pip) into ${cmake4} for the device-configure test"
  "${venv}/bin/python" -m pip install -q --upgrade --target "${cmake4}" "cmake>=4,<5"
fi
mkdir -p "${CCACHE_DIR}"
echo "[setup] ok: torch $("${venv}/bin/python" -c 'import torch; print(torch.__version__)'), deepspeed ${deepspeed_version} in ${venv}"
