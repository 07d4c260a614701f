#!/bin/sh
# rpc_echo_ab.sh BUILD_DIR OLD_DIR [ROUNDS] - RPC against the raw RDMA stream, two builds side by
# side, in ONE Soft-RoCE guest boot (the aim: RPC ≥ 0.9 × the stream's QPS at 128 B;
# docs/performance.md, "RDMA: RPC against the raw stream"):
#   tests/softroce/run-in-guest.sh --timeout 900 --rw "$PWD/BUILD_DIR" -- bench/rpc_echo_ab.sh BUILD_DIR OLD_DIR
# OLD_DIR holds the other build's shoal-echo and shoal-rpc-bench. Per round: `shoal-echo` and
# `shoal-rpc-bench` of each build, 128 B at concurrency 1 and 16, server and client of the same
# build; which build goes first alternates by round. Server on CPU 1, client on CPU 0, both
# --poll-mode; SECONDS_PER_CELL (2) per cell. Prints each cell's table row prefixed with
# echo-old/echo-new/rpc-old/rpc-new.
set -u
build=${1:?usage: rpc_echo_ab.sh BUILD_DIR OLD_DIR [ROUNDS]}
old=${2:?usage: rpc_echo_ab.sh BUILD_DIR OLD_DIR [ROUNDS]}
rounds=${3:-4}
ip=${SHOAL_RDMA_IP:-10.10.0.1}
secs=${SECONDS_PER_CELL:-2}
srv="--smp 1 --cpuset 1 --poll-mode"
cli="--smp 1 --cpuset 0 --poll-mode"
echo "load: $(cat /proc/loadavg) (guest)"
cells() { # cells NAME PORT BINARY: one server, the 128 B cells against it
    name=$1 port=$2 bin=$3
    "$bin" server --transport rdma --host "$ip" --port "$port" $srv >/dev/null 2>&1 &
    server=$!
    sleep 2
    "$bin" bench --transport rdma --host "$ip" --port "$port" --sizes 128 --concurrency 1,16 \
        --duration "$secs" $cli | grep -E '^\| *(128B)? *\| *[0-9]+ \|' | sed "s/^/$name /"
    kill -INT "$server" 2>/dev/null
    wait "$server" 2>/dev/null
}
for r in $(seq "$rounds"); do
    echo "== round $r"
    order="old new"
    [ $((r % 2)) = 0 ] && order="new old"
    for w in $order; do
        echo_bin=$old/shoal-echo rpc_bin=$old/shoal-rpc-bench
        [ "$w" = new ] && echo_bin=$build/apps/echo/shoal-echo rpc_bin=$build/apps/rpc/shoal-rpc-bench
        base=$((7000 + r * 10))
        [ "$w" = new ] && base=$((base + 5))
        cells "echo-$w" "$base" "$echo_bin"
        cells "rpc-$w" "$((base + 1))" "$rpc_bin"
    done
done
echo "load: $(cat /proc/loadavg) (guest)"
