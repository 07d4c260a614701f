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
#
# Hit ratio: `compare.sh hit-ratio [BUILD_DIR]` runs shoal-kv-bench's cache client (get, set on
# a miss, every hit checked byte for byte) against memcached and shoal-kv at the same -m and
# thread/shard count, over Zipf keys whose key space is a multiple of what fits (-m / mean value
# size), and prints hit ratio, evictions, RSS and overhead per item side by side. Each cell starts
# both servers fresh on free loopback ports and stops them after. Not a timing comparison: the
# numbers do not depend on the host's load.
#
#   apps/kv/compare.sh hit-ratio [BUILD_DIR]
#       env: MEMS ("32 64 256"), THREADS ("1 2"), ZIPFS ("0.9 1.1"), SPACES ("2 10"),
#            VALUES ("32-16384"), REQUESTS (100000 measured gets per server and cell),
#            CONNS (4), PIPE (8), TIME_LIMIT (900 s: later cells are skipped, saying so),
#            QUICK (1: MEMS=32 THREADS=1 ZIPFS=0.9 SPACES="2 10" REQUESTS=20000, a smoke run)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

source "apps/kv/loopback_ports.sh"

# The hit-ratio matrix (see the top): one cell at a time, the table at the end.
hit_ratio() {
    local build=${1:-build/release}
    local mems=${MEMS:-"32 64 256"} threads=${THREADS:-"1 2"} zipfs=${ZIPFS:-"0.9 1.1"}
    local spaces=${SPACES:-"2 10"} values=${VALUES:-32-16384} requests=${REQUESTS:-100000}
    local conns=${CONNS:-4} pipe=${PIPE:-8} limit=${TIME_LIMIT:-900}
    if [ "${QUICK:-0}" = 1 ]; then
        mems=32 threads=1 zipfs=0.9 spaces="2 10" requests=20000
    fi
    command -v memcached >/dev/null || { echo "compare: memcached is not installed (apt-get install memcached)" >&2; exit 1; }
    local user=()
    [ "$(id -u)" = 0 ] && user=(-u root)
    # The mean value size (--value-size's forms: N, MIN-MAX, SIZE:WEIGHT,...; K and M suffixes).
    local mean
    mean=$(python3 - "$values" <<'PY'
import sys
spec = sys.argv[1]
size = lambda t: int(t[:-1]) * {"K": 1024, "M": 1 << 20}[t[-1].upper()] if t[-1:].upper() in ("K", "M") else int(t)
if ":" in spec:
    items = [i.split(":") for i in spec.split(",")]
    total = sum(float(w) for _, w in items)
    print(int(sum(size(s) * float(w) for s, w in items) / total))
elif "-" in spec[1:]:
    lo, hi = spec.split("-", 1)
    print((size(lo) + size(hi)) // 2)
else:
    print(size(spec))
PY
)
    local start=$SECONDS results log
    results=$(mktemp)
    log=$(mktemp)
    local mem t s space keys sport mport spid mpid
    for mem in $mems; do
        for t in $threads; do
            for s in $zipfs; do
                for space in $spaces; do
                    keys=$((space * mem * 1048576 / mean))
                    if [ $((SECONDS - start)) -ge "$limit" ]; then
                        echo "$mem $t $s $space $keys skipped" >>"$results"
                        continue
                    fi
                    echo "compare: -m $mem, $t threads, zipf:$s, ${space}x ($keys keys)..." >&2
                    avoid_port="" serve_on_free_port memcached -l 127.0.0.1 -p "{port}" -U 0 -t "$t" \
                        -m "$mem" -c 1024 "${user[@]}" || { echo "memcached did not start" >&2; exit 1; }
                    mport=$served_port
                    mpid=$served_pid
                    # --no-pin: the scheduler places shoal-kv's shards as it places memcached's threads
                    # (a shard pinned to a core a build keeps busy would only make the cell slow).
                    avoid_port=$mport serve_on_free_port "$build/apps/kv/shoal-kv" -l 127.0.0.1 -p "{port}" \
                        -m "$mem" -c 1024 --smp "$t" --no-pin || { echo "shoal-kv did not start" >&2; exit 1; }
                    sport=$served_port
                    spid=$served_pid
                    # shellcheck disable=SC2064
                    trap "kill $spid $mpid 2>/dev/null || true; rm -f '$results' '$log'" EXIT
                    if json=$(timeout 600 "$build/apps/kv/shoal-kv-bench" --smp 1 \
                        --targets "shoal-kv=127.0.0.1:$sport@$spid,memcached=127.0.0.1:$mport@$mpid" \
                        --mode cache --keys "$keys" --key-dist "zipf:$s" --value-size "$values" \
                        --requests "$requests" --connections "$conns" --pipeline "$pipe" --json 2>"$log"); then
                        echo "$mem $t $s $space $keys $(echo "$json" | tr -d '\n')" >>"$results"
                    else
                        cat "$log" >&2
                        echo "$mem $t $s $space $keys failed" >>"$results"
                    fi
                    kill "$spid" "$mpid" 2>/dev/null || true
                    wait "$spid" "$mpid" 2>/dev/null || true
                done
            done
        done
    done
    echo "hit ratio: shoal-kv-bench --mode cache (get; set on a miss), $conns connections x pipeline $pipe," \
         "values $values B (mean $mean), $requests measured gets per server after the warm-up;" \
         "key space = N x what fits, what fits = -m / mean value size; $((SECONDS - start)) s"
    echo "overhead B/item = (server RSS - live items' key+value bytes) / live items, after the run;" \
         "above idle: minus the server's RSS before the warm-up too"
    echo
    python3 - "$results" <<'PY'
import json, sys
print("| -m MB | threads | zipf s | key space | keys | hit ratio shoal-kv / memcached | evictions (measured) shoal-kv / memcached "
      "| RSS MiB shoal-kv / memcached | overhead B/item shoal-kv / memcached | above idle shoal-kv / memcached "
      "| items shoal-kv / memcached | set failures shoal-kv / memcached |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
bad = False
for line in open(sys.argv[1]):
    mem, t, s, space, keys, rest = line.rstrip("\n").split(" ", 5)
    cell = f"| {mem} | {t} | {s} | {space}x | {keys} |"
    if rest in ("skipped", "failed"):
        print(f"{cell} {'skipped: the time limit was reached' if rest == 'skipped' else 'the bench failed'} | | | | | | |")
        bad |= rest == "failed"
        continue
    r = {x["target"]: x for x in json.loads(rest)["results"]}
    a, b = r["shoal-kv"], r["memcached"]
    pair = lambda f, k: f"{f(a[k])} / {f(b[k])}"
    whole = lambda v: f"{v:.0f}"
    print(f"{cell} {pair(lambda v: f'{v:.4f}', 'hit_ratio')} | {pair(str, 'evictions_measured')} | "
          f"{pair(lambda v: f'{v / 1048576:.1f}', 'rss_bytes')} | {pair(whole, 'overhead_per_item')} | "
          f"{pair(whole, 'overhead_above_idle')} | {pair(str, 'live_items')} | {pair(str, 'set_failures')} |")
    for x in (a, b):
        if x["wrong_values"] or x["errors"]:
            print(f"  {x['target']}: {x['wrong_values']} wrong values, {x['errors']} error replies", file=sys.stderr)
            bad = True
sys.exit(1 if bad else 0)
PY
}

if [ "${1:-}" = hit-ratio ]; then
    shift
    hit_ratio "$@"
    exit
fi

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
