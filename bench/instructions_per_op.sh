#!/bin/sh
# instructions_per_op.sh BUILD_DIR [OLD_BUILD_DIR] - user-space instructions per operation, counted
# by callgrind (Debian's valgrind) in ONE Soft-RoCE guest:
#   tests/softroce/run-in-guest.sh --timeout 900 --rw "$PWD/BUILD_DIR" -- bench/instructions_per_op.sh BUILD_DIR
# A count of instructions does not depend on the host's load, which moves every timed number of
# this emulated guest by tens of percent: two builds compare exactly, and the paths of one build
# compare without noise. Operations (one at a time, client and server on one shard, so both
# sides of an RPC call or stream round trip are counted):
#   - the marked loops of tests/rpc/rpc_rdma_test (an RPC call against a raw stream round trip of
#     the same 128 bytes, and add(int32, int32)) and tests/kv/kv_rdma_get_cost_test (a cached
#     GET of 32 bytes through its three entry points, and a gat of the same values answered by the
#     server, the control path); see tests/softroce/callgrind_marks.hh;
#   - perftest's ib_read_lat client (128 B), its instructions per READ from two runs of 1,000
#     and 3,000 iterations (the difference, so its setup cancels out).
# The kernel's share (rxe runs each post's protocol in the posting system call) is not counted.
# With OLD_BUILD_DIR, the same test binaries of that build are counted too, side by side.
# Prints instructions and calls per operation. Writes the callgrind files under BUILD_DIR/callgrind
# (callgrind_annotate reads them).
set -u
build=${1:?usage: instructions_per_op.sh BUILD_DIR [OLD_BUILD_DIR]}
old=${2:-}
dev=${SHOAL_RDMA_DEVICE:-rxe0}
ip=${SHOAL_RDMA_IP:-10.10.0.1}
gid=${SHOAL_RDMA_GID_INDEX:-1}
out=$build/callgrind
command -v valgrind >/dev/null || { echo "instructions_per_op.sh: valgrind is not installed (apt install valgrind)" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out"/cg.*

count() { # count TAG BINARY FILTER: callgrind of one test binary's marked loops
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" "$2" --gtest_filter="$3" >"$out/log.$1" 2>&1 ||
        { echo "instructions_per_op.sh: $2 failed under callgrind (log: $out/log.$1)" >&2; tail -20 "$out/log.$1" >&2; }
}
for b in new ${old:+old}; do
    dir=$build
    [ "$b" = old ] && dir=$old
    count "$b-rpc" "$dir/tests/rpc/rpc_rdma_test" 'rpc_rdma_path.a_call_and_a_raw*:rpc_rdma_path.a_call_at_a_time*'
    count "$b-kv" "$dir/tests/kv/kv_rdma_get_cost_test" '*'
done

# ib_read_lat: instructions of a 3,000-READ run minus a 1,000-READ run, over 2,000.
for n in 1000 3000; do
    timeout 300 ib_read_lat -d "$dev" -x "$gid" -s 128 -n "$n" >"$out/perf-server.$n" 2>&1 &
    srv=$!
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        sleep 1
        timeout 300 valgrind --tool=callgrind --callgrind-out-file="$out/cg.perftest.$n" \
            ib_read_lat -d "$dev" -x "$gid" -s 128 -n "$n" "$ip" >"$out/perf-client.$n" 2>&1 && break
    done
    wait "$srv"
done

# Calls per operation too: in the TCG guest a call and its return cost far more than the
# straight-line instructions around them (docs/performance-history.md, "Calls, not instructions").
calls_in() { awk '/^calls=/ {sub(/^calls=/, ""); n += $1} END {print n + 0}' "$1"; }
echo "| operation | build | user instructions per operation | calls per operation |"
echo "| --- | --- | ---: | ---: |"
for f in "$out"/cg.new-* "$out"/cg.old-*; do
    [ -f "$f" ] || continue
    which=new
    case "$f" in *cg.old-*) which=old ;; esac
    # Each marked loop is a dump of its own: "Client Request: NAME/N", its instruction total and
    # the calls made in it.
    awk -v which="$which" -v calls="$(calls_in "$f")" \
        '/^desc: Trigger: Client Request:/ {sub(/^desc: Trigger: Client Request: /, ""); name=$0}
         /^summary:/ && name != "" {n=name; sub(/.*\//, "", n); sub(/\/[0-9]+$/, "", name);
                                    printf "| %s | %s | %.0f | %.1f |\n", name, which, $2 / n, calls / n; name=""}' "$f"
done
a=$(awk '/^summary:/ {print $2}' "$out/cg.perftest.1000" 2>/dev/null)
b=$(awk '/^summary:/ {print $2}' "$out/cg.perftest.3000" 2>/dev/null)
if [ -n "$a" ] && [ -n "$b" ]; then
    ca=$(calls_in "$out/cg.perftest.1000")
    cb=$(calls_in "$out/cg.perftest.3000")
    echo "| ib_read_lat READ 128 B (client) | perftest | $(echo "$a $b" | awk '{printf "%.0f", ($2 - $1) / 2000}') |" \
        "$(echo "$ca $cb" | awk '{printf "%.1f", ($2 - $1) / 2000}') |"
else
    echo "| ib_read_lat READ 128 B (client) | perftest | (failed: $out/perf-client.*) | |"
fi
