#!/usr/bin/env bash
# Starts a remote pool server (capi_rdma_peer pool-server: largest lease 1 MiB, quota 2 MiB per
# client, watermark 3 MiB) on SHOAL_RDMA_IP, then runs a command with SHOAL_POOL_SERVER=IP:PORT
# and SHOAL_POOL_SERVER_PID in its environment (the command may kill the server to test a
# vanished peer); stops the server afterwards. Exits with the command's status.
#
# usage: with_pool_server.sh CAPI_RDMA_PEER COMMAND [ARGS...]
set -euo pipefail
ip=${SHOAL_RDMA_IP:?SHOAL_RDMA_IP is not set (run through rdma-test-wrapper.sh)}
peer=$1
shift
work=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mib=$((1 << 20))
"$peer" pool-server "$ip:0" "$mib" $((2 * mib)) $((3 * mib)) >"$work/pool.log" 2>&1 &
pid=$!
# Up to 120 s to start (an ASan process takes seconds in the guest, and every round of this
# loop starts processes there); the loop ends as soon as it is up.
deadline=$((SECONDS + 120))
while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$pid" 2>/dev/null; do
    grep -q "listening on" "$work/pool.log" && break
    sleep 0.1
done
grep -q "listening on" "$work/pool.log" || { echo "the pool server did not start"; cat "$work/pool.log"; exit 1; }
export SHOAL_POOL_SERVER=$(sed -n 's/^listening on //p' "$work/pool.log")
export SHOAL_POOL_SERVER_PID=$pid
echo "with_pool_server: up after $SECONDS s" >&2
"$@"
