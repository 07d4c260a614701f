#!/usr/bin/env bash
# Clients nobody here wrote drive a running shoal-kv (2 shards, loopback): Debian's libmemcached
# tools (memccapable's ASCII protocol suite, memccp, memccat, memcrm, memcstat, memcflush,
# memctouch) and python3-pymemcache. A missing client package is reported and skipped; if none
# is installed the test is skipped (exit 77).
#
# usage: clients_test.sh SHOAL_KV_BINARY
set -euo pipefail
bin=$1
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" -l 127.0.0.1 -p "$port" --smp 2 -m 64 >"$work/server.log" 2>&1 &
server=$!
cleanup() {
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 600); do
    grep -q "listening on" "$work/server.log" && break
    sleep 0.1
done
grep -q "listening on" "$work/server.log" || { echo "shoal-kv did not start"; cat "$work/server.log"; exit 1; }
servers="--servers=127.0.0.1:$port"
ran=0
fail() { echo "FAIL: $*"; exit 1; }

if command -v memccp >/dev/null; then
    ran=1
    echo "== libmemcached tools"
    timeout 60 memccapable -h 127.0.0.1 -p "$port" -a | tee "$work/capable.txt"
    grep -q "All tests passed" "$work/capable.txt" || fail "memccapable"
    memcflush "$servers" || fail "memcflush"
    head -c 100000 /dev/urandom >"$work/blob.bin"
    printf 'hello from memccp\n' >"$work/greeting.txt"
    memccp "$servers" "$work/blob.bin" "$work/greeting.txt" || fail "memccp"
    # memccat ends what it prints with a newline (with memcached too).
    memccat "$servers" blob.bin | head -c 100000 >"$work/blob.out" || fail "memccat blob.bin"
    cmp "$work/blob.bin" "$work/blob.out" || fail "memccat returned different bytes"
    [ "$(memccat "$servers" greeting.txt)" = "hello from memccp" ] || fail "memccat greeting.txt"
    memctouch "$servers" --expire=1000 greeting.txt || fail "memctouch"
    memcstat "$servers" >"$work/stat.txt" || fail "memcstat"
    grep -Eq "curr_items: 2$" "$work/stat.txt" || { cat "$work/stat.txt"; fail "memcstat curr_items"; }
    memcrm "$servers" blob.bin || fail "memcrm"
    if memccat "$servers" blob.bin >/dev/null 2>&1; then fail "blob.bin still there after memcrm"; fi
    memcflush "$servers" || fail "memcflush"
    if memccat "$servers" greeting.txt >/dev/null 2>&1; then fail "greeting.txt still there after memcflush"; fi
    echo "libmemcached tools: ok"
else
    echo "SKIP libmemcached tools: not installed (apt-get install libmemcached-tools)"
fi

if /usr/bin/python3 -c 'import pymemcache' 2>/dev/null; then
    ran=1
    echo "== python3-pymemcache"
    /usr/bin/python3 - "$port" <<'PY'
import sys
from pymemcache.client.base import Client
c = Client(("127.0.0.1", int(sys.argv[1])), connect_timeout=5, timeout=5, default_noreply=False)
assert c.set("a", b"1", expire=100) is True
assert c.get("a") == b"1"
assert c.add("a", b"2") is False and c.add("b", b"2") is True
assert c.replace("c", b"x") is False and c.replace("b", b"3") is True
assert c.append("b", b"4") and c.prepend("b", b"2") and c.get("b") == b"234"
keys = {f"k{i}": str(i).encode() for i in range(200)}
assert c.set_many(keys) == []
assert c.get_many(list(keys)) == keys, "multi-get across shards"
v, cas = c.gets("a")
assert v == b"1"
assert c.cas("a", b"5", cas) is True
assert c.cas("a", b"6", cas) is False, "a stale cas unique"
assert c.incr("a", 10) == 15 and c.decr("a", 20) == 0
assert c.incr("nope", 1) is None
assert c.touch("a", 100) is True and c.touch("nope", 1) is False
assert c.get("a") == b"0 ", "decr pads in place, as memcached"
assert c.delete("a") is True and c.get("a") is None
assert int(c.stats()[b"curr_items"]) == 201
assert c.version().startswith(b"1.6")
assert c.flush_all() is True and c.get("b") is None
big = bytes(range(256)) * 4000
assert c.set("big", big) and c.get("big") == big
c.close()
print("pymemcache: ok")
PY
else
    echo "SKIP python3-pymemcache: not installed (apt-get install python3-pymemcache)"
fi

[ "$ran" = 1 ] || { echo "no outside client installed"; exit 77; }
