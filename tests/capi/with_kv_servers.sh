#!/usr/bin/env bash
# Starts two shoal-kv servers on free loopback ports (2 shards each), then runs a command with
# SHOAL_KV_SERVERS="127.0.0.1:P1,127.0.0.1:P2" and SHOAL_DEAD_SERVER="127.0.0.1:P3" (a port
# nobody listens on) in its environment; stops the servers afterwards. Exits with the command's
# status.
#
# With --rdma (on an RDMA device: the Soft-RoCE guest, SHOAL_RDMA_IP set by its wrapper) the
# servers also serve the native RDMA protocol, the lists name them as rdma://IP:RDMA_PORT and
# SHOAL_C_TEST_RDMA=1 tells the program to start its runtime with RDMA.
#
# usage: with_kv_servers.sh [--rdma] SHOAL_KV_BINARY COMMAND [ARGS...]
set -euo pipefail
rdma=0
if [ "$1" = "--rdma" ]; then
    rdma=1
    shift
    ip=${SHOAL_RDMA_IP:?SHOAL_RDMA_IP is not set (run through rdma-test-wrapper.sh)}
fi
bin=$1
shift
work=$(mktemp -d)
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
pids=()
cleanup() {
    local t=$SECONDS
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
    echo "with_kv_servers: servers stopped in $((SECONDS - t)) s" >&2
}
trap cleanup EXIT
servers=""
for i in 1 2; do
    port=$(free_port)
    if [ "$rdma" = 1 ]; then
        # Shard s of a server listens on its RDMA port + s.
        rport=$((18800 + 10 * i))
        "$bin" -l "$ip" -p "$port" --rdma-port "$rport" --smp 2 -m 64 >"$work/server$i.log" 2>&1 &
    else
        "$bin" -l 127.0.0.1 -p "$port" --smp 2 -m 64 >"$work/server$i.log" 2>&1 &
    fi
    pids+=($!)
    for _ in $(seq 100); do
        grep -q "listening on" "$work/server$i.log" && break
        sleep 0.1
    done
    grep -q "listening on" "$work/server$i.log" || { echo "shoal-kv did not start"; cat "$work/server$i.log"; exit 1; }
    if [ "$rdma" = 1 ]; then
        servers="${servers:+$servers,}rdma://$ip:$rport"
    else
        servers="${servers:+$servers,}127.0.0.1:$port"
    fi
done
export SHOAL_KV_SERVERS=$servers
if [ "$rdma" = 1 ]; then
    export SHOAL_DEAD_SERVER="rdma://$ip:18890"
    export SHOAL_C_TEST_RDMA=1
else
    export SHOAL_DEAD_SERVER="127.0.0.1:$(free_port)"
fi
echo "with_kv_servers: servers up after $SECONDS s" >&2
status=0
t=$SECONDS
timeout 480 "$@" || status=$?
echo "with_kv_servers: the command took $((SECONDS - t)) s" >&2
exit "$status"
