# kv_rdma_lib.sh - sourced by the KV-over-RDMA benchmark scripts (bench/kv_rdma_vs_perftest.sh,
# bench/kv_inline_sweep.sh), which run in one Soft-RoCE guest: shoal-kv with its RDMA front end on
# CPU 1, shoal-kv-bench latency cells (one connection, one request at a time) on CPU 0. Expects
# $build, $out (a scratch directory); reads SHOAL_RDMA_* and KV_BENCH_* from the environment.
dev=${SHOAL_RDMA_DEVICE:-rxe0}
ip=${SHOAL_RDMA_IP:-10.10.0.1}
gid=${SHOAL_RDMA_GID_INDEX:-1}
seconds=${KV_BENCH_SECONDS:-3}
poll=${KV_BENCH_POLL---poll-mode} # KV_BENCH_POLL= : shards sleep when idle
# KV_BENCH_SERVER_POLL= : the server's shard sleeps when idle (a cached GET needs no server CPU;
# a spinning server holds a vCPU the guest kernel's rxe work could use)
server_poll=${KV_BENCH_SERVER_POLL-$poll}
# A command the clients (ib_read_lat's and shoal-kv-bench's latency cells) run under, such as
# "chrt -f 1" (empty: none)
client_prefix=${client_prefix:-}
# KV_BENCH_PIN_PERFTEST=1: ib_read_lat's client on CPU 0 and its server on CPU 1, as shoal's
# (default: where the scheduler puts them, as in the tables of earlier stops)
perf_client_pin= perf_server_pin=
if [ "${KV_BENCH_PIN_PERFTEST:-}" = 1 ]; then
    perf_client_pin="taskset -c 0" perf_server_pin="taskset -c 1"
fi
server=

start_kv_server() { # start_kv_server [BINARY]: shoal-kv, 1 shard on CPU 1, TCP on 11211, RDMA on 11400
    stdbuf -oL "${1:-$build/apps/kv/shoal-kv}" -l "$ip" -p 11211 --rdma-port 11400 -m 64 --smp 1 --cpuset 1 $server_poll \
        >"$out/server.txt" 2>&1 &
    server=$!
    for _ in $(seq 100); do
        grep -q "native RDMA protocol on" "$out/server.txt" 2>/dev/null && break
        sleep 0.1
    done
    sleep 1
}

stop_kv_server() {
    kill -TERM "$server"
    wait "$server"
    server=
}

bench_with() { # bench_with BINARY NAME ARGS...: one latency cell; prints its table rows
    # (sh has no locals: these names are this function's alone)
    bw_bin=$1
    bw_name=$2
    shift 2
    echo "-- $bw_name"
    latency_cell "$bw_bin" "$@" 2>&1 | grep -E '^\| server|rdma\)|error' | tee "$out/cell.txt"
}

latency_cell() { # latency_cell BINARY ARGS...: a shoal-kv-bench run on CPU 0, one connection, one
    # request at a time, for $seconds after half a second of warm-up
    lc_bin=$1
    shift
    $client_prefix "$lc_bin" --host "$ip" --smp 1 --cpuset 0 $poll --connections 1 --pipeline 1 --keys 100 \
        --duration "$seconds" --warmup 0.5 "$@"
}

bench() { # bench NAME ARGS...: a cell of this build's shoal-kv-bench
    bench_with "$build/apps/kv/shoal-kv-bench" "$@"
}

p50() { # the P50 (µs) of the last cell's get or set row
    awk -F'|' '$3 ~ /get|set/ {gsub(/ /, "", $6); print $6; exit}' "$out/cell.txt"
}

read_lat() { # read_lat SIZE: ib_read_lat's result row (#bytes #iter t_min t_max t_typical ...)
    # Both ends bounded in time; the client retries while the server is not listening yet (a
    # loaded guest can take seconds to start it).
    $perf_server_pin timeout 150 ib_read_lat -d "$dev" -x "$gid" -s "$1" -n 5000 >"$out/perf-server.txt" 2>&1 &
    perf=$!
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        sleep 1
        $client_prefix $perf_client_pin timeout 120 ib_read_lat -d "$dev" -x "$gid" -s "$1" -n 5000 "$ip" \
            >"$out/perf-client.txt" 2>&1 &&
            break
    done
    awk '/^ *#bytes/{getline; print}' "$out/perf-client.txt"
    wait "$perf"
}

bare_read() { # bare_read SIZE: the median µs of shoal-bench-rdma's one-sided READ of SIZE bytes
    # (net/rdma alone, no KV: the control that tells the KV layer's share from the READ's)
    "$build/bench/shoal-bench-rdma" --ip "$ip" --poll-mode --latency-only --sizes "" --read-sizes "$1" \
        --iterations 5000 2>/dev/null | awk '/^one-sided READ/ {r = 1} r && $1 + 0 > 0 {print $3; exit}'
}

cell() { # cell ROUND SIZE NAME ARGS...: one RDMA cell, its P50 appended to $out/results.txt
    cell_round=$1 cell_size=$2 cell_name=$3
    shift 3
    bench "$cell_name $cell_size B (round $cell_round)" --transport rdma --port 11400 --value-size "$cell_size" "$@"
    echo "$cell_size $cell_name $(p50)" >>"$out/results.txt"
}

pair_table() { # pair_table "HEADER" A1 B1 A2 B2: pair_row for each of $sizes under a table header
    echo
    echo "== P50 µs, median of the rounds (every round's value in brackets)"
    echo "$1"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for pt_size in $sizes; do
        pair_row "$pt_size" "$2" "$3" "$4" "$5"
    done
}

pair_row() { # pair_row SIZE A1 B1 A2 B2: a table row of results.txt ("size name p50" lines), medians
    # of the rounds (every round's value in brackets): | SIZE | A1 | B1 | B1 / A1 | A2 | B2 | B2 / A2 |
    awk -v s="$1" -v a1="$2" -v b1="$3" -v a2="$4" -v b2="$5" '
        function median(name,   n, i, j, t, v) {
            n = split(vals[name], v, " ")
            if (n == 0) return "n/a"
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
            return v[int((n + 1) / 2)]
        }
        function cellof(name,   m) { m = median(name); return m == "n/a" ? m : m " [" substr(vals[name], 2) "]" }
        function ratio(a, b,   x, y) { x = median(a); y = median(b); return (x == "n/a" || y == "n/a" || y == 0) ? "n/a" : sprintf("%.2f", x / y) }
        $1 == s && $3 != "" { vals[$2] = vals[$2] " " $3 }
        END {
            printf "| %d | %s | %s | %s | %s | %s | %s |\n", s, cellof(a1), cellof(b1), ratio(b1, a1),
                cellof(a2), cellof(b2), ratio(b2, a2)
        }' "$out/results.txt"
}
