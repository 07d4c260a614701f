#!/usr/bin/env bash
# SIGTERM under load: shoal-kv (2 shards) serves shoal-kv-bench's 32 pipelined connections;
# SIGTERM must stop it (within 60 s: a hang, not a slow host, fails) with exit status 0 and its "stopped" line, and the
# benchmark must see its connections end (not hang).
#
# usage: sigterm_test.sh SHOAL_KV_BINARY SHOAL_KV_BENCH_BINARY
set -euo pipefail
server_bin=$1
bench_bin=$2
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$server_bin" -l 127.0.0.1 -p "$port" --smp 2 -m 64 >"$work/server.log" 2>&1 &
server=$!
trap 'kill -KILL $server 2>/dev/null || true; kill -KILL ${bench:-0} 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 600); do
    grep -q "listening on" "$work/server.log" && break
    sleep 0.1
done
grep -q "listening on" "$work/server.log" || { echo "shoal-kv did not start"; cat "$work/server.log"; exit 1; }

"$bench_bin" --port "$port" --smp 1 --connections 32 --pipeline 8 --value-size 100-4000 --duration 20 \
    --warmup 0 >"$work/bench.log" 2>&1 &
bench=$!
sleep 1.5
kill -0 "$bench" || { echo "the load ended early:"; cat "$work/bench.log"; exit 1; }
kill -TERM "$server"
start=$SECONDS
status=0
for _ in $(seq 600); do
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$server" 2>/dev/null; then
    echo "FAIL: shoal-kv still running 60 s after SIGTERM"
    cat "$work/server.log"
    exit 1
fi
wait "$server" || status=$?
echo "shoal-kv exited with $status $((SECONDS - start)) s after SIGTERM under load"
cat "$work/server.log"
[ "$status" = 0 ] || { echo "FAIL: exit status $status"; exit 1; }
grep -q "shoal-kv: stopped" "$work/server.log" || { echo "FAIL: no clean stop"; exit 1; }
# The client sees its connections closed (an error, since the server went away) and exits.
for _ in $(seq 600); do
    kill -0 "$bench" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$bench" 2>/dev/null; then
    echo "FAIL: the benchmark's connections did not end"
    exit 1
fi
echo "ok"
