#!/usr/bin/env bash
# Builds every libFuzzer target (cmake/shoal_fuzz.cmake) with clang-14 in build/fuzz and runs
# each for SHOAL_FUZZ_SECONDS (default 30) seconds, seeded with its corpus from the repository.
# New inputs go to a scratch directory (the repository's corpus is not modified); a crash,
# leak or sanitizer report fails the script and leaves the reproducer in build/fuzz/artifacts.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${SHOAL_FUZZ_SECONDS:-30}
jobs=$(nproc)
build=build/fuzz

command -v clang++-14 >/dev/null || { echo "run-fuzzers: clang++-14 is missing (apt-get install clang-14)" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
    -DSHOAL_FUZZ=ON -DSHOAL_WERROR=OFF ${SHOAL_FUZZ_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$jobs" --target fuzzers

list=$(cat "$build/fuzzers.txt")
[ -n "$list" ] || { echo "run-fuzzers: no fuzz targets are defined" >&2; exit 1; }
mkdir -p "$build/artifacts" "$build/logs"
# One target per core at a time (each fuzzer is one process): the targets' time is their number
# over the cores, not their sum. Each writes its own log, printed once it has ended.
run_one() { # run_one BINARY CORPUS: one target, its log in $build/logs
  local binary=$1 corpus=$2 name scratch rc=0
  name=$(basename "$binary")
  scratch=$(mktemp -d)
  "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$name-" "$scratch" "$corpus" >"$build/logs/$name.log" 2>&1 || rc=$?
  rm -rf "$scratch"
  return "$rc"
}
pids=() names=()
failed=0
wait_oldest() {
  if ! wait "${pids[0]}"; then
    echo "run-fuzzers: ${names[0]} FAILED; its log:" >&2
    cat "$build/logs/${names[0]}.log" >&2
    failed=1
  else
    echo "run-fuzzers: ${names[0]} done: $(grep -E '^stat::number_of_executed_units' "$build/logs/${names[0]}.log" | awk '{print $2}') runs"
  fi
  pids=("${pids[@]:1}") names=("${names[@]:1}")
}
for entry in $list; do
  binary=${entry%%=*}
  corpus=${entry#*=}
  [ "${#pids[@]}" -lt "$jobs" ] || wait_oldest
  echo "run-fuzzers: $(basename "$binary") for ${seconds}s (corpus $corpus)"
  run_one "$binary" "$corpus" &
  pids+=($!) names+=("$(basename "$binary")")
done
while [ "${#pids[@]}" -gt 0 ]; do
  wait_oldest
done
[ "$failed" = 0 ] || { echo "run-fuzzers: a target failed (reproducers in $build/artifacts)" >&2; exit 1; }
echo "run-fuzzers: every target ran ${seconds}s without a finding"
