#!/usr/bin/env bash
# The README's test command: on a fresh Debian 12 machine it installs what shoal needs, builds
# the release and the ASan+UBSan configurations, runs every native test in both, then runs the
# RDMA-labelled tests of both on a real device or, without one, inside the Soft-RoCE qemu guest.
# Exits non-zero when anything fails. CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=$(nproc)
step() { printf '\n=== %s (%s)\n' "$*" "$(date +%H:%M:%S)"; }
start=$SECONDS

step "install dependencies"
scripts/install-deps.sh

step "build release"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"

step "native tests, release"
ctest --preset release -LE '^rdma$' -j "$jobs" --timeout 300

step "build sanitize (ASan + UBSan)"
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j "$jobs"

step "native tests, sanitize"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --preset sanitize -LE '^rdma$|^softroce$' -j "$jobs" --timeout 600

step "fuzz targets (libFuzzer, clang), ${SHOAL_FUZZ_SECONDS:-20} s each"
SHOAL_FUZZ_SECONDS=${SHOAL_FUZZ_SECONDS:-20} scripts/run-fuzzers.sh

step "RDMA tests (device or Soft-RoCE guest), release"
tests/softroce/run-rdma-tests.sh build/release

step "RDMA tests (device or Soft-RoCE guest), sanitize"
tests/softroce/run-rdma-tests.sh build/sanitize

step "done in $((SECONDS - start)) s"
