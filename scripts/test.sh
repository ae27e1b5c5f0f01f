#!/usr/bin/env bash
# test.sh — set-up if needed, build, run every test (CTest: GoogleTest suites, Gloo multi-rank).
# This is the README's test command and exactly what .ci/run runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${root}/scripts/setup.sh" --crossval
"${root}/scripts/build.sh"
cd "${BUILD_DIR:-${root}/build}"
ctest --output-on-failure -j "${TEST_JOBS:-2}" "$@"
