#!/bin/sh
# kv_inline_sweep.sh BUILD_DIR - where the native RDMA protocol's inline thresholds should be
# measured in ONE Soft-RoCE guest boot:
#   tests/softroce/run-in-guest.sh --timeout 1500 -- bench/kv_inline_sweep.sh build/release
# For each value size (KV_SWEEP_SIZES, default 256 B .. 64 KB) four latency cells (P50, one
# request at a time, bench/kv_rdma_lib.sh's setup): PUT inline (--inline-put-max 1M) vs granted
# (grant → WRITE_WITH_IMM → commit, --inline-put-max 0), and GET by a control round trip with the
# value inline (--inline-get-max 1M) vs with a location + READ (--inline-get-max 0), no location
# cache. KV_SWEEP_ROUNDS (3) rounds; the two cells of a pair run back to back, which one first
# alternating by round. A value that does not fit one message (64 KB) cannot go inline: n/a.
# Prints every cell, then per size the median of the rounds and granted/inline, READ/inline.
set -u
build=${1:?usage: kv_inline_sweep.sh BUILD_DIR}
out=$(mktemp -d)
KV_BENCH_SECONDS=${KV_BENCH_SECONDS:-1} # lib.sh reads it
. "$(dirname "$0")/kv_rdma_lib.sh"
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$out"' EXIT
sizes=${KV_SWEEP_SIZES:-256 1024 2048 4096 8192 16384 32768 65536}
echo "load: $(cat /proc/loadavg) (guest)"
start_kv_server

# Not counted: the first cells after the guest boots ran 4-40x slower than the same cells later.
bench "warm-up" --transport rdma --port 11400 --value-size 4096 --get-ratio 0.5 --no-location-cache >/dev/null

for round in $(seq "${KV_SWEEP_ROUNDS:-3}"); do
    for size in $sizes; do
        put_inline="cell $round $size put-inline --get-ratio 0 --inline-put-max 1048576"
        put_granted="cell $round $size put-granted --get-ratio 0 --inline-put-max 0"
        get_inline="cell $round $size get-inline --get-ratio 1 --no-location-cache --inline-get-max 1048576"
        get_read="cell $round $size get-read --get-ratio 1 --no-location-cache --inline-get-max 0"
        # A request header (40 B) + key + value, a response header (64 B) + value: one message
        # (64 KB, the receive buffer) at most; larger values take the other path anyway.
        fits=$([ "$size" -le $((65536 - 64 - 16)) ] && echo 1)
        if [ $((round % 2)) = 1 ]; then
            [ -n "$fits" ] && $put_inline
            $put_granted
            [ -n "$fits" ] && $get_inline
            $get_read
        else
            $put_granted
            [ -n "$fits" ] && $put_inline
            $get_read
            [ -n "$fits" ] && $get_inline
        fi
    done
done
stop_kv_server

pair_table "| value | PUT inline | PUT granted | granted / inline | GET inline | GET location + READ | READ / inline |" put-inline put-granted get-inline get-read
echo "load: $(cat /proc/loadavg) (guest)"
