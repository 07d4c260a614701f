#!/usr/bin/env bash
# Builds the C# P/Invoke test with Debian's mono-mcs and runs it with mono against libshoal_c.
# Skips (exit 77), saying so, where mcs or mono is not installed.
#
# usage: csharp_test.sh SOURCE.cs LIBSHOAL_C_DIR   (run through with_kv_servers.sh or
#        with_pool_server.sh, which start the servers the test talks to)
set -euo pipefail
src=$1
libdir=$2
if ! command -v mcs >/dev/null || ! command -v mono >/dev/null; then
    echo "SKIP: mono-mcs / mono-runtime not installed (apt-get install mono-mcs mono-runtime)"
    exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mcs -nologo -warnaserror -out:"$work/test.exe" "$src" "$(dirname "$src")/shoal_native.cs"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 240 mono "$work/test.exe"
