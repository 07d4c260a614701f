#!/usr/bin/env bash
# run-rdma-tests.sh - run every ctest test labelled `rdma` of a build tree, in one guest boot.
#
#   tests/softroce/run-rdma-tests.sh BUILD_DIR [CTEST_ARGS...]
#
# - host with an RDMA device (or already in the guest): ctest -L rdma runs directly;
# - no device, but the Soft-RoCE guest can run: the whole ctest -L rdma runs inside ONE guest
#   (the wrapper of each test sees RDMA_VM=1 and runs it directly), so N tests cost one boot;
# - neither: prints "skipped: <reason>" and exits 77.
# Exit status: ctest's (non-zero when any rdma test fails), 124 guest timeout, 125 guest failure.
# SHOAL_SOFTROCE_TIMEOUT bounds the guest run (default 3600 s: the sanitizer pass alone took
# 10-11 min on an idle CI host); CTEST_ARGS are passed to ctest.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=softroce-common.sh
. "$here/softroce-common.sh"

[ $# -ge 1 ] || { echo "usage: run-rdma-tests.sh BUILD_DIR [CTEST_ARGS...]" >&2; exit 2; }
build=$(realpath -e -- "$1" 2>/dev/null) && [ -f "$build/CTestTestfile.cmake" ] ||
    { echo "run-rdma-tests: $1 is not a configured build directory (no CTestTestfile.cmake)" >&2; exit 2; }
shift
source_dir=$(cd "$here/../.." && pwd -P)
ctest_cmd=(ctest --test-dir "$build" -L '^rdma$' --output-on-failure --no-tests=error "$@")

softroce_decide_mode || exit 2
case "$SOFTROCE_MODE" in
    direct)
        exec "${ctest_cmd[@]}"
        ;;
    guest)
        "$here/run-in-guest.sh" --prepare
        echo "run-rdma-tests: running ctest -L rdma in the Soft-RoCE guest" >&2
        exec "$here/run-in-guest.sh" --timeout "${SHOAL_SOFTROCE_TIMEOUT:-3600}" \
            --rw "$build" --rw "$source_dir" -- "${ctest_cmd[@]}"
        ;;
    *)
        echo "skipped: $SOFTROCE_REASON"
        exit "$SOFTROCE_SKIP_CODE"
        ;;
esac
