#!/bin/sh
# compare_rdma.sh BUILD_DIR - the RPC measurements of docs/performance.md and
# docs/performance-history.md ("RPC"), in ONE Soft-RoCE guest
# boot so that they are comparable:
#   tests/softroce/run-in-guest.sh --timeout 900 -- apps/rpc/compare_rdma.sh build/release
# 1. raw stream: shoal-echo over RDMA, 128 B at concurrency 1 and 16 (and 1 MB once);
# 2. RPC over RDMA: shoal-rpc-bench, same cells, then 1 MB and 8 MB (twice as long);
# 2b. RPC over the RDMA stream (--rdma-path stream), the path before the message API;
# 2c. the READ threshold: 8 KB to 60 KB as one SEND and by READ;
# 2d. 1 MB / 8 MB side by side, two rounds: this build, this build without its registration
#     cache (--rdma-registration-cache 0), and OLD_RPC_BENCH if set (another build's
#     shoal-rpc-bench, e.g. the one before the cache and parallel READs);
# 3. RPC over TCP in the same guest, same cells;
# 4. perftest ib_send_bw / ib_write_bw (and ib_read_bw, the bound of the READ scheme) at 1 MiB and 8 MiB.
# SMALL_ONLY=1 runs only the 128 B cells (concurrency 1 and 16), ROUNDS times (default 3)
# interleaved: raw stream, RPC message path, the same without coalescing (--rdma-coalesce off),
# RPC over the RDMA stream.
# Server `--smp 1 --cpuset 1`, client `--smp 1 --cpuset 0`, both `--poll-mode` (as in the RPC
# sections of docs/performance.md). SECONDS_PER_CELL (default 2) sets the duration of a cell.
set -u
build=${1:?usage: compare_rdma.sh BUILD_DIR}
dev=${SHOAL_RDMA_DEVICE:-rxe0}
ip=${SHOAL_RDMA_IP:-10.10.0.1}
gid=${SHOAL_RDMA_GID_INDEX:-1}
secs=${SECONDS_PER_CELL:-2}
echo_bin=$build/apps/echo/shoal-echo
rpc_bin=$build/apps/rpc/shoal-rpc-bench
srv="--smp 1 --cpuset 1 --poll-mode"
cli="--smp 1 --cpuset 0 --poll-mode"

serve() { # serve BIN ARGS... : starts a server in the background, sets $server
    "$@" > /dev/null 2>&1 &
    server=$!
    sleep 2
}
unserve() {
    kill -INT "$server" 2>/dev/null
    wait "$server" 2>/dev/null
}

if [ "${SMALL_ONLY:-0}" = 1 ]; then
    small() { # small NAME PORT BIN ARGS... : one server and one 128 B bench at concurrency 1 and 16
        name=$1
        port=$2
        bin=$3
        shift 3
        serve "$bin" server --transport rdma --host "$ip" --port "$port" $srv "$@"
        echo "-- $name"
        "$bin" bench --transport rdma --host "$ip" --port "$port" --sizes 128 --concurrency 1,16 \
            --duration "$secs" $cli "$@"
        unserve
    }
    for round in $(seq "${ROUNDS:-3}"); do
        echo "== round $round (128 B)"
        small "raw stream (shoal-echo)" 7100 "$echo_bin"
        small "RPC, message path" 9100 "$rpc_bin"
        small "RPC, message path, --rdma-coalesce off" 9600 "$rpc_bin" --rdma-coalesce off
        small "RPC, RDMA stream path" 9300 "$rpc_bin" --rdma-path stream
    done
    exit 0
fi

# The 128 B cells alternate raw stream and RPC twice, so that a burst of load on the host hits
# one run of each rather than one side of the comparison.
for round in 1 2; do
    echo "== round $round, raw stream: shoal-echo over RDMA"
    serve "$echo_bin" server --transport rdma --host "$ip" --port 7100 $srv
    "$echo_bin" bench --transport rdma --host "$ip" --port 7100 --sizes 128 --concurrency 1,16 --duration "$secs" $cli
    [ "$round" = 1 ] && "$echo_bin" bench --transport rdma --host "$ip" --port 7100 --sizes 1M --concurrency 1 \
        --duration "$secs" $cli
    unserve
    echo "== round $round, RPC over RDMA: shoal-rpc-bench"
    serve "$rpc_bin" server --transport rdma --host "$ip" --port 9100 $srv
    "$rpc_bin" bench --transport rdma --host "$ip" --port 9100 --sizes 128 --concurrency 1,16 --duration "$secs" $cli
    [ "$round" = 1 ] && "$rpc_bin" bench --transport rdma --host "$ip" --port 9100 --sizes 1M,8M --concurrency 1,4 \
        --duration "$((secs * 2))" $cli --connections-per-shard 1
    unserve
done

echo "== RPC over the RDMA stream (--rdma-path stream)"
serve "$rpc_bin" server --transport rdma --rdma-path stream --host "$ip" --port 9300 $srv
"$rpc_bin" bench --transport rdma --rdma-path stream --host "$ip" --port 9300 --sizes 128 --concurrency 1,16 \
    --duration "$secs" $cli
"$rpc_bin" bench --transport rdma --rdma-path stream --host "$ip" --port 9300 --sizes 1M,8M --concurrency 1,4 \
    --duration "$((secs * 2))" $cli --connections-per-shard 1
unserve

echo "== READ threshold: the same sizes as one SEND (threshold 64K) and by READ (threshold 1K)"
for threshold in 64K 1K; do
    serve "$rpc_bin" server --transport rdma --rdma-read-threshold "$threshold" --host "$ip" --port 9400 $srv
    "$rpc_bin" bench --transport rdma --rdma-read-threshold "$threshold" --host "$ip" --port 9400 \
        --sizes 8K,16K,32K,60K --concurrency 1,16 --duration "$secs" $cli
    unserve
done

echo "== large bodies side by side (QPS; MB/s one way = size x QPS)"
large() { # large NAME BIN ARGS...
    name=$1
    bin=$2
    shift 2
    serve "$bin" server --transport rdma --host "$ip" --port 9500 $srv "$@"
    echo "-- $name"
    "$bin" bench --transport rdma --host "$ip" --port 9500 --sizes 1M,8M --concurrency 1,4 \
        --duration "$((secs * 2))" $cli --connections-per-shard 1 "$@"
    unserve
}
for round in 1 2; do
    large "this build" "$rpc_bin"
    large "this build, no registration cache" "$rpc_bin" --rdma-registration-cache 0
    [ -n "${OLD_RPC_BENCH:-}" ] && large "OLD_RPC_BENCH" "$OLD_RPC_BENCH"
done

echo "== RPC over TCP in the same guest"
serve "$rpc_bin" server --transport tcp --host "$ip" --port 9200 $srv
"$rpc_bin" bench --transport tcp --host "$ip" --port 9200 --sizes 128 --concurrency 1,16 --duration "$secs" $cli
"$rpc_bin" bench --transport tcp --host "$ip" --port 9200 --sizes 1M,8M --concurrency 1,4 --duration "$secs" $cli \
    --connections-per-shard 1
unserve

echo "== perftest (#bytes #iter BW_peak BW_avg[MB/sec] MsgRate)"
for tool in ib_send_bw ib_write_bw ib_read_bw; do
    for size in 1048576 8388608; do
        "$tool" -d "$dev" -x "$gid" -s "$size" -n 100 > /dev/null 2>&1 &
        server=$!
        sleep 1
        printf '%s %s: ' "$tool" "$size"
        timeout 120 "$tool" -d "$dev" -x "$gid" -s "$size" -n 100 "$ip" 2>&1 | awk '/^ *#bytes/{getline; print}'
        wait "$server"
    done
done
