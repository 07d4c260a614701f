# Loopback port helpers for the KV scripts (sourced by apps/kv/compare.sh and tests/kv scripts).
# bash's /dev/tcp, no process started: python takes seconds to start on a busy host.

# Whether something accepts connections on 127.0.0.1:$1.
port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A loopback port nothing listens on, other than $1. Chosen below the kernel's ephemeral range
# (32768 and up by default), so that no client socket of a concurrent test holds it.
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 12000))
        [ "$p" != "${1:-}" ] && ! port_open "$p" && echo "$p" && return
    done
}

# Waits until 127.0.0.1:$1 accepts connections (60 s at most), or until process $2 (when given)
# has exited; says so on stderr when it does not listen.
wait_port() {
    for _ in $(seq 600); do
        port_open "$1" && return 0
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then
            echo "the server for 127.0.0.1:$1 exited before listening" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    return 1
}

# Starts "$@" in the background with every "{port}" in its arguments replaced by a free loopback
# port other than $avoid_port, until it listens: another process may take the port between the
# choice and the server's bind, so a server that exits without listening is started again on
# another port (5 tries). Sets served_port and served_pid; output goes to $served_log (default
# /dev/null). Returns non-zero when no try listened.
serve_on_free_port() {
    local port a
    local -a args
    for _ in 1 2 3 4 5; do
        port=$(free_port "${avoid_port:-}")
        args=()
        for a in "$@"; do
            args+=("${a//\{port\}/$port}")
        done
        "${args[@]}" >>"${served_log:-/dev/null}" 2>&1 &
        served_pid=$!
        if wait_port "$port" "$served_pid"; then
            served_port=$port
            return 0
        fi
        kill "$served_pid" 2>/dev/null || true
        wait "$served_pid" 2>/dev/null || true
    done
    return 1
}
