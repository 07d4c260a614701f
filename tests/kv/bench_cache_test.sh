#!/usr/bin/env bash
# shoal-kv-bench's cache-client mode (get, set on a miss) with Zipf keys against shoal-kv at a small
# -m (and against memcached when installed): it finishes, the hit ratio is strictly between 0 and 1,
# no hit had wrong bytes, no get was answered with an error, the server evicted (the key space is
# about 5x what fits), and the stats, RSS and probe were read. A bad --key-dist is refused with
# a message naming it.
#
# usage: bench_cache_test.sh SHOAL_KV_BINARY SHOAL_KV_BENCH_BINARY
set -euo pipefail
server_bin=$1
bench_bin=$2
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" || true; done
    wait || true
    rm -rf "$work"
}
trap 'cleanup 2>/dev/null' EXIT
# shellcheck source=../../apps/kv/loopback_ports.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../apps/kv/loopback_ports.sh"

# The bench against NAME at PORT (process PID), its JSON in $work/NAME.json.
run_bench() {
    local name=$1 port=$2 pid=$3
    "$bench_bin" --smp 1 --targets "$name=127.0.0.1:$port@$pid" --mode cache --keys 20000 \
        --key-dist zipf:0.9 --value-size 100-4000 --requests 20000 --warmup-max 3 --connections 4 \
        --pipeline 4 --json >"$work/$name.json" 2>"$work/$name.err" || {
        echo "FAIL: the bench against $name exited with $?"
        cat "$work/$name.err" "$work/$name.json"
        exit 1
    }
}

served_log="$work/shoal.log" serve_on_free_port "$server_bin" -l 127.0.0.1 -p "{port}" --smp 1 -m 16 ||
    { cat "$work/shoal.log"; exit 1; }
pids+=("$served_pid")
port=$served_port
run_bench shoal-kv "$port" "$served_pid"

if [ -x /usr/bin/memcached ]; then
    user=()
    [ "$(id -u)" = 0 ] && user=(-u root)
    served_log="$work/memcached.log" avoid_port=$port serve_on_free_port \
        /usr/bin/memcached -l 127.0.0.1 -p "{port}" -U 0 -t 1 -m 16 "${user[@]}" ||
        { cat "$work/memcached.log"; exit 1; }
    pids+=("$served_pid")
    run_bench memcached "$served_port" "$served_pid"
else
    echo "memcached is not installed: shoal-kv only"
fi

python3 - "$work"/*.json <<'PY'
import json, sys
failed = False
for path in sys.argv[1:]:
    r = json.load(open(path))["results"][0]
    print(json.dumps(r))
    problems = []
    if not 0 < r["hit_ratio"] < 1: problems.append("hit ratio not strictly between 0 and 1")
    if r["gets"] != 20000: problems.append("not 20000 measured gets")
    if r["hits"] + r["misses"] != r["gets"]: problems.append("hits + misses != gets")
    if r["wrong_values"] != 0: problems.append("wrong values")
    if r["errors"] != 0: problems.append("error replies to gets")
    if r["sets"] != r["misses"]: problems.append("not one set per miss")
    if r["evictions_warmup"] + r["evictions_measured"] <= 0: problems.append("no evictions read from stats")
    if r["rss_bytes"] <= 0 or r["curr_items"] <= 0: problems.append("no RSS or curr_items")
    if not 0 < r["live_items"] <= 20000 or r["live_bytes"] <= 0: problems.append("no live items probed")
    if problems:
        print(f"FAIL ({r['target']}): " + "; ".join(problems))
        failed = True
sys.exit(1 if failed else 0)
PY

# A bad distribution is refused before anything runs, saying what is wrong.
status=0
"$bench_bin" --port "$port" --mode cache --key-dist zipf:x >"$work/bad.out" 2>&1 || status=$?
[ "$status" = 2 ] || { echo "FAIL: --key-dist zipf:x exited with $status"; cat "$work/bad.out"; exit 1; }
grep -q -- "--key-dist 'zipf:x'" "$work/bad.out" || { echo "FAIL: unclear message:"; cat "$work/bad.out"; exit 1; }
status=0
"$bench_bin" --port "$port" --value-size 100:0.5,1000 >"$work/bad.out" 2>&1 || status=$?
[ "$status" = 2 ] || { echo "FAIL: --value-size 100:0.5,1000 exited with $status"; exit 1; }
grep -q "SIZE:WEIGHT" "$work/bad.out" || { echo "FAIL: unclear message:"; cat "$work/bad.out"; exit 1; }
echo "ok"
