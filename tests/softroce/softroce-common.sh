# shellcheck shell=bash disable=SC2034 # variables are used by the sourcing scripts
# Functions shared by the Soft-RoCE test-bed scripts (sourced, not executed).
#
# They answer one question for every script: where can an RDMA test run?
#   direct  - this process already runs in the guest (RDMA_VM=1), or the host has a usable device
#   guest   - no device here, but the Soft-RoCE qemu guest can be started (run-in-guest.sh)
#   skip    - neither; SOFTROCE_REASON says why
# Knobs (environment): SHOAL_RDMA_MODE=auto|direct|guest|off, SHOAL_SOFTROCE_QEMU (qemu binary),
# SHOAL_SOFTROCE_CACHE (image cache), SHOAL_RDMA_DEVICE / SHOAL_RDMA_IP / SHOAL_RDMA_GID_INDEX.

SOFTROCE_SKIP_CODE=77   # ctest SKIP_RETURN_CODE of every rdma test
SOFTROCE_TIMEOUT_CODE=124
SOFTROCE_VM_FAILURE_CODE=125

# Debian packages the guest needs on the host (the guest runs the host's own userspace).
SOFTROCE_PACKAGES=(qemu-system-x86 busybox-static ibverbs-providers libibverbs1 librdmacm1
    iproute2 kmod cpio xz-utils)

softroce_log() { [ -n "${SHOAL_SOFTROCE_QUIET:-}" ] || echo "softroce: $*" >&2; }

# Cache of the guest image and kernel package; also holds the per-run directories.
softroce_cache_dir() {
    if [ -n "${SHOAL_SOFTROCE_CACHE:-}" ]; then
        echo "$SHOAL_SOFTROCE_CACHE"
    elif [ -n "${XDG_CACHE_HOME:-}" ]; then
        echo "$XDG_CACHE_HOME/shoal/softroce"
    elif [ -n "${HOME:-}" ] && [ -d "$HOME" ] && [ -w "$HOME" ]; then
        echo "$HOME/.cache/shoal/softroce"
    else
        echo "/tmp/shoal-softroce-$(id -u)"
    fi
}

softroce_qemu() { echo "${SHOAL_SOFTROCE_QEMU:-qemu-system-x86_64}"; }

# Prints the packages of SOFTROCE_PACKAGES that are not installed (one line, space separated).
softroce_missing_packages() {
    local status p missing=()
    status=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${SOFTROCE_PACKAGES[@]}" 2>/dev/null || true)
    for p in "${SOFTROCE_PACKAGES[@]}"; do
        grep -qE "^$p ii" <<<"$status" || missing+=("$p")
    done
    echo "${missing[*]}"
}

# Prints the command prefix that runs apt-get as root ("" when we are root); fails if impossible.
softroce_root_prefix() {
    command -v apt-get >/dev/null 2>&1 || return 1
    if [ "$(id -u)" = 0 ]; then
        echo ""
    elif command -v sudo >/dev/null 2>&1 && timeout 10 sudo -n true 2>/dev/null; then
        echo "sudo -n"
    else
        return 1
    fi
}

# True when the host has a usable RDMA device. Exports SHOAL_RDMA_DEVICE, SHOAL_RDMA_IP,
# SHOAL_RDMA_GID_INDEX (values already set in the environment win); sets SOFTROCE_REASON otherwise.
softroce_find_host_device() {
    local sys=/sys/class/infiniband dev="" d gid_file idx gid type ip="" gid_index="" net
    if ! compgen -G "$sys/*" >/dev/null; then
        SOFTROCE_REASON="the host has no RDMA device ($sys is empty or missing)"
        return 1
    fi
    if [ -n "${SHOAL_RDMA_DEVICE:-}" ]; then
        [ -d "$sys/$SHOAL_RDMA_DEVICE" ] ||
            { SOFTROCE_REASON="SHOAL_RDMA_DEVICE=$SHOAL_RDMA_DEVICE is not in $sys"; return 1; }
        dev=$SHOAL_RDMA_DEVICE
    else # the first device with an active port 1
        for d in "$sys"/*; do
            grep -q ACTIVE "$d/ports/1/state" 2>/dev/null && { dev=${d##*/}; break; }
        done
        [ -n "$dev" ] || { SOFTROCE_REASON="no RDMA device in $sys has an ACTIVE port 1"; return 1; }
    fi
    # RoCE: an IPv4-mapped GID (::ffff:a.b.c.d) carries both the address and the GID index.
    for gid_file in "$sys/$dev"/ports/1/gids/*; do
        idx=${gid_file##*/}
        read -r gid <"$gid_file" 2>/dev/null || continue # builtin read: ports have many GIDs
        [[ "$gid" == 0000:0000:0000:0000:0000:ffff:* ]] || continue
        read -r type <"$sys/$dev/ports/1/gid_attrs/types/$idx" 2>/dev/null || continue
        [[ "$type" == *v2* ]] || continue
        local hex=${gid:30:4}${gid:35:4}
        ip=$((16#${hex:0:2})).$((16#${hex:2:2})).$((16#${hex:4:2})).$((16#${hex:6:2}))
        gid_index=$idx
        break
    done
    # InfiniBand / iWARP: the IPv4 address of the device's netdev (IPoIB or the NIC itself).
    if [ -z "$ip" ]; then
        for net in "$sys/$dev"/device/net/*; do
            [ -e "$net" ] || continue
            ip=$(ip -4 -o addr show dev "${net##*/}" 2>/dev/null | awk '{sub(/\/.*/, "", $4); print $4; exit}')
            [ -n "$ip" ] && break
        done
        gid_index=0
    fi
    if [ -z "${SHOAL_RDMA_IP:-}" ] && [ -z "$ip" ]; then
        SOFTROCE_REASON="RDMA device $dev has no IPv4 address for rdma_cm (set SHOAL_RDMA_IP)"
        return 1
    fi
    export SHOAL_RDMA_DEVICE=$dev
    export SHOAL_RDMA_IP=${SHOAL_RDMA_IP:-$ip}
    export SHOAL_RDMA_GID_INDEX=${SHOAL_RDMA_GID_INDEX:-$gid_index}
    return 0
}

# True when run-in-guest.sh can run here (possibly after installing packages on its first run).
softroce_guest_possible() {
    local qemu missing cache
    qemu=$(softroce_qemu)
    if [ "$(uname -m)" != x86_64 ]; then
        SOFTROCE_REASON="the Soft-RoCE guest needs an x86_64 host (this is $(uname -m))"
        return 1
    fi
    if ((BASH_VERSINFO[0] < 5)); then
        SOFTROCE_REASON="the Soft-RoCE harness needs bash >= 5"
        return 1
    fi
    if [ -n "${SHOAL_SOFTROCE_QEMU:-}" ] && ! command -v "$qemu" >/dev/null 2>&1; then
        SOFTROCE_REASON="SHOAL_SOFTROCE_QEMU=$qemu is not an executable"
        return 1
    fi
    command -v dpkg-query >/dev/null 2>&1 ||
        { SOFTROCE_REASON="not a Debian-like host (no dpkg-query); the guest image is built from Debian packages"; return 1; }
    missing=$(softroce_missing_packages)
    if [ -n "$missing" ]; then
        softroce_root_prefix >/dev/null || {
            SOFTROCE_REASON="missing packages ($missing) and no root/sudo to install them (run scripts/install-deps.sh)"
            return 1
        }
        return 0 # installed by the first run
    fi
    command -v "$qemu" >/dev/null 2>&1 || { SOFTROCE_REASON="$qemu is not in PATH"; return 1; }
    cache=$(softroce_cache_dir)
    mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ] ||
        { SOFTROCE_REASON="cannot write the guest cache $cache (set SHOAL_SOFTROCE_CACHE)"; return 1; }
    return 0
}

# Sets SOFTROCE_MODE (direct|guest|skip) and, for skip, SOFTROCE_REASON.
softroce_decide_mode() {
    local mode=${SHOAL_RDMA_MODE:-auto} host_reason=""
    SOFTROCE_REASON=""
    case "$mode" in
        off)
            SOFTROCE_MODE=skip SOFTROCE_REASON="RDMA tests disabled (SHOAL_RDMA_MODE=off)"
            return 0 ;;
        auto | direct | guest) ;;
        *) echo "softroce: SHOAL_RDMA_MODE must be auto, direct, guest or off (not '$mode')" >&2; return 2 ;;
    esac
    if [ "${RDMA_VM:-}" = 1 ]; then
        SOFTROCE_MODE=direct
        return 0
    fi
    if [ "$mode" != guest ]; then
        if softroce_find_host_device; then
            SOFTROCE_MODE=direct
            return 0
        fi
        host_reason=$SOFTROCE_REASON
        if [ "$mode" = direct ]; then
            SOFTROCE_MODE=skip SOFTROCE_REASON="SHOAL_RDMA_MODE=direct but $host_reason"
            return 0
        fi
    fi
    if softroce_guest_possible; then
        SOFTROCE_MODE=guest
        return 0
    fi
    SOFTROCE_MODE=skip
    SOFTROCE_REASON="${host_reason:+$host_reason, and }the Soft-RoCE guest cannot run: $SOFTROCE_REASON"
}

# Refuses addresses rdma_cm cannot use with rxe (loopback fails with ENODEV).
softroce_check_ip() {
    case "${SHOAL_RDMA_IP:-}" in
        "") echo "softroce: SHOAL_RDMA_IP is not set" >&2; return 1 ;;
        127.*)
            echo "softroce: SHOAL_RDMA_IP=$SHOAL_RDMA_IP is a loopback address; rdma_cm must target the" \
                "RDMA device's own address (rxe: 127.0.0.1 fails with ENODEV)" >&2
            return 1 ;;
    esac
}
