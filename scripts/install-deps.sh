#!/usr/bin/env bash
# Installs every system package shoal needs to build, test and run, from Debian 12's archive.
# Idempotent: packages already present are left alone; run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential g++ cmake ninja-build pkg-config git
  liburing-dev libibverbs-dev librdmacm-dev ibverbs-providers rdma-core ibverbs-utils rdmacm-utils
  libboost-context-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  # the Soft-RoCE test guest (tests/softroce) and the perftest reference numbers
  qemu-system-x86 busybox-static iproute2 kmod cpio xz-utils perftest
  # a standard memcached client for the KV front-end's interoperability checks
  libmemcached-tools
  # the reference server and a Python client for the KV conformance and client tests (tests/kv)
  memcached python3-pymemcache
  # libmemcached itself: kv::client's ketama ring is checked against its choice of server
  libmemcached-dev
  # libFuzzer for the parsers' fuzz targets (scripts/run-fuzzers.sh)
  clang-14
  # the Prometheus endpoint's scrape test: curl fetches /metrics, promtool checks it
  prometheus curl
  # the C ABI's C# test: P/Invoke into libshoal_c, compiled with mcs and run with mono
  mono-mcs mono-runtime
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "install-deps: all packages present"; exit 0; }

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
