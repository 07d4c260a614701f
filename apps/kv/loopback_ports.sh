# Loopback port helpers for the KV scripts (sourced by apps/kv/compare.sh and tests/kv scripts).
# bash's /dev/tcp, no process started: python takes seconds to start on a busy host.

# Whether something accepts connections on 127.0.0.1:$1.
port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A loopback port nothing listens on, other than $1.
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        [ "$p" != "${1:-}" ] && ! port_open "$p" && echo "$p" && return
    done
}

# Waits until 127.0.0.1:$1 accepts connections (60 s at most); says so on stderr when not.
wait_port() {
    for _ in $(seq 600); do
        port_open "$1" && return 0
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    return 1
}
