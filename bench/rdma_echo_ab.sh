#!/bin/sh
# rdma_echo_ab.sh BEFORE_ECHO AFTER_ECHO [ROUNDS] - `shoal-echo --transport rdma` 128 B at
# concurrency 1 and 16 with two builds (e.g. main's binary and a branch's), server and client of
# the same build, interleaved rounds in ONE Soft-RoCE guest boot so their numbers compare:
#   tests/softroce/run-in-guest.sh --timeout 900 -- bench/rdma_echo_ab.sh OLD/shoal-echo build/release/apps/echo/shoal-echo
# Server on CPU 1, client on CPU 0, both --poll-mode (as bench/rdma_vs_perftest.sh).
set -u
before=${1:?usage: rdma_echo_ab.sh BEFORE_ECHO AFTER_ECHO [ROUNDS]}
after=${2:?usage: rdma_echo_ab.sh BEFORE_ECHO AFTER_ECHO [ROUNDS]}
rounds=${3:-3}
ip=${SHOAL_RDMA_IP:-10.10.0.1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run_one() { # run_one NAME BINARY PORT
    "$2" server --transport rdma --host "$ip" --port "$3" --smp 1 --cpuset 1 --poll-mode >"$out/server.txt" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        grep -q "echo on" "$out/server.txt" && break
        sleep 0.1
    done
    echo "== $1 ($2)"
    "$2" bench --transport rdma --host "$ip" --port "$3" --smp 1 --cpuset 0 --poll-mode \
        --sizes 128 --concurrency 1,16 --duration 2 2>/dev/null
    kill -INT "$pid"
    wait "$pid"
}

port=18700
for r in $(seq "$rounds"); do
    echo "#### round $r"
    run_one before "$before" $port
    port=$((port + 1))
    run_one after "$after" $port
    port=$((port + 1))
done
