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
mkdir -p "$build/artifacts"
for entry in $list; do
  binary=${entry%%=*}
  name=$(basename "$binary")
  corpus=${entry#*=}
  scratch=$(mktemp -d)
  echo "run-fuzzers: $name for ${seconds}s (corpus $corpus)"
  "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$name-" "$scratch" "$corpus"
  rm -rf "$scratch"
done
echo "run-fuzzers: every target ran ${seconds}s without a finding"
