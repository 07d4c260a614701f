#!/usr/bin/env bash
# harness_test.sh - ctest test of the Soft-RoCE harness itself (label softroce).
#
#   tests/softroce/harness_test.sh [BUILD_DIR]
#
# Proves that a failing RDMA test can never pass: exit statuses propagate through the wrapper
# (directly and in the guest) and through run-in-guest.sh; "no route" is a skip (77), not a pass;
# a timeout kills the guest (124) and prints its console. Boots the guest twice: once for the
# command (~5 s), once killed by a 1 s timeout. Exits 77 if the guest cannot run here (after the
# checks that need no guest).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
source_dir=$(cd "$here/../.." && pwd -P)
wrapper=$here/rdma-test-wrapper.sh
guest=$here/run-in-guest.sh
work=$(mktemp -d "$PWD/harness_test.XXXXXX")
trap 'rm -rf "$work"' EXIT

failures=0
check() { # check DESCRIPTION EXPECTED_STATUS CMD... (stdout/stderr kept in $work/out, $work/err)
    local what=$1 want=$2 got=0
    shift 2
    "$@" >"$work/out" 2>"$work/err" || got=$?
    if [ "$got" = "$want" ]; then
        echo "ok: $what (exit $got)"
    else
        echo "FAIL: $what: exit $got, expected $want"
        sed 's/^/  stdout: /' "$work/out"
        sed 's/^/  stderr: /' "$work/err"
        failures=$((failures + 1))
    fi
}
expect_text() { # expect_text FILE REGEX DESCRIPTION
    if grep -qE -- "$2" "$1"; then
        echo "ok: $3"
    else
        echo "FAIL: $3: no /$2/ in the output:"
        sed 's/^/  /' "$1"
        failures=$((failures + 1))
    fi
}

# --- no guest needed -------------------------------------------------------------------------
direct=(env RDMA_VM=1 SHOAL_RDMA_DEVICE=rxe0 SHOAL_RDMA_IP=10.10.0.1 SHOAL_RDMA_GID_INDEX=1)
check "direct mode returns a passing test's status" 0 "${direct[@]}" "$wrapper" -- true
check "direct mode returns a failing test's status" 3 "${direct[@]}" "$wrapper" -- sh -c 'exit 3'
check "a loopback SHOAL_RDMA_IP is refused" 1 env RDMA_VM=1 SHOAL_RDMA_IP=127.0.0.1 "$wrapper" -- true
expect_text "$work/err" "loopback" "the refusal explains the loopback trap"
check "no route: the wrapper skips (77)" 77 \
    env -u RDMA_VM SHOAL_RDMA_MODE=guest SHOAL_SOFTROCE_QEMU=/nonexistent/qemu-system-x86_64 "$wrapper" -- true
expect_text "$work/out" "^SKIPPED: .*nonexistent" "the skip gives its reason"
check "SHOAL_RDMA_MODE=off skips (77)" 77 env -u RDMA_VM SHOAL_RDMA_MODE=off "$wrapper" -- true
if [ -n "${1:-}" ] && [ -f "$1/CTestTestfile.cmake" ]; then
    check "run-rdma-tests.sh skips with 77 when there is no route" 77 \
        env -u RDMA_VM SHOAL_RDMA_MODE=off "$here/run-rdma-tests.sh" "$1"
    expect_text "$work/out" "^skipped: " "run-rdma-tests.sh says why it skipped"
fi

# --- in the guest ----------------------------------------------------------------------------
reason=""
if [ "${RDMA_VM:-}" = 1 ]; then
    reason="already inside the guest"
elif ! "$guest" --check 2>"$work/err"; then
    reason=$(cat "$work/err")
fi
if [ -n "$reason" ]; then
    [ "$failures" = 0 ] || exit 1
    echo "SKIPPED (guest checks): $reason"
    exit 77
fi
"$guest" --prepare

# One boot: environment, device, read-write share, both streams, and a failing test's status
# through the wrapper (direct mode inside the guest) and run-in-guest.sh.
# shellcheck disable=SC2016 # expanded in the guest
guest_script='
    [ "$RDMA_VM" = 1 ] && [ "$SHOAL_RDMA_DEVICE" = rxe0 ] && [ "$SHOAL_RDMA_IP" = 10.10.0.1 ] &&
        [ "$SHOAL_RDMA_GID_INDEX" = 1 ] || { echo "bad environment: $(env | grep RDMA)" >&2; exit 4; }
    [ -e /sys/class/infiniband/rxe0 ] || { echo "no rxe0" >&2; exit 5; }
    [ "$(nproc)" = 2 ] || { echo "guest has $(nproc) vCPUs, want 2" >&2; exit 6; }
    echo written-in-guest >"$1/share-check" || exit 7
    echo stdout-marker
    echo stderr-marker >&2
    exec "$2" -- sh -c "exit 3"'
check "a failing command's status (3) comes back from the guest" 3 \
    "$guest" --timeout 120 --rw "$source_dir" -- bash -c "$guest_script" guest "$work" "$wrapper"
expect_text "$work/out" "^stdout-marker$" "the guest's stdout is streamed"
expect_text "$work/err" "^stderr-marker$" "the guest's stderr is streamed"
expect_text "$work/err" "^softroce: boot [0-9]+\.[0-9] s, command [0-9]+\.[0-9] s" "boot and command times are reported"
expect_text "$work/share-check" "^written-in-guest$" "the guest writes into the shared directory"
if grep -q "retrying the boot" "$work/err"; then
    echo "FAIL: a boot that came up was retried"
    failures=$((failures + 1))
fi

# A timeout during boot: 124, the console is printed, no qemu survives.
name=softroce-harness-test-$$
check "a timeout kills the guest (124)" 124 "$guest" --name "$name" --timeout 1 -- true
expect_text "$work/err" "guest console" "the guest console is printed when the guest fails before the command"
sleep 0.5
if pgrep -f -- "-name $name" >/dev/null; then
    echo "FAIL: a qemu process named $name survived the timeout"
    failures=$((failures + 1))
else
    echo "ok: no qemu survives the timeout"
fi

# A boot that makes no progress (here: a 1 s boot limit no boot meets) is retried once, saying
# so, then reported as a guest failure (125); no qemu survives.
check "a boot without progress is retried once, then fails (125)" 125 \
    env SHOAL_SOFTROCE_BOOT_TIMEOUT=1 "$guest" --name "$name-stall" --timeout 120 -- true
expect_text "$work/err" "made no progress in 1 s of boot.*retrying the boot once" "the retry is announced"
expect_text "$work/err" "the retried boot made no progress either" "the second stall is reported"
sleep 0.5
if pgrep -f -- "-name $name-stall" >/dev/null; then
    echo "FAIL: a qemu process named $name-stall survived the boot watchdog"
    failures=$((failures + 1))
else
    echo "ok: no qemu survives the boot watchdog"
fi

[ "$failures" = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all harness checks passed"
