#!/usr/bin/env bash
# The C# ring test (on an RDMA device: the Soft-RoCE guest, which runs the host's root file
# system and so the host's mono): starts a shoal C++ ring consumer (capi_rdma_peer), builds
# csharp_ring_test.cs with mono-mcs and runs it with mono against the consumer's descriptor; both
# must succeed, and the consumer must report every record intact. Skips (exit 77), saying so,
# where mcs or mono is not installed.
#
# usage: csharp_ring_test.sh CAPI_RDMA_PEER SOURCE.cs LIBSHOAL_C_DIR [COUNT]
set -euo pipefail
peer=$1
src=$2
libdir=$3
count=${4:-3000}
ip=${SHOAL_RDMA_IP:?SHOAL_RDMA_IP is not set (run through rdma-test-wrapper.sh)}
if ! command -v mcs >/dev/null || ! command -v mono >/dev/null; then
    echo "SKIP: mono-mcs / mono-runtime not installed (apt-get install mono-mcs mono-runtime)"
    exit 77
fi
work=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mcs -nologo -warnaserror -out:"$work/test.exe" "$src" "$(dirname "$src")/shoal_native.cs"
"$peer" ring-consumer "$ip:0" "$count" >"$work/consumer.log" 2>&1 &
pid=$!
# Up to 120 s to start (an ASan process takes seconds in the guest, and every round of this
# loop starts processes there); the loop ends as soon as it is up.
deadline=$((SECONDS + 120))
while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$pid" 2>/dev/null; do
    grep -q "^ring " "$work/consumer.log" && break
    sleep 0.1
done
# (no process substitution: the guest has no /dev/fd)
line=$(grep "^ring " "$work/consumer.log" || true)
[ -n "$line" ] || { echo "the consumer did not start"; cat "$work/consumer.log"; exit 1; }
read -r _ address descriptor <<<"$line"
status=0
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 240 mono "$work/test.exe" "$address" "$descriptor" "$count" || status=$?
consumer=0
wait "$pid" || consumer=$?
pid=
cat "$work/consumer.log"
[ "$status" = 0 ] || { echo "FAIL: the C# producer exited with $status"; exit 1; }
[ "$consumer" = 0 ] || { echo "FAIL: the C++ consumer exited with $consumer"; exit 1; }
grep -q "^received $count records .*all intact" "$work/consumer.log" || { echo "FAIL: the consumer did not get $count intact records"; exit 1; }
echo "ok: $count records from C# checked by the C++ consumer"
