#!/usr/bin/env bash
# ABI hygiene of libshoal_c: its SONAME carries the major version, and the only symbols it
# exports are the C API's shoal_* functions, versioned SHOAL_C_0 (no C++ symbol leaks out).
#
# usage: abi_test.sh LIBSHOAL_C HEADER
set -euo pipefail
lib=$1
header=$2
fail() { echo "FAIL: $*"; exit 1; }
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ "$soname" =~ ^libshoal_c\.so\.[0-9]+$ ]] || fail "SONAME is '$soname'"
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^SHOAL_C_0$' || true)
[ -n "$exported" ] || fail "no exported symbols"
bad=$(grep -v '^shoal_[a-z_0-9]*@@SHOAL_C_0$' <<<"$exported" || true)
[ -z "$bad" ] || fail "symbols outside the C API are exported: $(head -5 <<<"$bad")"
# Every function the header declares is exported, and nothing else.
declared=$(grep -v '^#define' "$header" | grep -o 'SHOAL_C_API [^(]*(' | sed 's/.*[ *]\(shoal_[a-z_0-9]*\)($/\1/' | sort)
defined=$(sed 's/@@.*//' <<<"$exported" | sort)
[ "$declared" = "$defined" ] || fail "header and library differ: $(diff <(echo "$declared") <(echo "$defined") | head)"
echo "exports $(wc -l <<<"$defined") shoal_* symbols, SONAME $soname: ok"
