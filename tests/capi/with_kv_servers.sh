#!/usr/bin/env bash
# Starts two shoal-kv servers on free loopback ports (2 shards each), then runs a command with
# SHOAL_KV_SERVERS="127.0.0.1:P1,127.0.0.1:P2" and SHOAL_DEAD_SERVER="127.0.0.1:P3" (a port
# nobody listens on) in its environment; stops the servers afterwards. Exits with the command's
# status.
#
# usage: with_kv_servers.sh SHOAL_KV_BINARY COMMAND [ARGS...]
set -euo pipefail
bin=$1
shift
work=$(mktemp -d)
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
servers=""
for i in 1 2; do
    port=$(free_port)
    "$bin" -l 127.0.0.1 -p "$port" --smp 2 -m 64 >"$work/server$i.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        grep -q "listening on" "$work/server$i.log" && break
        sleep 0.1
    done
    grep -q "listening on" "$work/server$i.log" || { echo "shoal-kv did not start"; cat "$work/server$i.log"; exit 1; }
    servers="${servers:+$servers,}127.0.0.1:$port"
done
export SHOAL_KV_SERVERS=$servers
export SHOAL_DEAD_SERVER="127.0.0.1:$(free_port)"
status=0
timeout 120 "$@" || status=$?
exit "$status"
