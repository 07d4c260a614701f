#!/usr/bin/env bash
# The README's main job: installs what shoal needs, builds it, starts the server and runs its
# benchmark client against it, then stops the server. Uses RDMA when this machine has an RDMA
# device (set SHOAL_RDMA_IP to the device's IPv4 address) and TCP on loopback otherwise.
# Until the KV server lands, the server is shoal-echo. Extra arguments go to the client.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target shoal-echo

bin=build/release/apps/echo/shoal-echo
transport=tcp
host=127.0.0.1
if compgen -G "/sys/class/infiniband/*" >/dev/null && [ -n "${SHOAL_RDMA_IP:-}" ]; then
    transport=rdma
    host=$SHOAL_RDMA_IP
fi
port=${SHOAL_PORT:-17100}
cpus=$(nproc)
server_cpus=0
client_cpus=$((cpus > 1 ? 1 : 0))

echo "main job: shoal-echo over $transport on $host:$port"
log=$(mktemp)
"$bin" server --transport "$transport" --host "$host" --port "$port" --smp 1 --cpuset "$server_cpus" >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true; cat "$log"; rm -f "$log"' EXIT

# Wait (bounded) until the server listens: it prints "... echo on ADDRESS" then.
for _ in $(seq 100); do
    grep -q "echo on" "$log" && break
    kill -0 "$server" 2>/dev/null || { echo "server exited early:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
done

"$bin" bench --transport "$transport" --host "$host" --port "$port" --smp 1 --cpuset "$client_cpus" \
    --sizes 128,4K,32K,256K,1M --concurrency 1,4,16 --duration 2 "$@"
