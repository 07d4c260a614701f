#!/usr/bin/env bash
# The README's main job: installs what shoal needs, builds it (release), starts shoal-kv (the
# memcached-compatible server), loads it with shoal-kv-bench over TCP on loopback, prints the
# table and stops the server. About a minute on a 2-core machine. Extra arguments go to the
# benchmark client (e.g. --value-size 1K --pipeline 8 --json).
#
# RDMA: with an RDMA device and SHOAL_RDMA_IP (the device's address) set, shoal-kv also serves
# its native RDMA protocol (--rdma-port) on that address and the same cells run again over it
# (`shoal-kv-bench --transport rdma`). SHOAL_MAIN_RDMA_ECHO=1 adds shoal-echo's RDMA stream
# benchmark.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target shoal-kv shoal-kv-bench shoal-echo

bin=build/release/apps/kv
port=${SHOAL_PORT:-17100}
cpus=$(nproc)
server_cpus=0
client_cpus=$((cpus > 1 ? 1 : 0))

echo "main job: shoal-kv over tcp on ${SHOAL_RDMA_IP:-127.0.0.1}:$port (server on CPU $server_cpus, client on CPU $client_cpus)"
log=$(mktemp)
rdma=0
if compgen -G "/sys/class/infiniband/*" >/dev/null && [ -n "${SHOAL_RDMA_IP:-}" ]; then
    rdma=1
fi
listen=127.0.0.1
rdma_args=()
if [ $rdma = 1 ]; then
    listen=$SHOAL_RDMA_IP
    rdma_args=(--rdma-port $((port + 2)))
    echo "main job: also the native RDMA protocol on $SHOAL_RDMA_IP:$((port + 2))"
fi
"$bin/shoal-kv" -l "$listen" -p "$port" "${rdma_args[@]}" -m 256 --smp 1 --cpuset "$server_cpus" >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true; cat "$log"; rm -f "$log"' EXIT

# Wait (bounded) until the server listens: it prints "shoal-kv: listening on ADDRESS" then.
for _ in $(seq 100); do
    grep -q "listening on" "$log" && break
    kill -0 "$server" 2>/dev/null || { echo "server exited early:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
done
grep -q "listening on" "$log" || { echo "server did not start in 10 s" >&2; exit 1; }

bench=("$bin/shoal-kv-bench" --host "$listen" --port "$port" --pid "$server" --smp 1 --cpuset "$client_cpus")
for cell in "--value-size 32 --connections 16" "--value-size 1K --connections 16 --pipeline 8" \
            "--value-size 32 --connections 16 --multiget 16"; do
    echo
    # shellcheck disable=SC2086
    "${bench[@]}" --keys 10000 --get-ratio 0.9 --duration 3 $cell "$@"
done

if [ $rdma = 1 ]; then
    # The same store over shoal-kv's native RDMA protocol: GETs read values with one-sided READs
    # (directly when the client holds the key's location), large SETs are written by the client.
    grep -q "native RDMA protocol on" "$log" || { echo "the RDMA front end did not start:" >&2; cat "$log" >&2; exit 1; }
    rdma_bench=("$bin/shoal-kv-bench" --transport rdma --host "$SHOAL_RDMA_IP" --port $((port + 2)) --pid "$server"
                --smp 1 --cpuset "$client_cpus")
    for cell in "--value-size 32 --connections 16" "--value-size 64K --connections 4"; do
        echo
        echo "over RDMA:"
        # shellcheck disable=SC2086
        "${rdma_bench[@]}" --keys 10000 --get-ratio 0.9 --duration 3 $cell "$@"
    done
fi

if [ "${SHOAL_MAIN_RDMA_ECHO:-0}" = 1 ] && [ $rdma = 1 ]; then
    echo
    echo "RDMA stream benchmark (shoal-echo)"
    echo_bin=build/release/apps/echo/shoal-echo
    "$echo_bin" server --transport rdma --host "$SHOAL_RDMA_IP" --port $((port + 1)) --smp 1 --cpuset "$server_cpus" &
    echo_server=$!
    sleep 1
    "$echo_bin" bench --transport rdma --host "$SHOAL_RDMA_IP" --port $((port + 1)) --smp 1 --cpuset "$client_cpus" \
        --sizes 128,4K,32K --concurrency 1,16 --duration 1 || true
    kill -TERM "$echo_server" 2>/dev/null || true
    wait "$echo_server" 2>/dev/null || true
fi
