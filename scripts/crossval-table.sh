#!/usr/bin/env bash
# crossval-table.sh — the README / docs crossval table, generated from the committed crossval
# documents in reports/results/cpu/crossval/ and, as its real-files section, the summary
# real-files.json there (scripts/crossval-real-files.sh) — never typed in.
#   ./scripts/crossval-table.sh          rewrite the table between the `crossval-table` markers
#                                        of README.md and docs/crossval.md from the committed JSONs
#   ./scripts/crossval-table.sh --run    first re-run every backend x mode the README lists and
#                                        the real-files sweep (the real FSDP1, FSDP2 and DeepSpeed
#                                        run: the better part of an hour here), then rewrite the table
#   ./scripts/crossval-table.sh --check  exit 1 if either file differs from the generated table
# The table itself is `zerobench crossval --table DIR` (reports/crossval_table.cpp);
# tests/test_crossval_compare.cpp (CrossvalTable.*) checks that the files match it byte for byte.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ZEROBENCH_BIN:-${root}/build/bin/zerobench}"
dir="${root}/reports/results/cpu/crossval"
mode="${1:-write}"
case "${mode}" in write | --run | --check) ;; *) echo "crossval-table.sh: unknown argument '${mode}' (--run | --check)" >&2; exit 2 ;; esac
[ -x "${bin}" ] || { echo "crossval-table.sh: ${bin} not built (./scripts/build.sh)" >&2; exit 2; }

if [ "${mode}" = "--run" ]; then
  # What the README lists: every backend x mode, W=2, tiny, 5 steps (CI runs grad accum 2).
  common=(--nproc 2 --model tiny --steps 5 --quiet)
  run() {  # name, then crossval arguments; the work dir (weights, batches, logs) is not committed
    local name="$1"; shift
    local rc=0
    "${bin}" crossval "$@" "${common[@]}" --out "${dir}/${name}.json" --work-dir "/tmp/zb-crossval-${name}.work" || rc=$?
    rm -f "${dir}/${name}.html"
    [ "${rc}" -eq 0 ] || echo "crossval-table.sh: ${name} disagrees (exit ${rc}); its document says why" >&2
  }
  mkdir -p "${dir}"
  run fsdp --backend fsdp --precision fp32,mixed,low
  run fsdp2 --backend fsdp2 --precision fp32,mixed,low
  run zero3 --backend zero3 --precision fp32,bf16
  # Offload (issue 23; a document named BACKEND-MODE labels its rows [MODE]). Real FSDP1's CPUOffload
  # needs a CUDA driver: its crossval is on the GPU (owed to a GPU run). Real FSDP2 on CPU
  # refuses pin_memory=True (nothing to pin without CUDA).
  run fsdp2-offload --backend fsdp2 --precision fp32,mixed --fsdp2-offload-policy cpu --fsdp2-offload-pin-memory false
  run zero3-offload-optimizer --backend zero3 --precision fp32,bf16 --zero3-offload-optimizer cpu
  run zero3-offload-param --backend zero3 --precision fp32,bf16 --zero3-offload-param cpu
  # ZeRO stages 1 and 2 (issue 24), offload_optimizer with stage 2.
  run zero1 --backend zero1 --precision fp32,bf16
  run zero2 --backend zero2 --precision fp32,bf16
  run zero2-offload-optimizer --backend zero2 --precision fp32,bf16 --zero-offload-optimizer cpu
  # ZeRO stage 0 (zero0: DeepSpeed without a ZeRO optimizer).
  run zero0 --backend zero0 --precision fp32,bf16
  # Rows of documents with per-document attention (issue 37; docs/data.md): the workload study's
  # document lengths, packed and padded.
  lengths="lengths:${root}/bench/configs/workload/doc_lengths_t256.json"
  run fsdp-pack --backend fsdp --precision fp32,mixed,low --data "${lengths}" --batching pack
  run zero3-pack --backend zero3 --precision fp32,bf16 --data "${lengths}" --batching pack
  run zero2-pad --backend zero2 --precision fp32,bf16 --data "${lengths}" --batching pad
  # The real config files of tests/configs/real/, each as it is (the table's real-files section).
  "${root}/scripts/crossval-real-files.sh"
fi

table_file="$(mktemp)"
trap 'rm -f "${table_file}"' EXIT
"${bin}" crossval --table "${dir}" >"${table_file}"
python3 "${root}/scripts/splice_table.py" crossval-table "${mode}" "${table_file}" "${root}/README.md" "${root}/docs/crossval.md"
