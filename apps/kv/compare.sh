#!/usr/bin/env bash
# shoal-kv against Debian's memcached 1.6, side by side: both servers pinned to the same server
# core(s), the same shoal-kv-bench client on the other core(s), one cell at a time with the two
# servers measured back to back (interleaved with --repeat), 90 % gets. Prints a markdown table
# of QPS, P99, server CPU per request and the servers' run-queue wait (the docs/performance.md
# "KV" section). The wait is the time the server's busiest threads (as many as server cores:
# the shards, memcached's workers) were runnable but not running during the cell
# (/proc/PID/task/*/schedstat): on a shared host, a cell whose wait is a large share of its
# duration measured the host's scheduler, not the server (a reactor that a build preempts waits
# a whole time slice, milliseconds, with requests in flight).
#
#   apps/kv/compare.sh [BUILD_DIR]       env: SERVER_CORES (1), CONNS ("1 16 256"),
#                                        SIZES ("32 1024 65536"), PIPES ("1 8"), DURATION (1),
#                                        REPEAT (1), RT (0; 1: servers and client SCHED_FIFO 1,
#                                        root only, so other processes cannot preempt them)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build/release}
server_cores=${SERVER_CORES:-1}
conns=${CONNS:-"1 16 256"}
sizes=${SIZES:-"32 1024 65536"}
pipes=${PIPES:-"1 8"}
duration=${DURATION:-1}
repeat=${REPEAT:-1}
rt=${RT:-0}
command -v memcached >/dev/null || { echo "compare: memcached is not installed (apt-get install memcached)" >&2; exit 1; }
prio=()
[ "$rt" = 1 ] && prio=(chrt -f 1)

cpus=$(nproc)
server_cpuset=$(seq -s, 0 $((server_cores - 1)))
if [ "$cpus" -gt "$server_cores" ]; then
    client_cpuset=$(seq -s, "$server_cores" $((cpus - 1)))
    client_smp=$((cpus - server_cores))
else
    client_cpuset=$server_cpuset # not enough cores: the client shares them (said in the output)
    client_smp=1
fi
sport=$((20000 + RANDOM % 10000))
mport=$((sport + 1))
mem=1024
user=()
[ "$(id -u)" = 0 ] && user=(-u root)

"${prio[@]}" taskset -c "$server_cpuset" memcached -l 127.0.0.1 -p "$mport" -U 0 -t "$server_cores" -m "$mem" -c 4096 "${user[@]}" &
mpid=$!
"${prio[@]}" "$build/apps/kv/shoal-kv" -l 127.0.0.1 -p "$sport" -m "$mem" -c 4096 --smp "$server_cores" --cpuset "$server_cpuset" \
    >/dev/null 2>&1 &
spid=$!
trap 'kill $spid $mpid 2>/dev/null || true; wait 2>/dev/null || true' EXIT
sleep 1
# "tid cpu_ns runqueue_wait_ns" for each thread of process $1.
sched_snapshot() {
    for t in /proc/"$1"/task/*; do echo "${t##*/} $(cat "$t/schedstat" 2>/dev/null)"; done
}
# Milliseconds of run-queue wait of the $3 threads that used the most CPU between snapshots $1 and $2.
runqueue_ms() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
parse = lambda s: {l.split()[0]: list(map(int, l.split()[1:3])) for l in s.splitlines() if len(l.split()) >= 3}
a, b, n = parse(sys.argv[1]), parse(sys.argv[2]), int(sys.argv[3])
d = sorted(((v[0] - a.get(t, [0, 0])[0], v[1] - a.get(t, [0, 0])[1]) for t, v in b.items()), reverse=True)
print(sum(w for _, w in d[:n]) // 1000000)
PY
}

echo "server cores: $server_cpuset (both servers), client: shoal-kv-bench --smp $client_smp on $client_cpuset," \
     "${duration} s per cell and server, 90 % gets, 10,000 keys$([ "$rt" = 1 ] && echo ", SCHED_FIFO")"
echo
echo "| server cores | conns | value | pipeline | shoal-kv QPS | memcached QPS | ratio | shoal-kv P99 µs | memcached P99 µs | shoal-kv CPU µs/op | memcached CPU µs/op | run-queue wait ms shoal-kv / memcached |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for size in $sizes; do
    for c in $conns; do
        for p in $pipes; do
            s0=$(sched_snapshot $spid) m0=$(sched_snapshot $mpid)
            json=$("${prio[@]}" "$build/apps/kv/shoal-kv-bench" --smp "$client_smp" --cpuset "$client_cpuset" \
                --targets "shoal-kv=127.0.0.1:$sport@$spid,memcached=127.0.0.1:$mport@$mpid" \
                --keys 10000 --value-size "$size" --get-ratio 0.9 --connections "$c" --pipeline "$p" \
                --duration "$duration" --warmup 0.2 --repeat "$repeat" --json) || { echo "cell failed" >&2; continue; }
            swait=$(runqueue_ms "$s0" "$(sched_snapshot $spid)" "$server_cores")
            mwait=$(runqueue_ms "$m0" "$(sched_snapshot $mpid)" "$server_cores")
            python3 - "$server_cores" "$c" "$size" "$p" "$swait" "$mwait" <<PY
import json, sys
d = json.loads('''$json''')
r = {x["target"]: x for x in d["results"]}
s, m = r["shoal-kv"], r["memcached"]
p99 = lambda x: max(x["get"]["p99_us"], x["set"]["p99_us"])
ratio = s["qps"] / m["qps"] if m["qps"] else 0
print(f"| {sys.argv[1]} | {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {s['qps']:.0f} | {m['qps']:.0f} | {ratio:.2f} | "
      f"{p99(s):.0f} | {p99(m):.0f} | {s['server_cpu_us_per_op']:.2f} | {m['server_cpu_us_per_op']:.2f} | {sys.argv[5]} / {sys.argv[6]} |")
PY
        done
    done
done
