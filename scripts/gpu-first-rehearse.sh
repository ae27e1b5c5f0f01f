#!/usr/bin/env bash
# gpu-first-rehearse.sh OUT — `scripts/gpu-first.sh --rehearse` on a CPU machine: the first call
# and --more end to end with --device cpu substitutions (the developer build, the tiny model; the
# device bundle really unpacked and pip-installed, the crossvals really run against FSDP1, FSDP2
# and DeepSpeed), then checks what the device tool would bring back.
# Owns: three runs and their checks —
#   1. the first call with a planted failing cell (crossval-fsdp): every cell has a status,
#      seconds and a limit; the planted cell FAILED and the cells after it still ran; at most 8
#      files under OUT; SUMMARY.md names every cell.
#   2. the same call killed (SIGKILL to its process group, as the device tool's limit does) at 60%
#      of run 1's wall time: SUMMARY.md is still there, lists the cells that ended and the one in
#      flight; at most 8 files.
#   3. --more on the work folder run 1 left: the same checks.
# Prints each cell's seconds against its limit. Exit 1 when a check fails or a cell that was not
# planted FAILED; a TIMEOUT on this CPU is listed (the CPU is slower than the device) but passes.
# Env: REHEARSE_WORK (default /tmp/zb-gpu-first-rehearse), and gpu-first.sh's.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: gpu-first-rehearse.sh OUT}"
mkdir -p "${out}" && out="$(cd "${out}" && pwd)"
work="${REHEARSE_WORK:-/tmp/zb-gpu-first-rehearse}"
export GPU_FIRST_REHEARSE=1 GPU_FIRST_REHEARSE_INNER=1 GPU_FIRST_WORK="${work}"
fail=0
problem() { echo "REHEARSAL CHECK FAILED: $*"; fail=1; }

# check_out DIR CALL — the device tool's view of OUT after a call.
check_out() {
  local dir="$1" call="$2" n
  n="$(find "${dir}" -type f | wc -l)"
  [ "${n}" -le 8 ] || problem "${dir}: ${n} files (at most 8 come back)"
  [ -s "${dir}/SUMMARY.md" ] || problem "${dir}: no SUMMARY.md"
  [ -s "${dir}/results.tgz" ] || problem "${dir}: no results.tgz"
  tar tzf "${dir}/results.tgz" > /dev/null 2>&1 || problem "${dir}: results.tgz does not read"
  echo "${dir}: ${n} files: $(cd "${dir}" && ls | tr '\n' ' ')"
}
# check_cells TSV CALL PLANTED — every ended cell has a status, seconds and a limit.
check_cells() {
  local tsv="$1" call="$2" planted="$3"
  awk -F'\t' -v c="${call}" -v p="${planted}" '
    $1 != c { next }
    NF != 7 || $3 == "" || $5 !~ /^[0-9]+$/ || $6 !~ /^[0-9]+$/ { print "bad row: " $0; bad = 1 }
    $2 == p && $3 != "FAILED" { print "planted cell " p " is " $3; bad = 1 }
    $3 == "FAILED" && $2 != p { print "cell " $2 " FAILED (not planted): see its log"; bad = 1 }
    END { exit bad }' "${tsv}" || problem "${tsv}: rows of call ${call}"
}
table() {
  awk -F'\t' -v c="$2" 'BEGIN { printf "%-22s %-34s %6s %6s\n", "cell", "status", "s", "limit" }
    $1 == c { printf "%-22s %-34s %6s %6s\n", $2, $3, $5, $6; if ($3 == "TIMEOUT") t = t " " $2 }
    END { if (t != "") print "timed out on this CPU (listed, not failed):" t }' "$1"
}

echo "== rehearsal 1: the first call, planted failure in crossval-fsdp"
t0="$(date +%s)"
GPU_FIRST_PLANT_FAIL=crossval-fsdp bash "${root}/scripts/gpu-first.sh" --out "${out}/first" > "${out}.first.log" 2>&1
t1="$(date +%s)"
wall1=$((t1 - t0))
table "${work}/cells.tsv" first
check_cells "${work}/cells.tsv" first crossval-fsdp
want="$(bash "${root}/scripts/gpu-first.sh" --dry-run | awk 'NR > 1 && $1 != "call:" { print $1 }')"
for c in ${want}; do
  grep -q "| first | ${c} |" "${out}/first/SUMMARY.md" || problem "SUMMARY.md of run 1 does not name cell ${c}"
done
check_out "${out}/first" first
cp -r "${work}" "${work}.after-first"

echo "== rehearsal 2: the first call killed at 60% of run 1's ${wall1} s"
kill_at=$((wall1 * 6 / 10)); [ "${kill_at}" -lt 1 ] && kill_at=1
setsid bash "${root}/scripts/gpu-first.sh" --out "${out}/killed" > "${out}.killed.log" 2>&1 &
pid=$!
sleep "${kill_at}"
kill -KILL -- "-${pid}" 2>/dev/null
wait "${pid}" 2>/dev/null
pkill -KILL -f "gpu-first.sh --cell" 2>/dev/null  # a cell started in another group (none expected)
check_out "${out}/killed" first
grep -q "in flight when this summary was written" "${out}/killed/SUMMARY.md" ||
  problem "SUMMARY.md after the kill does not name the cell in flight"
echo "killed after ${kill_at} s; the summary lists: $(grep -c '^| first |' "${out}/killed/SUMMARY.md") cell rows"

echo "== rehearsal 3: --more on run 1's work folder"
rm -rf "${work}" && mv "${work}.after-first" "${work}"
bash "${root}/scripts/gpu-first.sh" --more --out "${out}/more" > "${out}.more.log" 2>&1
table "${work}/cells.tsv" more
check_cells "${work}/cells.tsv" more none
check_out "${out}/more" more

# Every cell of both calls has a limit (the dry runs) and the required caps fit each deadline.
bash "${root}/scripts/gpu-first.sh" --dry-run > /dev/null || problem "the first call's dry run"
bash "${root}/scripts/gpu-first.sh" --dry-run --more > /dev/null || problem "--more's dry run"
echo "rehearsal: run 1 took ${wall1} s; logs ${out}.{first,killed,more}.log"
# REHEARSAL.md: what a reader of the rehearsal needs (committed as reports/results/cpu/gpu-first-rehearsal.md).
{
  echo "# gpu-first.sh rehearsal on a CPU machine"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), git $(git -C "${root}" rev-parse --short HEAD 2>/dev/null), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
  echo "Run 1 (the first call, planted failure in crossval-fsdp) took ${wall1} s; run 2 was killed at ${kill_at} s"
  echo "(60%); run 3 is --more on run 1's work folder. Seconds are this CPU's (--device cpu, the tiny"
  echo "model), not the device's; a TIMEOUT here is listed, not failed. Checks: $([ "${fail}" = 0 ] && echo "all passed" || echo "SOME FAILED")."
  for c in first more; do
    echo; echo "## ${c}"; echo; echo '```'; table "${work}/cells.tsv" "${c}"; echo '```'
  done
  echo; echo "## killed at ${kill_at} s: what its SUMMARY.md lists"; echo; echo '```'
  grep -E '^\| first \||in flight' "${out}/killed/SUMMARY.md"; echo '```'
  echo; echo "Files under OUT after each call: $(for d in first killed more; do printf '%s %s; ' "${d}" "$(find "${out}/${d}" -type f | wc -l)"; done)"
} > "${out}/REHEARSAL.md"
[ "${fail}" = 0 ] && echo "rehearsal: every check passed" || echo "rehearsal: some checks FAILED"
exit "${fail}"
