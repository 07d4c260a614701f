#!/usr/bin/env bash
# Starts two shoal-kv servers on loopback ports they choose (`-p 0`, 2 shards each), then runs a
# command with SHOAL_KV_SERVERS="127.0.0.1:P1,127.0.0.1:P2" and SHOAL_DEAD_SERVER="127.0.0.1:P3"
# (a port nobody listens on) in its environment; stops the servers afterwards. Exits with the
# command's status.
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
# listening_port LOG: the TCP port from the server's "listening on HOST:PORT" line, if printed
# yet. Builtins only: in the emulated guest every process start costs 0.1-0.5 s.
listening_port() {
    local line
    [ -e "$1" ] || return 1 # the server's shell has not opened it yet
    while IFS= read -r line; do
        if [[ $line =~ ^shoal-kv:\ listening\ on\ [^\ ]*:([0-9]+)\  ]]; then
            echo "${BASH_REMATCH[1]}"
            return 0
        fi
    done <"$1"
    return 1
}
for i in 1 2; do
    if [ "$rdma" = 1 ]; then
        # Shard s of a server listens on its RDMA port + s.
        rport=$((18800 + 10 * i))
        "$bin" -l "$ip" -p 0 --rdma-port "$rport" --smp 2 -m 64 >"$work/server$i.log" 2>&1 &
    else
        "$bin" -l 127.0.0.1 -p 0 --smp 2 -m 64 >"$work/server$i.log" 2>&1 &
    fi
    pids+=($!)
    deadline=$((SECONDS + 120)) # a sanitized server takes ~7 s to start in an idle guest
    until port=$(listening_port "$work/server$i.log"); do
        if ((SECONDS > deadline)) || ! kill -0 "${pids[-1]}" 2>/dev/null; then
            echo "shoal-kv did not start"
            cat "$work/server$i.log"
            exit 1
        fi
        sleep 0.1
    done
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
    # A port nobody listens on: bound and closed again by python (natively only; the guest path
    # above starts no interpreter).
    dead_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    export SHOAL_DEAD_SERVER="127.0.0.1:$dead_port"
fi
echo "with_kv_servers: servers up after $SECONDS s" >&2
status=0
t=$SECONDS
timeout 480 "$@" || status=$?
echo "with_kv_servers: the command took $((SECONDS - t)) s" >&2
exit "$status"
