#!/usr/bin/env bash
# Installs the already-built tree into a temporary prefix (`cmake --install`, no rebuild), then
# configures and builds tests/install/consumer against it twice, once with
# find_package(shoal CONFIG) and once with pkg-config, and runs both consumers.
set -euo pipefail

build=${1:?usage: install_test.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for h in core/app.hh core/metrics.hh net/stream.hh net/rdma/rdma.hh rpc/client.hh kv/store/store.hh; do
  [ -f "$prefix/include/shoal/$h" ] || { echo "FAIL: include/shoal/$h not installed"; exit 1; }
done
[ -x "$prefix/bin/shoal-echo" ] || { echo "FAIL: bin/shoal-echo not installed"; exit 1; }

# CMake package. The consumer is configured only with the prefix: the shoal source tree is not
# on any include path, so every header must come from the installed copy.
cmake -S "$here/consumer" -B "$work/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake-build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
if grep -q -- "-I$(cd "$here/../.." && pwd)" "$work/cmake-build/build.ninja"; then
  echo "FAIL: the consumer build points into the source tree"; exit 1
fi
"$work/cmake-build/shoal-consumer" --smp 2 | tee "$work/run1.log"
grep -qx "consumer ok" "$work/run1.log"

# pkg-config.
PKG_CONFIG_PATH="$(dirname "$(find "$prefix" -name shoal.pc)")"
export PKG_CONFIG_PATH
# shellcheck disable=SC2046 # word splitting of the flags is intended
"${CXX:-c++}" -O1 -o "$work/pc-consumer" "$here/consumer/main.cc" $(pkg-config --cflags --libs shoal)
"$work/pc-consumer" --smp 2 | tee "$work/run2.log"
grep -qx "consumer ok" "$work/run2.log"
echo "PASS: find_package and pkg-config consumers built against $prefix and ran"
