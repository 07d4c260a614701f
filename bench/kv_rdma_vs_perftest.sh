#!/bin/sh
# kv_rdma_vs_perftest.sh BUILD_DIR - shoal-kv over its native RDMA protocol, the same workloads over
# its TCP front end, and perftest's ib_read_lat, back to back in ONE Soft-RoCE guest so that the
# numbers are comparable (same boot, same load; issue 12):
#   tests/softroce/run-in-guest.sh --timeout 900 -- bench/kv_rdma_vs_perftest.sh build/release
# One server shard on CPU 1, one client shard on CPU 0, both --poll-mode (KV_BENCH_POLL=
# to let them sleep when idle); one connection, one
# request at a time (latency). ib_read_lat reports whole READ round trips (t_typical = median),
# as shoal-kv-bench does. Cells: GET by a cached location (one READ, no server CPU) vs
# ib_read_lat of the same size as the record READ; GET by a control round trip (value inline);
# GET of 4 KB by a control round trip + READ; PUT 32 B (inline) and 64 KB (grant + WRITE + commit).
set -u
build=${1:?usage: kv_rdma_vs_perftest.sh BUILD_DIR}
dev=${SHOAL_RDMA_DEVICE:-rxe0}
ip=${SHOAL_RDMA_IP:-10.10.0.1}
gid=${SHOAL_RDMA_GID_INDEX:-1}
seconds=${KV_BENCH_SECONDS:-3}
poll=${KV_BENCH_POLL---poll-mode} # KV_BENCH_POLL= : shards sleep when idle
out=$(mktemp -d)
trap 'kill "$server" 2>/dev/null; rm -rf "$out"' EXIT
echo "load: $(cat /proc/loadavg) (guest)"

echo "== ib_read_lat (server and client in this guest)"
echo "#bytes #iter t_min t_max t_typical t_avg t_stdev p99 p99.9 (usec, whole READ round trip)"
for size in 128 4096; do
    # Both ends bounded in time; the client retries while the server is not listening yet (a
    # loaded guest can take seconds to start it).
    timeout 150 ib_read_lat -d "$dev" -x "$gid" -s "$size" -n 5000 >"$out/perf-server.txt" 2>&1 &
    perf=$!
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        sleep 1
        timeout 120 ib_read_lat -d "$dev" -x "$gid" -s "$size" -n 5000 "$ip" >"$out/perf-client.txt" 2>&1 && break
    done
    awk '/^ *#bytes/{getline; print}' "$out/perf-client.txt" | tee -a "$out/perftest.txt"
    wait "$perf"
done

stdbuf -oL "$build/apps/kv/shoal-kv" -l "$ip" -p 11211 --rdma-port 11400 -m 64 --smp 1 --cpuset 1 $poll \
    >"$out/server.txt" 2>&1 &
server=$!
for _ in $(seq 100); do
    grep -q "native RDMA protocol on" "$out/server.txt" 2>/dev/null && break
    sleep 0.1
done
sleep 1

bench() { # bench NAME ARGS...: one latency cell; prints its table rows
    name=$1
    shift
    echo "-- $name"
    "$build/apps/kv/shoal-kv-bench" --host "$ip" --smp 1 --cpuset 0 $poll --connections 1 --pipeline 1 \
        --keys 100 --duration "$seconds" --warmup 0.5 "$@" 2>&1 | grep -E '^\| server|rdma\)|error' |
        tee "$out/cell.txt"
}
p50() { awk -F'|' '$3 ~ /get|set/ {gsub(/ /, "", $6); print $6; exit}' "$out/cell.txt"; }
typical() { awk -v s="$1" '$1 == s {print $5}' "$out/perftest.txt"; }

echo
echo "== shoal-kv-bench (latency, one request at a time)"
echo "| target | op | count | QPS | P50 µs | P90 µs | P99 µs | P99.9 µs | hit % | server CPU µs/op |"
bench "rdma GET 32 B, cached location" --transport rdma --port 11400 --value-size 32 --get-ratio 1
small=$(p50)
bench "rdma GET 4 KB, cached location" --transport rdma --port 11400 --value-size 4096 --get-ratio 1
large=$(p50)
bench "rdma GET 32 B, control round trip (inline)" --transport rdma --port 11400 --value-size 32 --get-ratio 1 \
    --no-location-cache
bench "rdma GET 4 KB, control round trip + READ" --transport rdma --port 11400 --value-size 4096 --get-ratio 1 \
    --no-location-cache
bench "rdma PUT 32 B (inline)" --transport rdma --port 11400 --value-size 32 --get-ratio 0
bench "rdma PUT 64 KB (grant + WRITE + commit)" --transport rdma --port 11400 --value-size 65536 --get-ratio 0
bench "tcp GET 32 B" --port 11211 --value-size 32 --get-ratio 1
bench "tcp GET 4 KB" --port 11211 --value-size 4096 --get-ratio 1
bench "tcp PUT 32 B" --port 11211 --value-size 32 --get-ratio 0
bench "tcp PUT 64 KB" --port 11211 --value-size 65536 --get-ratio 0
kill -TERM "$server"
wait "$server"
echo
echo "cached GET P50 / ib_read_lat t_typical: 32 B value (120 B record) vs 128 B: $small / $(typical 128) =" \
    "$(echo "$small $(typical 128)" | awk '{printf "%.2f", $1 / $2}'); 4 KB value vs 4096 B: $large / $(typical 4096)" \
    "= $(echo "$large $(typical 4096)" | awk '{printf "%.2f", $1 / $2}')"
echo "load: $(cat /proc/loadavg) (guest)"
