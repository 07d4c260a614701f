#!/usr/bin/env bash
# rdma-test-wrapper.sh - ctest COMMAND of every test labelled `rdma` (see shoal_add_rdma_test).
#
#   rdma-test-wrapper.sh [--timeout S] [--share DIR]... -- TEST [ARGS...]
#   rdma-test-wrapper.sh --prepare
#
# Runs TEST where an RDMA device exists:
#   - directly, when this process already runs in the Soft-RoCE guest (RDMA_VM=1) or the host has
#     a usable device (SHOAL_RDMA_DEVICE / SHOAL_RDMA_IP / SHOAL_RDMA_GID_INDEX are exported);
#   - otherwise inside the guest through run-in-guest.sh (the --share dirs, e.g. the build and
#     source trees, are shared read-write; the guest gets S - 15 seconds);
#   - otherwise it prints "SKIPPED: <reason>" and exits 77, which ctest reports as skipped.
# TEST's exit status is returned unchanged, so a failing test fails the ctest run.
# --prepare (the shoal_softroce_prepare fixture) installs packages and builds the guest image
# ahead of the tests, outside their timeouts; it exits 77 when no route exists.
# SHOAL_RDMA_MODE=auto|direct|guest|off forces a route (off: always skip).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=softroce-common.sh
. "$here/softroce-common.sh"

timeout_s=300 prepare=0
shares=()
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
        --share) shares+=(--rw "${2:?--share needs a directory}"); shift 2 ;;
        --prepare) prepare=1; shift ;;
        --) shift; break ;;
        *) echo "rdma-test-wrapper: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$prepare" = 1 ] || [ $# -gt 0 ] || { echo "rdma-test-wrapper: usage: [--timeout S] [--share DIR]... -- TEST [ARGS...]" >&2; exit 2; }

softroce_decide_mode || exit 2
case "$SOFTROCE_MODE" in
    direct)
        [ "$prepare" = 0 ] || exit 0
        softroce_check_ip || exit 1
        [ "${RDMA_VM:-}" = 1 ] ||
            echo "softroce: host device ${SHOAL_RDMA_DEVICE} (${SHOAL_RDMA_IP}, GID index ${SHOAL_RDMA_GID_INDEX})" >&2
        exec "$@"
        ;;
    guest)
        [ "$prepare" = 0 ] || exec "$here/run-in-guest.sh" --prepare
        guest_timeout=$((timeout_s > 45 ? timeout_s - 15 : 30))
        exec "$here/run-in-guest.sh" --quiet --timeout "$guest_timeout" "${shares[@]}" -- "$@"
        ;;
    *)
        echo "SKIPPED: $SOFTROCE_REASON"
        exit "$SOFTROCE_SKIP_CODE"
        ;;
esac
