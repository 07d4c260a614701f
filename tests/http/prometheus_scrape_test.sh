#!/usr/bin/env bash
# A real Prometheus scrape of a running shoal app: starts `shoal-echo server --smp 2
# --prometheus-port 0`, fetches /metrics with curl, checks it with `promtool check metrics`
# (Prometheus' own parser and linter), checks that both shards answered, that bad requests get
# 404/405/400, and that the app still stops cleanly on SIGTERM. Exits 77 (skipped) when curl or
# promtool is missing: install them with `apt-get install curl prometheus`.
set -euo pipefail

echo_bin=${1:?usage: prometheus_scrape_test.sh path/to/shoal-echo}
for tool in curl promtool; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is not installed (Debian: apt-get install curl prometheus)"
    exit 77
  fi
done

work=$(mktemp -d)
pid=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$echo_bin" server --host 127.0.0.1 --port 0 --smp 2 --prometheus-port 0 --prometheus-address 127.0.0.1 \
  >"$work/out" 2>"$work/err" &
pid=$!
url=""
for _ in $(seq 100); do
  url=$(sed -n 's|^Prometheus metrics on \(http://[0-9.:]*/metrics\)$|\1|p' "$work/out")
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "FAIL: shoal-echo exited"; cat "$work/err"; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "FAIL: no endpoint address printed"; cat "$work/out" "$work/err"; exit 1; }
echo "endpoint: $url"

fail=0
curl -sS --max-time 10 -D "$work/headers" -o "$work/metrics" "$url"
grep -qi '^content-type: text/plain; version=0.0.4' "$work/headers" || { echo "FAIL: content type"; fail=1; }
if ! promtool check metrics <"$work/metrics" >"$work/promtool" 2>&1; then
  echo "FAIL: promtool check metrics:"; cat "$work/promtool"; fail=1
fi
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

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" = 0 ] || { echo "FAIL: shoal-echo exited with $rc after SIGTERM"; cat "$work/err"; fail=1; }
[ "$fail" = 0 ] && echo "PASS: $(grep -c '^shoal_' "$work/metrics") series, promtool clean"
exit "$fail"
