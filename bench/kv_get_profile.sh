#!/bin/sh
# kv_get_profile.sh BUILD_DIR - where CPU 0's time goes under a cached GET against ib_read_lat, in
# ONE Soft-RoCE guest (docs/performance-history.md, "Two guesses about the GET's cold path"):
#   tests/softroce/run-in-guest.sh --timeout 600 -- bench/kv_get_profile.sh build/release
# Samples CPU 0 with Debian's perf (cpu-clock, KV_PROFILE_HZ, 20,000 by default) for
# KV_PROFILE_SECONDS (3) while shoal-kv-bench GETs a 32-byte value by its cached location into a
# registered buffer (get_into, the server's shard on CPU 1, asleep when idle), then while
# ib_read_lat READs 128 bytes (its server on CPU 1). Prints, per client, the shares of the
# samples by object (kernel, libc, librxe, the client) and the top symbols. Sampling slows the
# clients (the GET more than ib_read_lat): compare shares within a client, not latencies.
set -u
build=${1:?usage: kv_get_profile.sh BUILD_DIR}
command -v perf >/dev/null || { echo "kv_get_profile.sh: perf is not installed (apt install linux-perf)" >&2; exit 2; }
out=$(mktemp -d)
. "$(dirname "$0")/kv_rdma_lib.sh"
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$out"' EXIT
hz=${KV_PROFILE_HZ:-20000}
span=${KV_PROFILE_SECONDS:-3}
server_poll=${KV_BENCH_SERVER_POLL-}

sample() { # sample NAME: perf on CPU 0 for $span seconds into $out/NAME.data
    perf record -e cpu-clock -F "$hz" -C 0 -o "$out/$1.data" -- sleep "$span" >"$out/$1.record" 2>&1 ||
        { echo "kv_get_profile.sh: perf record failed:" >&2; cat "$out/$1.record" >&2; exit 1; }
}

report() { # report NAME: shares by object, then the top 25 symbols
    echo "== $1: share of CPU 0's samples by object"
    perf report -i "$out/$1.data" --sort dso --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -10
    echo "== $1: top symbols"
    perf report -i "$out/$1.data" --sort comm,dso,sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' |
        head -25 | cut -c1-140
}

start_kv_server
seconds=$((span + 3)) # the cell outlasts the sampling, which starts after its warm-up
bench "rdma GET 32 B, cached location, into a registered buffer (sampled)" --transport rdma --port 11400 \
    --value-size 32 --get-ratio 1 --zero-copy &
cell_pid=$!
sleep 2
sample get
wait "$cell_pid"
stop_kv_server

taskset -c 1 timeout 120 ib_read_lat -d "$dev" -x "$gid" -s 128 -n 300000 >"$out/perf-server.txt" 2>&1 &
perf_server=$!
sleep 1
taskset -c 0 timeout 120 ib_read_lat -d "$dev" -x "$gid" -s 128 -n 300000 "$ip" >"$out/perf-client.txt" 2>&1 &
perf_client=$!
sleep 3
sample ib_read_lat
wait "$perf_client" "$perf_server"
echo "-- ib_read_lat 128 B (sampled): #bytes #iter t_min t_max t_typical t_avg ..."
awk '/^ *#bytes/{getline; print}' "$out/perf-client.txt"

report get
report ib_read_lat
