#!/bin/sh
# rdma_vs_perftest.sh BUILD_DIR - runs perftest, shoal-bench-rdma and shoal-echo over RDMA back to
# back in ONE Soft-RoCE guest, so that their numbers are comparable (same boot, same load):
#   tests/softroce/run-in-guest.sh --timeout 900 -- bench/rdma_vs_perftest.sh build/release
# perftest's ib_send_lat reports half a round trip (t_typical is the median of RTT/2); the
# shoal numbers are whole round trips; ib_read_lat's are whole READ round trips, as
# shoal-bench-rdma's one-sided READ rows. Sizes follow the issue: 128 B latency, 1 MiB bandwidth.
set -u
build=${1:?usage: rdma_vs_perftest.sh BUILD_DIR}
dev=${SHOAL_RDMA_DEVICE:-rxe0}
ip=${SHOAL_RDMA_IP:-10.10.0.1}
gid=${SHOAL_RDMA_GID_INDEX:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

perf_pair() { # perf_pair TOOL ARGS... : server in the background, client against it
    tool=$1
    shift
    "$tool" -d "$dev" -x "$gid" "$@" >"$out/server.txt" 2>&1 &
    server=$!
    sleep 1
    timeout 120 "$tool" -d "$dev" -x "$gid" "$@" "$ip" 2>&1 | awk '/^ *#bytes/{getline; print}'
    wait "$server"
}

echo "== perftest (server and client in this guest)"
echo "ib_send_lat 128 B: #bytes #iter t_min t_max t_typical t_avg t_stdev p99 p99.9 (usec, half round trip)"
perf_pair ib_send_lat -s 128 -n 5000
echo "ib_read_lat 128 B: #bytes #iter t_min t_max t_typical t_avg t_stdev p99 p99.9 (usec, whole READ round trip)"
perf_pair ib_read_lat -s 128 -n 5000
echo "ib_send_bw 1 MiB: #bytes #iter BW_peak BW_avg[MB/sec] MsgRate"
perf_pair ib_send_bw -s 1048576 -n 500
echo "ib_write_bw 1 MiB: #bytes #iter BW_peak BW_avg[MB/sec] MsgRate"
perf_pair ib_write_bw -s 1048576 -n 500
echo "ib_send_bw 128 B: #bytes #iter BW_peak BW_avg[MB/sec] MsgRate"
perf_pair ib_send_bw -s 128 -n 20000

echo
echo "== shoal-bench-rdma, 2 shards, --poll-mode (server shard 1, client shard 0)"
"$build/bench/shoal-bench-rdma" --ip "$ip" --poll-mode --sizes 128,4K,64K --iterations 5000 --seconds 3 2>/dev/null
echo "== shoal-bench-rdma, 2 shards, sleeping when idle (default)"
"$build/bench/shoal-bench-rdma" --ip "$ip" --sizes 128 --iterations 5000 --seconds 3 2>/dev/null

echo
echo "== shoal-echo --transport rdma (server on CPU 1, client on CPU 0, both --poll-mode)"
echo_bin=$build/apps/echo/shoal-echo
"$echo_bin" server --transport rdma --host "$ip" --port 18600 --smp 1 --cpuset 1 --poll-mode >"$out/echo.txt" 2>&1 &
echo_pid=$!
for _ in $(seq 100); do
    grep -q "echo on" "$out/echo.txt" && break
    sleep 0.1
done
"$echo_bin" bench --transport rdma --host "$ip" --port 18600 --smp 1 --cpuset 0 --poll-mode \
    --sizes 128,4K,32K,256K,1M --concurrency 1,4,16 --duration 1 2>/dev/null
kill -INT "$echo_pid"
wait "$echo_pid"
