#!/bin/sh
# hello_test.sh SHOAL_HELLO SOURCE_DIR: the README's tour of the API (apps/hello/hello.cc) prints
# what its code promises on two shards, and the README shows that program as it is.
set -u
hello=${1:?usage: hello_test.sh SHOAL_HELLO SOURCE_DIR}
src=${2:?usage: hello_test.sh SHOAL_HELLO SOURCE_DIR}
fail() { echo "FAIL: $*" >&2; exit 1; }

# Shard 0 adds 1 and shard 1 adds 2 (total 3); the fiber returns 42.
out=$(timeout 60 "$hello" --smp 2 --no-pin 2>&1) || fail "shoal-hello --smp 2 exited with $?: $out"
[ "$out" = "2 shards, total 3, fiber said 42" ] || fail "shoal-hello --smp 2 printed '$out'"
out=$(timeout 60 "$hello" --smp 1 --no-pin 2>&1) || fail "shoal-hello --smp 1 exited with $?: $out"
[ "$out" = "1 shards, total 1, fiber said 42" ] || fail "shoal-hello --smp 1 printed '$out'"

# A bad option is refused with a message and a non-zero status, not ignored.
if out=$(timeout 60 "$hello" --smp 0 2>&1); then
    fail "shoal-hello --smp 0 succeeded: $out"
fi
echo "$out" | grep -q -- "--smp" || fail "shoal-hello --smp 0 did not name the option: $out"

# The README's C++ block that starts the app "hello" is hello.cc without its first (title) line.
readme_block=$(awk '/^```cpp/ {inside = 1; block = ""; next} inside && /^```/ {inside = 0; if (block ~ /app a\("hello"/) printf "%s", block; next} inside {block = block $0 "\n"}' "$src/README.md")
[ -n "$readme_block" ] || fail "README.md has no \`\`\`cpp block with app a(\"hello\", ...)"
program=$(tail -n +2 "$src/apps/hello/hello.cc")
[ "$readme_block" = "$program" ] || {
    echo "$readme_block" >/tmp/hello_readme.$$
    tail -n +2 "$src/apps/hello/hello.cc" | diff /tmp/hello_readme.$$ - >&2
    rm -f /tmp/hello_readme.$$
    fail "README.md's tour differs from apps/hello/hello.cc (diff above: < README, > hello.cc)"
}
echo "hello: output and README block as expected"
