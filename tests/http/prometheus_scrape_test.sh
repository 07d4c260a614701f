#!/usr/bin/env bash
# A real Prometheus scrape of running shoal apps, each started with `--smp 2 --prometheus-port 0`:
# /metrics is fetched with curl and checked with `promtool check metrics` (Prometheus' own parser
# and linter), every shoal_* family it has must be in the table of docs/operations.md, and each
# app must stop cleanly on SIGTERM afterwards.
# - shoal-echo: both shards answer; bad requests get 404/405/400; a counter moves between scrapes.
# - shoal-kv: after a set and a get, the KV counters show exactly them.
# - shoal-rpc-bench server: after a 0.1 s benchmark, the RPC call counter has moved.
# Exits 77 (skipped) when curl or promtool is missing: `apt-get install curl prometheus`.
set -euo pipefail

usage="usage: prometheus_scrape_test.sh path/to/shoal-echo path/to/shoal-kv path/to/shoal-rpc-bench"
echo_bin=${1:?$usage}
kv_bin=${2:?$usage}
rpc_bin=${3:?$usage}
for tool in curl promtool; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is not installed (Debian: apt-get install curl prometheus)"
    exit 77
  fi
done

docs=$(cd "$(dirname "$0")/../.." && pwd)/docs/operations.md
work=$(mktemp -d)
pid=""
fail=0
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT

# start_app LABEL PORT_SED CMD...: starts CMD in the background ($pid) and waits until it printed
# its metrics endpoint ($url) and, when PORT_SED is not empty, the port its sed script extracts
# from the output ($app_port).
start_app() {
  local label=$1 port_sed=$2
  shift 2
  "$@" >"$work/out" 2>"$work/err" &
  pid=$!
  url="" app_port=""
  for _ in $(seq 100); do
    url=$(sed -n 's|^Prometheus metrics on \(http://[0-9.:]*/metrics\)$|\1|p' "$work/out")
    if [ -n "$port_sed" ]; then app_port=$(sed -n "$port_sed" "$work/out"); fi
    if [ -n "$url" ] && { [ -z "$port_sed" ] || [ -n "$app_port" ]; }; then
      echo "$label: $url"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "FAIL: $label exited"; cat "$work/err"; exit 1; }
    sleep 0.1
  done
  echo "FAIL: $label printed no addresses"; cat "$work/out"; exit 1
}

# scrape LABEL: fetches $url into $work/metrics and runs promtool on it.
scrape() {
  curl -sS --max-time 10 -D "$work/headers" -o "$work/metrics" "$url"
  grep -qi '^content-type: text/plain; version=0.0.4' "$work/headers" || { echo "FAIL: $1: content type"; fail=1; }
  if ! promtool check metrics <"$work/metrics" >"$work/promtool" 2>&1; then
    echo "FAIL: $1: promtool check metrics:"; cat "$work/promtool"; fail=1
  fi
  # docs/operations.md keeps a table of every metric: each family scraped must be in it.
  local name
  for name in $(sed -n 's/^# TYPE \(shoal_[a-z0-9_]*\) .*/\1/p' "$work/metrics"); do
    grep -q "^| \`$name\` |" "$docs" || { echo "FAIL: $1: $name is not in docs/operations.md"; fail=1; }
  done
}

# stop_app LABEL: SIGTERM; the app must exit with 0.
stop_app() {
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  pid=""
  [ "$rc" = 0 ] || { echo "FAIL: $1 exited with $rc after SIGTERM"; cat "$work/err"; fail=1; }
}

# The sum over the shards of the series of metric $1 in the last scrape.
sum() { awk -v m="$1" '$1 ~ "^"m"[{]" { s += $2 } END { print s + 0 }' "$work/metrics"; }

# --- shoal-echo
start_app shoal-echo "" "$echo_bin" server --host 127.0.0.1 --port 0 --smp 2 --prometheus-port 0 \
  --prometheus-address 127.0.0.1
scrape shoal-echo
for series in 'shoal_reactor_loops_total{shard="0"}' 'shoal_reactor_loops_total{shard="1"}' \
  'shoal_tcp_accepted_total{shard="0"}' 'shoal_io_uring_enters_total{shard="1"}'; do
  grep -qF "$series " "$work/metrics" || { echo "FAIL: no $series"; fail=1; }
done
grep -q '^# HELP shoal_reactor_tasks_total ' "$work/metrics" || { echo "FAIL: no HELP line"; fail=1; }
# Counters move: the scrape itself ran tasks on shard 0.
before=$(sed -n 's/^shoal_reactor_tasks_total{shard="0"} //p' "$work/metrics")
after=$(curl -sS --max-time 10 "$url" | sed -n 's/^shoal_reactor_tasks_total{shard="0"} //p')
[ "$after" -gt "$before" ] || { echo "FAIL: tasks counter did not grow ($before -> $after)"; fail=1; }
code() { curl -s --max-time 10 -o /dev/null -w '%{http_code}' "$@"; }
[ "$(code "${url%/metrics}/nothing")" = 404 ] || { echo "FAIL: unknown path is not 404"; fail=1; }
[ "$(code -X POST --data x "$url")" = 405 ] || { echo "FAIL: POST is not 405"; fail=1; }
[ "$(code -H 'Content-Length: 2' -X GET --data-raw xy "$url")" = 400 ] || { echo "FAIL: GET with body is not 400"; fail=1; }
[ "$(code "$url")" = 200 ] || { echo "FAIL: scrape after bad requests"; fail=1; }
echo_series=$(grep -c '^shoal_' "$work/metrics")
stop_app shoal-echo

# --- shoal-kv: one set and one get over the memcached protocol.
start_app shoal-kv 's|^shoal-kv: listening on 127.0.0.1:\([0-9]*\) .*|\1|p' \
  "$kv_bin" -p 0 -l 127.0.0.1 --smp 2 --prometheus-port 0 --prometheus-address 127.0.0.1
exec 3<>"/dev/tcp/127.0.0.1/$app_port"
printf 'set k 0 0 1\r\nx\r\nget k\r\nquit\r\n' >&3
timeout 10 cat <&3 >"$work/kv-reply" || true
exec 3<&-
grep -q '^VALUE k 0 1' "$work/kv-reply" || { echo "FAIL: shoal-kv did not answer the get"; fail=1; }
scrape shoal-kv
for m in shoal_kv_cmd_get_total shoal_kv_cmd_set_total shoal_kv_get_hits_total shoal_kv_items \
  shoal_kv_connections_total; do
  [ "$(sum "$m")" = 1 ] || { echo "FAIL: $m is $(sum "$m"), not 1"; fail=1; }
done
kv_series=$(grep -c '^shoal_' "$work/metrics")
stop_app shoal-kv

# --- shoal-rpc-bench server: a 0.1 s benchmark against it.
start_app shoal-rpc-bench 's|^shoal-rpc-bench: tcp server on 127.0.0.1:\([0-9]*\) .*|\1|p' \
  "$rpc_bin" server --host 127.0.0.1 --port 0 --smp 2 --prometheus-port 0 --prometheus-address 127.0.0.1
timeout 30 "$rpc_bin" bench --host 127.0.0.1 --port "$app_port" --smp 1 --sizes 128 --concurrency 1 \
  --duration 0.1 --warmup 0 --json >/dev/null 2>"$work/bench-err" || { echo "FAIL: rpc bench"; cat "$work/bench-err"; fail=1; }
scrape shoal-rpc-bench
[ "$(sum shoal_rpc_server_calls_total)" -gt 0 ] || { echo "FAIL: shoal_rpc_server_calls_total did not move"; fail=1; }
[ "$(sum shoal_rpc_server_connections_total)" -gt 0 ] || { echo "FAIL: no RPC connection counted"; fail=1; }
rpc_series=$(grep -c '^shoal_' "$work/metrics")
stop_app shoal-rpc-bench

[ "$fail" = 0 ] && echo "PASS: promtool clean; series: shoal-echo $echo_series, shoal-kv $kv_series, shoal-rpc-bench $rpc_series"
exit "$fail"
