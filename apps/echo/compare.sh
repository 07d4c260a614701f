#!/usr/bin/env bash
# Measures shoal-echo against the epoll baseline in one run, with the same client:
# both servers on the same CPU(s), the client on the others, every cell run against both
# servers back to back (and --repeat times, interleaved). Prints the tables and the side-by-side
# comparison (or JSON with --json), then each server's CPU time.
#
#   apps/echo/compare.sh BUILD_DIR [--server-cpus 0] [--client-cpus 1] [--shoal-args "..."]
#                        [bench options...]
#   apps/echo/compare.sh build/release --sizes 128,4K,32K,256K,1M --concurrency 1,4,16,64 \
#       --duration 2 --repeat 3
set -euo pipefail

build=${1:?usage: compare.sh BUILD_DIR [--server-cpus LIST] [--client-cpus LIST] [bench options]}
shift
server_cpus=0
client_cpus=1
shoal_args=""
bench_args=()
while (($#)); do
    case $1 in
    --server-cpus) server_cpus=$2; shift 2 ;;
    --client-cpus) client_cpus=$2; shift 2 ;;
    --shoal-args) shoal_args=$2; shift 2 ;;
    *) bench_args+=("$1"); shift ;;
    esac
done
echo_bin=$build/apps/echo/shoal-echo
epoll_bin=$build/apps/echo/shoal-echo-epoll
shoal_port=${SHOAL_PORT:-7100}
epoll_port=${EPOLL_PORT:-7101}
nserver=$(tr ',' '\n' <<<"$server_cpus" | wc -l)
nclient=$(tr ',' '\n' <<<"$client_cpus" | wc -l)

# shellcheck disable=SC2086 # word splitting of --shoal-args is wanted
"$echo_bin" server --port "$shoal_port" --smp "$nserver" --cpuset "$server_cpus" $shoal_args >/tmp/compare-shoal.$$ 2>&1 &
shoal_pid=$!
"$epoll_bin" --port "$epoll_port" --threads "$nserver" --cpuset "$server_cpus" >/tmp/compare-epoll.$$ 2>&1 &
epoll_pid=$!
cleanup() {
    kill -INT "$shoal_pid" "$epoll_pid" 2>/dev/null || true
    wait "$shoal_pid" "$epoll_pid" 2>/dev/null || true
    rm -f /tmp/compare-shoal.$$ /tmp/compare-epoll.$$
}
trap cleanup EXIT
for _ in $(seq 50); do
    grep -q "echo on" /tmp/compare-shoal.$$ 2>/dev/null && grep -q "echo on" /tmp/compare-epoll.$$ 2>/dev/null && break
    sleep 0.1
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
s0=$(cpu_ticks "$shoal_pid")
e0=$(cpu_ticks "$epoll_pid")
"$echo_bin" bench --smp "$nclient" --cpuset "$client_cpus" \
    --targets "shoal=127.0.0.1:$shoal_port@$shoal_pid,epoll=127.0.0.1:$epoll_port@$epoll_pid" "${bench_args[@]}"
s1=$(cpu_ticks "$shoal_pid")
e1=$(cpu_ticks "$epoll_pid")
hz=$(getconf CLK_TCK)
echo
echo "server CPU time during the run: shoal $(((s1 - s0) * 1000 / hz)) ms, epoll $(((e1 - e0) * 1000 / hz)) ms"
echo "(an idle shoal shard polls for --idle-poll-us, 200 by default, before it sleeps: that time counts too)"
