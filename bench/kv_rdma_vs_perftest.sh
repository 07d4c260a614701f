#!/bin/sh
# kv_rdma_vs_perftest.sh BUILD_DIR - shoal-kv over its native RDMA protocol, the same workloads over
# its TCP front end, and perftest's ib_read_lat, back to back in ONE Soft-RoCE guest so that the
# numbers are comparable (same boot, same load):
#   tests/softroce/run-in-guest.sh --timeout 900 -- bench/kv_rdma_vs_perftest.sh build/release
# One server shard on CPU 1, one client shard on CPU 0, both --poll-mode (KV_BENCH_POLL=
# to let them sleep when idle); one connection, one
# request at a time (latency). ib_read_lat reports whole READ round trips (t_typical = median),
# as shoal-kv-bench does. Cells: GET by a cached location (one READ, no server CPU) vs
# ib_read_lat of the same size as the record READ, as a new string (get_one) and into the
# caller's registered buffer (get_into, --zero-copy: what ib_read_lat does); GET by a control
# round trip (value inline);
# GET of 4 KB by a control round trip + READ; PUT 32 B (inline) and 64 KB (grant + WRITE + commit).
# The bare one-sided READ of shoal-bench-rdma (net/rdma without the KV layer) runs after
# ib_read_lat as a control: GET / READ is the KV layer's share, READ / ib_read_lat the rest.
# KV_BENCH_OLD=PATH (another build's shoal-kv-bench, its shoal-kv next to it): before/after
# instead — per round (KV_BENCH_ROUNDS, 3), ib_read_lat 128 B and 4 KB, then the cached GET cells
# of the old and of this build, each against its own build's server, alternating (which goes
# first alternates by round); the ratios to ib_read_lat of the same round (KV_BENCH_ZERO_COPY=1:
# those cells GET into a registered buffer, get_into, instead of get_one). KV_BENCH_TIME=1:
# this build's cached cells with --time-gets (after the rounds when comparing, and
# KV_BENCH_TIMED_OLD=PATH, a bench that has --time-gets, timed too). KV_BENCH_FIFO=1: at the
# end, ib_read_lat 128 B and the cached get_into of 32 B again with both clients under
# SCHED_FIFO 1 (chrt), where ksoftirqd (a normal task) cannot preempt them: no detours.
# KV_BENCH_PAIRS=N: only the aim's cells, bracketed — ib_read_lat, the cached GET (get_into and
# get_one), ib_read_lat, ... N rounds per value size (32 B against 128 B, 4 KB against 4 KB), each
# GET divided by the mean of the ib_read_lat runs around it; prints the median ratios.
# KV_BENCH_PIN_PERFTEST=1 (any mode): ib_read_lat's ends pinned as shoal's are, its client on CPU 0
# and its server on CPU 1 (by default the scheduler places them).
set -u
build=${1:?usage: kv_rdma_vs_perftest.sh BUILD_DIR}
out=$(mktemp -d)
. "$(dirname "$0")/kv_rdma_lib.sh"
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$out"' EXIT
echo "load: $(cat /proc/loadavg) (guest)"
ratio() { echo "$1 $2" | awk '{printf "%.2f", $1 / $2}'; }
timing=
[ "${KV_BENCH_TIME:-}" = 1 ] && timing=--time-gets

if [ -n "${KV_BENCH_OLD:-}" ]; then
    old_dir=$(dirname "$KV_BENCH_OLD")
    echo "round | ib_read_lat 128 B | old 32 B | new 32 B | ib_read_lat 4 KB | old 4 KB | new 4 KB |" \
        "old/ib 32 B | new/ib 32 B | old/ib 4 KB | new/ib 4 KB" >"$out/rounds.txt"
    cached_cells() { # cached_cells WHICH BENCH SERVER [ARGS]: the two cached GET cells of one build
        cc_which=$1 cc_bench=$2
        start_kv_server "$3"
        shift 3
        [ "${KV_BENCH_ZERO_COPY:-}" = 1 ] && set -- "$@" --zero-copy
        bench_with "$cc_bench" "$cc_which: rdma GET 32 B, cached location" --transport rdma --port 11400 \
            --value-size 32 --get-ratio 1 "$@"
        eval "${cc_which}_small=$(p50)"
        bench_with "$cc_bench" "$cc_which: rdma GET 4 KB, cached location" --transport rdma --port 11400 \
            --value-size 4096 --get-ratio 1 "$@"
        eval "${cc_which}_large=$(p50)"
        stop_kv_server
    }
    for round in $(seq "${KV_BENCH_ROUNDS:-3}"); do
        echo "== round $round"
        ib128=$(read_lat 128 | awk '{print $5}')
        ib4k=$(read_lat 4096 | awk '{print $5}')
        echo "ib_read_lat t_typical: 128 B $ib128, 4 KB $ib4k"
        order="old new"
        [ $((round % 2)) = 0 ] && order="new old"
        for which in $order; do
            # Each bench against its own build's server (the record format may differ).
            if [ "$which" = old ]; then
                cached_cells old "$KV_BENCH_OLD" "$old_dir/shoal-kv"
            else
                cached_cells new "$build/apps/kv/shoal-kv-bench" "$build/apps/kv/shoal-kv"
            fi
        done
        # shellcheck disable=SC2154 # set by the eval above
        echo "$round | $ib128 | $old_small | $new_small | $ib4k | $old_large | $new_large |" \
            "$(ratio "$old_small" "$ib128") | $(ratio "$new_small" "$ib128") |" \
            "$(ratio "$old_large" "$ib4k") | $(ratio "$new_large" "$ib4k")" >>"$out/rounds.txt"
    done
    if [ -n "$timing" ]; then
        echo "== this build's cached GETs timed (--time-gets), after the rounds"
        cached_cells timed "$build/apps/kv/shoal-kv-bench" "$build/apps/kv/shoal-kv" --time-gets
        if [ -n "${KV_BENCH_TIMED_OLD:-}" ]; then # another build that has --time-gets
            cached_cells timed_old "$KV_BENCH_TIMED_OLD" "$(dirname "$KV_BENCH_TIMED_OLD")/shoal-kv" --time-gets
        fi
    fi
    echo
    echo "== cached GET P50 (µs) / ib_read_lat t_typical, per round (32 B value = 120 B record vs 128 B)"
    cat "$out/rounds.txt"
    echo "load: $(cat /proc/loadavg) (guest)"
    exit 0
fi

if [ -n "${KV_BENCH_PAIRS:-}" ]; then
    # Bracketed rounds, for a host whose speed drifts from one minute to the next. Per value size
    # (32 B against ib_read_lat 128 B, 4 KB against 4 KB): ib_read_lat, the cached GET into a
    # registered buffer (get_into) and as a new string (get_one), ib_read_lat again, and so on;
    # each GET is divided by the mean of the two ib_read_lat runs around it, and the median of
    # those ratios is the result. The shoal-kv server sleeps when idle (as ib_read_lat's server
    # does) and runs only during its GET cells, so nothing of shoal's spins while ib_read_lat runs.
    server_poll=${KV_BENCH_SERVER_POLL-}
    median() { sort -n | awk '{r[NR] = $1} END {if (NR % 2) print r[(NR + 1) / 2]; else printf "%.2f\n", (r[NR / 2] + r[NR / 2 + 1]) / 2}'; }
    for pair in "32 128" "4096 4096"; do
        # shellcheck disable=SC2086 # two words: value size, READ size
        set -- $pair
        value=$1 readsz=$2
        ib_prev=$(read_lat "$readsz" | awk '{print $5}')
        : >"$out/pairs.txt"
        for round in $(seq "$KV_BENCH_PAIRS"); do
            start_kv_server
            bench "round $round: rdma GET $value B, cached location, into a registered buffer" --transport rdma \
                --port 11400 --value-size "$value" --get-ratio 1 --zero-copy
            into=$(p50)
            bench "round $round: rdma GET $value B, cached location" --transport rdma --port 11400 \
                --value-size "$value" --get-ratio 1
            one=$(p50)
            stop_kv_server
            ib_next=$(read_lat "$readsz" | awk '{print $5}')
            echo "$round $ib_prev $into $one $ib_next" |
                awk '{m = ($2 + $5) / 2; printf "%s | %s | %s | %s | %s | %.2f | %.2f\n", $1, $2, $3, $4, $5, $3 / m, $4 / m}' \
                    >>"$out/pairs.txt"
            ib_prev=$ib_next
        done
        echo
        echo "== GET $value B P50 / mean ib_read_lat $readsz B t_typical before and after it (µs)"
        echo "round | ib_read_lat before | get_into | get_one | ib_read_lat after | get_into ratio | get_one ratio"
        cat "$out/pairs.txt"
        echo "median ratio over $KV_BENCH_PAIRS rounds, $value B: get_into" \
            "$(awk -F'|' '{print $6 + 0}' "$out/pairs.txt" | median), get_one $(awk -F'|' '{print $7 + 0}' "$out/pairs.txt" | median)"
    done
    echo "load: $(cat /proc/loadavg) (guest)"
    exit 0
fi

echo "== ib_read_lat (server and client in this guest)"
echo "#bytes #iter t_min t_max t_typical t_avg t_stdev p99 p99.9 (usec, whole READ round trip)"
for size in 128 4096; do
    read_lat "$size" | tee -a "$out/perftest.txt"
done
typical() { awk -v s="$1" '$1 == s {print $5}' "$out/perftest.txt"; }
echo "== shoal-bench-rdma one-sided READ, median µs (the same READ without the KV layer)"
read128=$(bare_read 128)
read4k=$(bare_read 4096)
echo "128 B $read128, 4 KB $read4k"

start_kv_server
echo
echo "== shoal-kv-bench (latency, one request at a time)"
echo "| target | op | count | QPS | P50 µs | P90 µs | P99 µs | P99.9 µs | hit % | server CPU µs/op |"
bench "rdma GET 32 B, cached location" --transport rdma --port 11400 --value-size 32 --get-ratio 1 $timing
small=$(p50)
bench "rdma GET 4 KB, cached location" --transport rdma --port 11400 --value-size 4096 --get-ratio 1 $timing
large=$(p50)
bench "rdma GET 32 B, cached location, into a registered buffer" --transport rdma --port 11400 --value-size 32 \
    --get-ratio 1 --zero-copy $timing
small_into=$(p50)
bench "rdma GET 4 KB, cached location, into a registered buffer" --transport rdma --port 11400 --value-size 4096 \
    --get-ratio 1 --zero-copy $timing
large_into=$(p50)
bench "rdma GET 32 B, control round trip (inline)" --transport rdma --port 11400 --value-size 32 --get-ratio 1 \
    --no-location-cache
bench "rdma GET 4 KB, control round trip + READ" --transport rdma --port 11400 --value-size 4096 --get-ratio 1 \
    --no-location-cache --inline-get-max 0
bench "rdma PUT 32 B (inline)" --transport rdma --port 11400 --value-size 32 --get-ratio 0
bench "rdma PUT 64 KB (grant + WRITE + commit)" --transport rdma --port 11400 --value-size 65536 --get-ratio 0
bench "tcp GET 32 B" --port 11211 --value-size 32 --get-ratio 1
bench "tcp GET 4 KB" --port 11211 --value-size 4096 --get-ratio 1
bench "tcp PUT 32 B" --port 11211 --value-size 32 --get-ratio 0
bench "tcp PUT 64 KB" --port 11211 --value-size 65536 --get-ratio 0
stop_kv_server
fifo=
if [ "${KV_BENCH_FIFO:-}" = 1 ]; then
    echo
    echo "== both clients under SCHED_FIFO 1 (no ksoftirqd detours)"
    client_prefix="chrt -f 1"
    fifo_ib=$(read_lat 128 | awk '{print $5}')
    start_kv_server
    bench "rdma GET 32 B, cached location, into a registered buffer, SCHED_FIFO" --transport rdma --port 11400 \
        --value-size 32 --get-ratio 1 --zero-copy
    fifo_into=$(p50)
    stop_kv_server
    client_prefix=
    fifo="under SCHED_FIFO: get_into 32 B $fifo_into / ib_read_lat 128 B $fifo_ib = $(ratio "$fifo_into" "$fifo_ib")"
fi
echo
echo "cached GET P50 / ib_read_lat t_typical: 32 B value (120 B record) vs 128 B: $small / $(typical 128) =" \
    "$(ratio "$small" "$(typical 128)"); 4 KB value vs 4096 B: $large / $(typical 4096)" \
    "= $(ratio "$large" "$(typical 4096)")"
echo "the same, into a registered buffer (get_into): 32 B $small_into / $(typical 128) =" \
    "$(ratio "$small_into" "$(typical 128)"); 4 KB $large_into / $(typical 4096) = $(ratio "$large_into" "$(typical 4096)")"
if [ -n "$fifo" ]; then
    echo "$fifo"
fi
echo "bare READ / ib_read_lat: 128 B $(ratio "$read128" "$(typical 128)"), 4 KB $(ratio "$read4k" "$(typical 4096)");" \
    "cached GET / bare READ: 32 B vs 128 B $(ratio "$small" "$read128"), 4 KB $(ratio "$large" "$read4k")"
echo "load: $(cat /proc/loadavg) (guest)"
