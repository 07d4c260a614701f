#!/usr/bin/env bash
# Builds the Debian packages of the already-built tree with `cpack -G DEB`, checks that every
# dependency of the `shoal` package is a Debian package known to apt (when apt has package lists),
# extracts it into a scratch root with `dpkg -x` and runs `shoal-echo --help` from there, then
# installs both packages for real with `dpkg --root` into a second scratch root whose package
# database is a copy of the host's (so dpkg checks the Depends against what the host has
# installed), runs `shoal-echo --help` from it and removes them again.
# Exits 77 (skipped) without dpkg-deb or dpkg-shlibdeps (Debian: dpkg-dev).
set -euo pipefail

build=${1:?usage: deb_test.sh BUILD_DIR}
for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool is not installed (Debian: dpkg-dev)"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
deb=$(find "$work/out" -maxdepth 1 -name 'shoal_*.deb' | head -1)
dev=$(find "$work/out" -maxdepth 1 -name 'libshoal-dev_*.deb' | head -1)
if [ -z "$deb" ] || [ -z "$dev" ]; then
  echo "FAIL: packages missing"; ls "$work/out"; exit 1
fi
depends=$(dpkg-deb -f "$deb" Depends)
echo "shoal depends: $depends"
for lib in libc6 liburing2 libibverbs1 librdmacm1 libfmt9 libboost-context1.74.0; do
  grep -q "\b$lib\b" <<<"$depends" || { echo "FAIL: $lib missing from Depends"; exit 1; }
done
if [ -n "$(apt-cache pkgnames 2>/dev/null | head -1)" ]; then
  for p in $(tr ',|' '\n' <<<"$depends" | sed 's/(.*//; s/ //g' | sort -u); do
    apt-cache show "$p" >/dev/null 2>&1 || { echo "FAIL: dependency $p is not a Debian package"; exit 1; }
  done
fi
root=$work/root
dpkg -x "$deb" "$root"
dpkg -x "$dev" "$root"
[ -f "$root/usr/include/shoal/core/app.hh" ] || { echo "FAIL: libshoal-dev has no headers"; exit 1; }
"$root/usr/bin/shoal-echo" --help >"$work/help.txt"
grep -q -- "--prometheus-port" "$work/help.txt" || { echo "FAIL: unexpected --help"; cat "$work/help.txt"; exit 1; }
# A real installation: dpkg unpacks, configures and records the packages in the scratch root's
# database, checking their dependencies against the host's installed packages (copied status).
inst=$work/installed
mkdir -p "$inst/var/lib/dpkg/info" "$inst/var/lib/dpkg/updates"
cp /var/lib/dpkg/status "$inst/var/lib/dpkg/status"
# The scratch root has no shell: maintainer scripts (shoal's ldconfig) run outside it, with
# DPKG_ROOT set, which they honour.
force=(--force-script-chrootless)
[ "$(id -u)" = 0 ] || force+=(--force-not-root)
dpkg_root() { dpkg --root="$inst" "${force[@]}" "$@" 2> >(grep -v "files list file for package" >&2); }
dpkg_root -i "$deb" "$dev" >"$work/dpkg.log" || { cat "$work/dpkg.log"; echo "FAIL: dpkg -i"; exit 1; }
for p in shoal libshoal-dev; do
  dpkg_root -s "$p" >"$work/status.txt"
  grep -q "^Status: install ok installed" "$work/status.txt" || { echo "FAIL: $p not installed"; exit 1; }
done
"$inst/usr/bin/shoal-echo" --help >"$work/help2.txt"
grep -q -- "--prometheus-port" "$work/help2.txt" || { echo "FAIL: installed shoal-echo"; exit 1; }
dpkg_root -r libshoal-dev shoal >>"$work/dpkg.log" || { cat "$work/dpkg.log"; echo "FAIL: dpkg -r"; exit 1; }
[ ! -e "$inst/usr/bin/shoal-echo" ] && [ ! -e "$inst/usr/include/shoal/core/app.hh" ] ||
  { echo "FAIL: dpkg -r left files behind"; exit 1; }
echo "PASS: $(basename "$deb") and $(basename "$dev"); shoal-echo --help runs from the dpkg -x root and from a dpkg --root installation, which dpkg -r removes"
