#!/bin/sh
# read_timeline.sh BUILD_DIR - where the time of a one-at-a-time RDMA READ goes in the Soft-RoCE
# guest, for perftest's ib_read_lat, shoal-bench-rdma's bare READ (one shard on CPU 0) and a
# cached shoal-kv GET (client on CPU 0, server on CPU 1), all 128 B / 32 B values, one boot:
#   tests/softroce/run-in-guest.sh --timeout 600 --rw "$PWD/build/release" -- \
#       sh -c "cd $PWD && bench/read_timeline.sh build/release"
# Records CPU 0's tracepoints (write(2) entry/exit, sched_switch, sched_wakeup) with ftrace
# while each runs, then bench/read_timeline.py splits every round trip into the doorbell write
# (the READ itself, run by rxe on this CPU), the detour through ksoftirqd and the user-space
# part (medians in µs), and tells which round trips woke ksoftirqd with or without preempting
# the client, or not at all.
# Tracing slows every segment (the round trips are ~1.3x longer than untraced): compare the
# rows with each other, not with untraced numbers. Needs root (the guest's) for tracefs.
set -u
build=${1:?usage: read_timeline.sh BUILD_DIR}
n=${READ_TIMELINE_ITERATIONS:-5000}
out=$(mktemp -d)
here=$(dirname "$0")
. "$here/kv_rdma_lib.sh"
T=/sys/kernel/tracing
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; echo 0 >"$T/tracing_on" 2>/dev/null; rm -rf "$out"' EXIT
[ -e "$T/trace" ] || mount -t tracefs nodev "$T" || { echo "read_timeline: cannot mount tracefs" >&2; exit 1; }
echo 0 >"$T/tracing_on"
echo nop >"$T/current_tracer"
echo 30000 >"$T/buffer_size_kb"
for e in syscalls/sys_enter_write syscalls/sys_exit_write sched/sched_switch sched/sched_wakeup; do
    echo 1 >"$T/events/$e/enable" || { echo "read_timeline: no tracepoint $e" >&2; exit 1; }
done
traced() { # traced COMM CMD...: runs CMD with CPU 0 traced, then splits COMM's round trips
    tr_comm=$1
    shift
    echo >"$T/trace"
    echo 1 >"$T/tracing_on"
    "$@" >"$out/cmd.txt" 2>&1
    echo 0 >"$T/tracing_on"
    cat "$T/per_cpu/cpu0/trace" >"$out/trace.txt"
    python3 "$here/read_timeline.py" "$out/trace.txt" "$tr_comm"
}
timeout 120 ib_read_lat -d "$dev" -x "$gid" -s 128 -n "$n" >/dev/null 2>&1 &
sleep 1
traced ib_read_lat taskset -c 0 timeout 120 ib_read_lat -d "$dev" -x "$gid" -s 128 -n "$n" "$ip"
wait
traced shoal-bench-rdma timeout 120 "$build/bench/shoal-bench-rdma" --ip "$ip" --poll-mode --smp 1 \
    --server-shard 0 --cpuset 0 --latency-only --sizes "" --read-sizes 128 --iterations "$n"
start_kv_server
traced shoal-kv-bench latency_cell "$build/apps/kv/shoal-kv-bench" --transport rdma --port 11400 \
    --value-size 32 --get-ratio 1
stop_kv_server
