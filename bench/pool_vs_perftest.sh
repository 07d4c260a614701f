#!/bin/sh
# pool_vs_perftest.sh BUILD_DIR - the remote memory pool's remote_write / remote_read of leased
# slices (shoal-bench-pool) against perftest's ib_write_bw / ib_read_bw, at 4 KiB and 1 MiB, in
# ONE Soft-RoCE guest, alternating ROUNDS times (same boot, same load):
#   tests/softroce/run-in-guest.sh --timeout 900 -- bench/pool_vs_perftest.sh build/release
# Both sides keep DEPTH operations in flight (perftest -t DEPTH; shoal --depth DEPTH, one leased
# slice each). perftest: one QP, server and client processes in this guest; shoal: one process,
# pool server on shard 1, client on shard 0, a peer with CONNECTIONS one-sided connections.
# Units: MiB/s (perftest's "MB/sec" is 2^20 B/s; shoal's MB/s are converted).
# Environment: POOL_BENCH_ROUNDS (3), POOL_BENCH_DEPTH (16), POOL_BENCH_SECONDS (3, shoal per
# cell), POOL_BENCH_CONNECTIONS (2), POOL_BENCH_POLL (empty: shards sleep when idle;
# --poll-mode to spin like perftest's client).
set -u
build=${1:?usage: pool_vs_perftest.sh BUILD_DIR}
dev=${SHOAL_RDMA_DEVICE:-rxe0}
ip=${SHOAL_RDMA_IP:-10.10.0.1}
gid=${SHOAL_RDMA_GID_INDEX:-1}
rounds=${POOL_BENCH_ROUNDS:-3}
depth=${POOL_BENCH_DEPTH:-16}
seconds=${POOL_BENCH_SECONDS:-3}
conns=${POOL_BENCH_CONNECTIONS:-2}
poll=${POOL_BENCH_POLL-}
out=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$out"' EXIT
echo "load: $(cat /proc/loadavg) (guest)"
echo "depth $depth, shoal: $seconds s per cell, $conns one-sided connections, ${poll:-sleeping when idle}"

perf() { # perf ROUND OP TOOL SIZE ITERS: one perftest cell; appends "ROUND OP SIZE MiB/s"
    round=$1 op=$2 tool=$3 size=$4 n=$5
    # Both ends bounded in time; the client retries while the server is not listening yet (a
    # loaded guest can take seconds to start it).
    timeout 150 "$tool" -d "$dev" -x "$gid" -s "$size" -n "$n" -t "$depth" >"$out/perf-server.txt" 2>&1 &
    server=$!
    : >"$out/perf-client.txt"
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        sleep 1
        t0=$(date +%s.%N)
        timeout 120 "$tool" -d "$dev" -x "$gid" -s "$size" -n "$n" -t "$depth" "$ip" >"$out/perf-client.txt" 2>&1 &&
            break
    done
    t1=$(date +%s.%N)
    wait "$server"
    server=
    bw=$(awk '/^ *#bytes/{getline; print $4; exit}' "$out/perf-client.txt")
    [ -n "$bw" ] || { bw=-; cat "$out/perf-client.txt" "$out/perf-server.txt" >&2; }
    # The wall clock of the whole client (setup included) bounds perftest's own figure from
    # below: a check on its cycle counter, which qemu's TCG emulates.
    echo "$round $op $size $bw" >>"$out/perftest.txt"
    echo "  $tool $size B x $n: $bw MiB/s (client wall clock incl. setup: $(echo "$t0 $t1 $size $n" |
        awk '{printf "%.1f", $3 * $4 / ($2 - $1) / 1048576}') MiB/s)"
}

round=1
while [ "$round" -le "$rounds" ]; do
    echo "== round $round: perftest"
    perf "$round" write ib_write_bw 4096 5000
    perf "$round" write ib_write_bw 1048576 100
    perf "$round" read ib_read_bw 4096 5000
    perf "$round" read ib_read_bw 1048576 100
    echo "== round $round: shoal-bench-pool"
    # shellcheck disable=SC2086 # $poll is empty or one flag
    timeout 300 "$build/bench/shoal-bench-pool" --ip "$ip" --sizes 4K,1M --depth "$depth" \
        --connections "$conns" --seconds "$seconds" $poll >"$out/shoal-round.txt" 2>"$out/shoal-err.txt" ||
        cat "$out/shoal-err.txt" >&2
    sed 's/^/  /' "$out/shoal-round.txt"
    awk -v r="$round" '$1 == "pool" && $NF == "MB/s" {printf "%s %s %s %.1f\n", r, $2, $3, $(NF-1) * 1e6 / 1048576}' \
        "$out/shoal-round.txt" >>"$out/shoal.txt"
    round=$((round + 1))
done

echo
echo "| size | op | round | perftest MiB/s | shoal MiB/s | shoal / perftest |"
echo "| --- | --- | --- | ---: | ---: | ---: |"
for size in 4096 1048576; do
    for op in write read; do
        r=1
        while [ "$r" -le "$rounds" ]; do
            p=$(awk -v r="$r" -v o="$op" -v s="$size" '$1 == r && $2 == o && $3 == s {print $4}' "$out/perftest.txt")
            s=$(awk -v r="$r" -v o="$op" -v s="$size" '$1 == r && $2 == o && $3 == s {print $4}' "$out/shoal.txt")
            echo "$size $op $r ${p:--} ${s:--}" | awk '{
                ratio = ($4 != "-" && $5 != "-" && $4 > 0) ? sprintf("%.2f", $5 / $4) : "-"
                printf "| %s | %s | %s | %s | %s | %s |\n", ($1 == 4096 ? "4 KiB" : "1 MiB"), $2, $3, $4, $5, ratio}'
            r=$((r + 1))
        done
    done
done
echo "load: $(cat /proc/loadavg) (guest)"
