#!/usr/bin/env bash
# device-bundle.sh — run on a development machine (Debian 12, amd64, network), in the same session
# right before the device call (it needs the package registries; .bundle/ is ignored, so it is not
# in a fresh clone): `scripts/device-bundle.sh`, then the device tool's run with carry [".bundle"]
# and `bash scripts/gpu-first.sh` (docs/profiling.md). It gathers what
# zerobench's build and GPU cross-validation need that the GPU image lacks, into an ignored
# folder inside the tree, so it travels with the working tree to a GPU machine with no network.
#   scripts/device-bundle.sh            fetch what is missing, then verify (idempotent)
#   scripts/device-bundle.sh --check    verify only: exit 1 naming what is missing
# Owns: the list of Debian packages the build needs (scripts/setup.sh's -dev packages minus the
# tools the GPU image has: cmake, ninja, g++, python) with the runtime libraries those -dev
# packages link, fetched with `apt-get download` (never installed here); DeepSpeed as a wheel
# (built without ops, as setup.sh installs it) and its Python dependencies, pinned to the versions
# in the development venv, as wheels for each Python in BUNDLE_PYTHONS.
# Must not: install anything, or unpack anything (scripts/gpu-first.sh unpacks with dpkg -x into a
# prefix, never into /; tests/test_gpu_readiness.cpp configures against that prefix alone).
# Layout: .bundle/debs/*.deb, .bundle/wheels/*.whl, .bundle/MANIFEST (name, bytes, sha256).
# Env: BUNDLE_DIR (default <root>/.bundle), ZEROBENCH_VENV (the dev venv: DeepSpeed and the pins),
#      BUNDLE_PYTHONS (default "3.10 3.11 3.12 3.13": the GPU venv's Python is not known here),
#      BUNDLE_MAX_MIB (default 64: the device tool carries at most 64 MiB with the tree).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="${BUNDLE_DIR:-${root}/.bundle}"
venv="${ZEROBENCH_VENV:-${HOME}/.cache/zerobench/venv}"
pythons="${BUNDLE_PYTHONS:-3.10 3.11 3.12 3.13}"
max_mib="${BUNDLE_MAX_MIB:-64}"
check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  *) echo "device-bundle.sh: unknown argument '$1' (usage: device-bundle.sh [--check])" >&2; exit 2 ;;
esac

# The build's Debian packages (setup.sh's list without cmake, ninja-build, g++, ccache,
# python3-venv) and the runtime libraries they link. libgloo-dev: headers only (ProcessGroupGloo.hpp
# includes them; zerobench links no libgloo). libssl3: libssl-dev's libcrypto.so points at it.
debs=(nlohmann-json3-dev libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev libgtest-dev libgmock-dev
      libbenchmark-dev libbenchmark1debian libgloo-dev libssl-dev libssl3)
deepspeed_version="${ZEROBENCH_DEEPSPEED:-0.19.8}"
py_deps=(einops hjson msgpack ninja packaging psutil py-cpuinfo pydantic pydantic-core annotated-types
         typing-extensions typing-inspection tqdm safetensors)

# One fetch at a time: two callers (tests run in parallel by CTest, or a user beside them) filling the
# same folder would each see the other's half-written wheel. The lock is held to the end.
if [ "${check_only}" = 0 ]; then
  mkdir -p "${bundle}"
  exec 9>"${bundle}/.lock"
  flock 9
fi

missing=()
verify() {
  missing=()
  for p in "${debs[@]}"; do
    compgen -G "${bundle}/debs/${p}_*_amd64.deb" >/dev/null || compgen -G "${bundle}/debs/${p}_*_all.deb" >/dev/null ||
      missing+=("deb:${p}")
  done
  compgen -G "${bundle}/wheels/deepspeed-${deepspeed_version}-py3-none-any.whl" >/dev/null || missing+=("wheel:deepspeed")
  for v in ${pythons}; do
    local tag="cp${v/./}"
    [ -f "${bundle}/wheels/.python-${tag}" ] || missing+=("wheels:python-${v}")
  done
}

verify
if ((${#missing[@]})) && [ "${check_only}" = 0 ]; then
  mkdir -p "${bundle}/debs" "${bundle}/wheels"
  [ -x "${venv}/bin/python" ] || { echo "device-bundle.sh: no venv at ${venv} (run scripts/setup.sh)" >&2; exit 1; }
  # apt-get download needs the package lists; a machine whose packages were all preinstalled may
  # never have fetched them (setup.sh updates only when it installs something).
  if [[ " ${missing[*]} " == *" deb:"* ]] && ! apt-cache show libyaml-cpp-dev >/dev/null 2>&1; then
    sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    echo "[bundle] apt-get update (no package lists yet)"
    $sudo_cmd apt-get update -qq
  fi
  for m in "${missing[@]}"; do
    case "${m}" in
      deb:*)
        echo "[bundle] apt-get download ${m#deb:}"
        (cd "${bundle}/debs" && apt-get download -q "${m#deb:}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
        ;;
      wheel:deepspeed)
        echo "[bundle] deepspeed==${deepspeed_version} as a wheel (no compiled ops, no dependencies)"
        # Built beside, moved in whole: an interrupted build never leaves a wheel verify() accepts.
        tmp="$(mktemp -d "${bundle}/.wheel.XXXXXX")"
        DS_BUILD_OPS=0 "${venv}/bin/python" -m pip wheel -q --no-deps --no-build-isolation \
          -w "${tmp}" "deepspeed==${deepspeed_version}"
        mv "${tmp}"/deepspeed-*.whl "${bundle}/wheels/"
        rm -rf "${tmp}"
        ;;
      wheels:python-*)
        v="${m#wheels:python-}"
        # The dev venv's versions, so the GPU runs what crossval was checked with here.
        mapfile -t pins < <("${venv}/bin/python" - "${py_deps[@]}" <<'PY'
import sys
from importlib import metadata
for name in sys.argv[1:]:
    print(f"{name}=={metadata.version(name)}")
PY
        )
        echo "[bundle] wheels for CPython ${v}: ${pins[*]}"
        "${venv}/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version "${v}" \
          --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
          --platform manylinux_2_28_x86_64 -d "${bundle}/wheels" "${pins[@]}"
        touch "${bundle}/wheels/.python-cp${v/./}"
        ;;
    esac
  done
  verify
fi
if ((${#missing[@]})); then
  echo "device-bundle.sh: ${bundle} lacks ${missing[*]} (run scripts/device-bundle.sh on a machine with network)" >&2
  exit 1
fi

# Size: the device tool carries the working tree (tracked and untracked-not-ignored files) and the
# carried paths, 64 MiB in all.
bytes="$(du -sb "${bundle}" | cut -f1)"
tree_bytes="$(cd "${root}" && { git ls-files -z; git ls-files -z --others --exclude-standard; } 2>/dev/null |
  xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')"
if [ $((bytes + tree_bytes)) -gt $((max_mib * 1048576)) ]; then
  echo "device-bundle.sh: ${bundle} (${bytes} B) with the working tree (${tree_bytes} B) is over the ${max_mib} MiB the device tool carries" >&2
  exit 1
fi
(cd "${bundle}" && find debs wheels -type f -name '*.*' ! -name '.python-*' | sort |
  while read -r f; do echo "${f} $(stat -c %s "${f}") $(sha256sum "${f}" | cut -d' ' -f1)"; done) > "${bundle}/MANIFEST"
echo "[bundle] ok: ${bundle} ($((bytes / 1048576)) MiB: $(ls "${bundle}/debs" | wc -l) .debs, $(ls "${bundle}/wheels" | wc -l) wheels; with the tree $(((bytes + tree_bytes) / 1048576)) of ${max_mib} MiB)"
