#!/bin/bash
# echo_app_test.sh SHOAL_ECHO - `shoal-echo --transport rdma` end to end on a real RDMA device
# (the Soft-RoCE guest when the host has none): a 2-shard server, a short benchmark run over
# several sizes and concurrencies, then SIGINT. Fails unless requests completed, no client failed
# and the server stopped cleanly having served every connection.
set -euo pipefail
echo_bin=${1:?usage: echo_app_test.sh SHOAL_ECHO}
ip=${SHOAL_RDMA_IP:?SHOAL_RDMA_IP is not set (run through rdma-test-wrapper.sh)}
port=18700
out=$(mktemp -d)
trap 'kill -KILL $server 2>/dev/null || true; rm -rf "$out"' EXIT

"$echo_bin" server --transport rdma --host "$ip" --port "$port" --smp 2 --no-pin >"$out/server.txt" 2>&1 &
server=$!
# Up to 120 s to listen: an ASan binary takes seconds to start in the emulated guest, and each
# round of this loop costs ~0.4 s of process starts there; the loop ends as soon as it listens.
deadline=$((SECONDS + 120))
while [ "$SECONDS" -lt "$deadline" ]; do
    grep -q "echo on" "$out/server.txt" && break
    kill -0 "$server" 2>/dev/null || { cat "$out/server.txt"; echo "FAIL: server exited early"; exit 1; }
    sleep 0.1
done
grep -q "echo on" "$out/server.txt" || { cat "$out/server.txt"; echo "FAIL: server did not listen"; exit 1; }

# 1 byte .. 1 MiB (several receive buffers per message), up to 8 connections over 2 client shards.
"$echo_bin" bench --transport rdma --host "$ip" --port "$port" --smp 2 --no-pin \
    --sizes 1,128,64K,1M --concurrency 1,8 --duration 0.3 --warmup 0.05 --json >"$out/bench.json" \
    2>"$out/bench.err" || { cat "$out/bench.err" "$out/bench.json"; echo "FAIL: bench exited $?"; exit 1; }

cells=$(grep -c '"target"' "$out/bench.json" || true)
[ "$cells" -eq 8 ] || { cat "$out/bench.json"; echo "FAIL: expected 8 cells, got $cells"; exit 1; }
# How many requests fit in a cell depends on the machine (an ASan build in the emulated guest
# may finish none of 1 MiB in 0.3 s), so only the total must be positive; every connection of
# every cell must still have been served and ended without error (checked below).
total=$(sed -n 's/.*"requests": \([0-9]*\),.*/\1/p' "$out/bench.json" | awk '{t += $1} END {print t + 0}')
[ "$total" -gt 0 ] || { cat "$out/bench.json"; echo "FAIL: no request completed"; exit 1; }
if grep -v '"failed_clients": 0,' "$out/bench.json" | grep -q '"failed_clients"'; then
    cat "$out/bench.json"; echo "FAIL: a client failed"; exit 1
fi

kill -INT "$server"
rc=0
wait "$server" || rc=$?
cat "$out/server.txt"
[ "$rc" -eq 0 ] || { echo "FAIL: server exited $rc after SIGINT"; exit 1; }
served=$(sed -n 's/^shoal-echo: served \([0-9]*\) connections$/\1/p' "$out/server.txt")
# 8 cells: 1 + 8 connections per size.
[ "${served:-0}" -eq 36 ] || { echo "FAIL: expected 36 connections served, got ${served:-none}"; exit 1; }
echo "PASS: shoal-echo over RDMA, $cells cells, $served connections, $total requests"
