#!/usr/bin/env bash
# shoal-kv-cli end to end: set / get / del / stats, misses, flags, values with spaces, an empty
# value, usage errors (status 2), a refused connection and a server error (status 1). It runs
# against shoal-kv and, when Debian's memcached is installed, against memcached too: the tool
# must behave the same with both.
#
# usage: cli_test.sh SHOAL_KV_BINARY SHOAL_KV_CLI_BINARY
set -euo pipefail
server_bin=$1
cli=$2
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill -KILL "$server" 2>/dev/null; rm -rf "$work"' EXIT
fail=0
check() { # check NAME EXPECTED_STATUS EXPECTED_STDOUT CLI_ARGS...
    local name=$1 want_status=$2 want_out=$3 status=0
    shift 3
    "$cli" --port "$port" "$@" >"$work/out" 2>"$work/err" || status=$?
    if [ "$status" != "$want_status" ] || [ "$(cat "$work/out")" != "$want_out" ]; then
        echo "FAIL [$target] $name: status $status (want $want_status), stdout:"
        cat "$work/out"
        echo "stderr:"
        cat "$work/err"
        fail=1
    fi
}
stderr_has() { # stderr_has NAME TEXT: the last check's stderr mentions TEXT
    grep -q "$2" "$work/err" || { echo "FAIL [$target] $1: stderr lacks '$2':"; cat "$work/err"; fail=1; }
}

run_checks() {
    check "set" 0 "STORED" set k1 v1
    check "get" 0 "v1" get k1
    check "set with flags" 0 "STORED" set k2 "two words" --flags 7
    check "get of two keys, a value with a space" 0 $'v1\ntwo words' get k1 k2
    check "get with a miss" 1 "v1" get k1 nothere
    check "empty value" 0 "STORED" set k3 ""
    check "get of the empty value" 0 "" get k3
    check "delete" 0 "DELETED" del k1
    check "get after delete" 1 "" get k1
    check "delete of a missing key" 1 "NOT_FOUND" delete k1
    "$cli" --port "$port" stats >"$work/out" 2>&1 || { echo "FAIL [$target] stats: status $?"; fail=1; }
    grep -q "^STAT curr_items 2" "$work/out" || { echo "FAIL [$target] stats: no 'STAT curr_items 2':"; cat "$work/out"; fail=1; }
    check "a key the protocol refuses (251 bytes)" 1 "" get "$(printf 'k%.0s' $(seq 251))"
    stderr_has "a key the protocol refuses" "CLIENT_ERROR"
    check "no command" 2 ""
    stderr_has "no command" "usage"
    check "set without a value" 2 "" set k1
    check "unknown command" 2 "" frobnicate k1
}

start_shoal_kv() {
    "$server_bin" -l 127.0.0.1 -p 0 --smp 2 -m 64 >"$work/server.log" 2>&1 &
    server=$!
    port=
    for _ in $(seq 600); do
        port=$(sed -n 's/^shoal-kv: listening on 127.0.0.1:\([0-9]*\) .*/\1/p' "$work/server.log")
        [ -n "$port" ] && return 0
        sleep 0.1
    done
    echo "shoal-kv did not start"
    cat "$work/server.log"
    exit 1
}

target=shoal-kv
start_shoal_kv
run_checks
kill -TERM "$server"
wait "$server" || true
server=

# Nobody listens on the port the server had: a clear error, status 1.
target=closed
check "refused connection" 1 "" get k1
stderr_has "refused connection" "connect 127.0.0.1:$port"

if command -v memcached >/dev/null; then
    target=memcached
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    memcached -l 127.0.0.1 -p "$port" -U 0 -u "$(id -un)" -m 16 >"$work/memcached.log" 2>&1 &
    server=$!
    for _ in $(seq 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    run_checks
    kill -TERM "$server"
    wait "$server" 2>/dev/null || true
    server=
else
    echo "memcached not installed (apt-get install memcached): the reference run is skipped"
fi
# A server that announces 99 bytes, sends 2 and hangs up: a clear error, status 1.
target=truncating
python3 - "$work/port" <<'PY' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
__import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
c, _ = s.accept()
c.recv(4096)
c.sendall(b"VALUE k1 0 99\r\nab")
c.close()
PY
server=$!
for _ in $(seq 600); do [ -e "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")
check "a reply cut short" 1 "" get k1
stderr_has "a reply cut short" "the connection ended before the reply"
wait "$server" || true
server=
[ "$fail" = 0 ] && echo "PASS: shoal-kv-cli"
exit "$fail"
