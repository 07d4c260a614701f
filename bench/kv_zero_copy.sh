#!/bin/sh
# kv_zero_copy.sh BUILD_DIR - PUT and GET of large values over the native RDMA protocol, copying
# (set / get: the value copied into a pool buffer before the WRITE, out of one after the READ) vs
# zero-copy (set_from / get_into: WRITE from, READ into the caller's registered buffer), measured
# in ONE Soft-RoCE guest boot:
#   tests/softroce/run-in-guest.sh --timeout 1500 -- bench/kv_zero_copy.sh build/release
# For each value size (KV_ZC_SIZES, default 64 KB and 1 MB = 1000000 B: a pool buffer is 1 MiB at
# most, record included) four latency cells (P50, one request at a time, bench/kv_rdma_lib.sh's
# setup, location cache on: a GET is one READ): PUT copy vs zero-copy (granted: the values do not
# fit one message), GET copy vs zero-copy. KV_ZC_ROUNDS (3) rounds; the two cells of a pair back
# to back, which one first alternating by round. Prints every cell, then per size the median of
# the rounds and zero-copy / copy.
set -u
build=${1:?usage: kv_zero_copy.sh BUILD_DIR}
out=$(mktemp -d)
KV_BENCH_SECONDS=${KV_BENCH_SECONDS:-2} # lib.sh reads it
. "$(dirname "$0")/kv_rdma_lib.sh"
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$out"' EXIT
sizes=${KV_ZC_SIZES:-65536 1000000}
echo "load: $(cat /proc/loadavg) (guest)"
start_kv_server

# Not counted: the first cells after the guest boots run slower than the same cells later.
bench "warm-up" --transport rdma --port 11400 --keys 20 --value-size 65536 --get-ratio 0.5 >/dev/null

for round in $(seq "${KV_ZC_ROUNDS:-3}"); do
    for size in $sizes; do
        put_copy="cell $round $size put-copy --get-ratio 0 --keys 20"
        put_zc="cell $round $size put-zc --get-ratio 0 --zero-copy --keys 20"
        get_copy="cell $round $size get-copy --get-ratio 1 --keys 20"
        get_zc="cell $round $size get-zc --get-ratio 1 --zero-copy --keys 20"
        if [ $((round % 2)) = 1 ]; then
            $put_copy
            $put_zc
            $get_copy
            $get_zc
        else
            $put_zc
            $put_copy
            $get_zc
            $get_copy
        fi
    done
done
stop_kv_server

pair_table "| value | PUT copy | PUT zero-copy | zero-copy / copy | GET copy | GET zero-copy | zero-copy / copy |" put-copy put-zc get-copy get-zc
echo "load: $(cat /proc/loadavg) (guest)"
