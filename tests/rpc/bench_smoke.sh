#!/bin/sh
# Smoke test of shoal-rpc-bench: `local` mode (server and benchmark in one process, TCP on
# loopback) with a tiny grid; checks the table, the JSON and the SVG chart, and that every call
# echoed its payload (the benchmark exits non-zero on any failed call).
set -eu
bench="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common="--smp 2 --sizes 128,32K,256K --concurrency 1,4,16 --duration 0.1 --warmup 0.02"
"$bench" local $common --svg "$dir/chart.svg" > "$dir/table.txt"
for want in '| size | concurrency | Gb/s | P90 (us) | P99 (us) | QPS |' '| 128B | 1 |' '| 32K | 1 |' '| 256K | 1 |' '|  | 16 |'; do
    grep -qF -- "$want" "$dir/table.txt" || { echo "table lacks '$want':"; cat "$dir/table.txt"; exit 1; }
done
# (A cell's QPS is not checked: on a loaded machine a tiny cell may complete nothing.)
grep -q '^<svg ' "$dir/chart.svg" || { echo "no SVG written"; exit 1; }
[ "$(grep -c '<polyline' "$dir/chart.svg")" -eq 6 ] || { echo "expected 2 panels x 3 sizes of lines"; exit 1; }
grep -q '</svg>' "$dir/chart.svg"
"$bench" local $common --payload string --json > "$dir/out.json"
[ "$(grep -o '"qps"' "$dir/out.json" | wc -l)" -eq 9 ] || { echo "expected 9 cells in the JSON:"; cat "$dir/out.json"; exit 1; }
echo "shoal-rpc-bench smoke test passed"
