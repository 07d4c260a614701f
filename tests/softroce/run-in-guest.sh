#!/usr/bin/env bash
# run-in-guest.sh - run one command inside a throw-away qemu guest that has Soft-RoCE (rdma_rxe).
#
#   tests/softroce/run-in-guest.sh [options] -- CMD [ARGS...]
#
# The guest boots Debian's 6.1 kernel from a cached image, mounts the host's root read-only over
# 9p and chroots into it, so host-built binaries and the host's libraries (libibverbs and its rxe
# provider, librdmacm, liburing, libstdc++) run unchanged. The current directory and each --rw DIR
# are shared read-write at their host paths (a build tree must be in one of them if the command
# writes into it). CMD starts in the current directory with the host's environment plus
#   RDMA_VM=1 SHOAL_RDMA_DEVICE=rxe0 SHOAL_RDMA_NETDEV=dummy0 SHOAL_RDMA_IP=<--ip>
#   SHOAL_RDMA_GID_INDEX=1 (RoCEv2, ::ffff:<ip>)
# rdma_cm must bind/connect to SHOAL_RDMA_IP: 127.0.0.1 fails with ENODEV on rxe.
# CMD's stdout and stderr are streamed and its exit status is returned. One timing line goes to
# stderr, e.g. "softroce: boot 3.4 s, command 0.3 s, total 4.0 s". Exit codes of the harness
# itself: 124 timeout (the guest is killed and its console printed), 125 VM or setup failure
# (the guest console is printed), 77 (--check only) the guest cannot run on this host.
#
# Options:
#   --timeout S   wall-clock limit of the run, boot included (default 600)
#   --rw DIR      also share DIR read-write (repeatable); the cwd is always shared unless it is /
#   --ip ADDR     IPv4 address of dummy0/rxe0, /24 (default 10.10.0.1)
#   --mtu N       MTU of dummy0 (default 1500, rxe active MTU 1024; 9000 gives 4096)
#   --smp N       guest vCPUs (default 2; busy-polling code starves with 1)
#   --mem MB      guest memory (default 2048)
#   --name NAME   qemu process name (default shoal-softroce), to find it in ps
#   --console     print the guest console at the end even when all went well
#   --prepare     install missing packages and build the cached image, then exit
#   --rebuild     rebuild the cached image (from the cached kernel package) before running
#   --check       exit 0 if the guest can run on this host, else print why and exit 77
#   -q, --quiet   no progress messages (the timing line stays)
# Environment: SHOAL_SOFTROCE_CACHE (cache dir, default ~/.cache/shoal/softroce),
#   SHOAL_SOFTROCE_QEMU (qemu binary), SHOAL_SOFTROCE_ACCEL (tcg|kvm; default kvm when /dev/kvm
#   works), SHOAL_SOFTROCE_CPU (TCG CPU model, default max,la57=off), SHOAL_SOFTROCE_KERNEL_DEB
#   (linux-image .deb to build the image from), SHOAL_SOFTROCE_KEEP=1 (keep the run directory),
#   SHOAL_SOFTROCE_APPEND / SHOAL_SOFTROCE_QEMU_ARGS (extra kernel command line / qemu arguments),
#   SHOAL_SOFTROCE_BOOT_TIMEOUT (seconds, default 60: a boot that has not started the command by
#   then made no progress; it is killed and retried once, saying so).
# The first run installs missing Debian packages (root or passwordless sudo), downloads the
# kernel package and builds the image (~20-30 s); later runs need no network.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=softroce-common.sh
. "$here/softroce-common.sh"

# Modules loaded by the guest (their dependencies are added). crc32_generic is a soft
# dependency of rdma_rxe (ICRC) that modules.dep does not record.
GUEST_MODULES=(virtio_pci virtio_console 9pnet_virtio 9p crc32_generic ib_uverbs rdma_rxe rdma_ucm dummy)
IMAGE_FORMAT=1 # bump when build_image changes what it produces

die() {
    echo "softroce: $*" >&2
    exit "$SOFTROCE_VM_FAILURE_CODE"
}
usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

timeout_s=600 ip=10.10.0.1 mtu=1500 smp=2 mem=2048 name=shoal-softroce
show_console=0 action=run rebuild=0
rw_dirs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
        --rw) rw_dirs+=("${2:?--rw needs a directory}"); shift 2 ;;
        --ip) ip=${2:?}; shift 2 ;;
        --mtu) mtu=${2:?}; shift 2 ;;
        --smp) smp=${2:?}; shift 2 ;;
        --mem) mem=${2:?}; shift 2 ;;
        --name) name=${2:?}; shift 2 ;;
        --console) show_console=1; shift ;;
        --prepare) action=prepare; shift ;;
        --rebuild) rebuild=1; shift ;;
        --check) action=check; shift ;;
        -q | --quiet) export SHOAL_SOFTROCE_QUIET=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        -*) echo "softroce: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
[[ "$timeout_s" =~ ^[0-9]+$ ]] && [ "$timeout_s" -gt 0 ] || { echo "softroce: bad --timeout $timeout_s" >&2; exit 2; }
valid_ip() {
    local IFS=. octets o
    read -ra octets <<<"$1"
    [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || return 1
    for o in "${octets[@]}"; do ((10#$o <= 255)) || return 1; done
    [[ "$1" != 127.* ]]
}
valid_ip "$ip" || { echo "softroce: --ip must be a non-loopback IPv4 address (rdma_cm on rxe fails on 127.x)" >&2; exit 2; }
for n in "$mtu" "$smp" "$mem"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "softroce: --mtu, --smp and --mem take positive numbers (got $n)" >&2; exit 2; }
done
[ "$action" != run ] || [ $# -gt 0 ] || { echo "softroce: usage: run-in-guest.sh [options] -- CMD [ARGS...]" >&2; exit 2; }
[ "$smp" -ge 2 ] || softroce_log "warning: --smp $smp: busy-polling RDMA code needs 2 vCPUs in the guest"

if [ "$action" = check ]; then
    if softroce_guest_possible; then exit 0; fi
    echo "softroce: the guest cannot run here: $SOFTROCE_REASON" >&2
    exit "$SOFTROCE_SKIP_CODE"
fi
softroce_guest_possible || die "the guest cannot run here: $SOFTROCE_REASON"

cache=$(softroce_cache_dir)
mkdir -p "$cache/debs" "$cache/images" "$cache/runs"

# ------------------------------------------------------------------ first run: packages, kernel
install_missing_packages() {
    local missing prefix
    missing=$(softroce_missing_packages)
    [ -n "$missing" ] || return 0
    prefix=$(softroce_root_prefix) || die "missing packages ($missing): run scripts/install-deps.sh as root"
    softroce_log "installing $missing (first run)"
    # shellcheck disable=SC2086 # $prefix and $missing are word lists
    timeout 900 $prefix env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        $missing >&2 || {
        timeout 300 $prefix apt-get update -q >&2 &&
            timeout 900 $prefix env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                --no-install-recommends $missing >&2
    } || die "apt-get install $missing failed"
}

# Prints the newest cached linux-image .deb, downloading Debian's current one when none is cached.
kernel_package() {
    if [ -n "${SHOAL_SOFTROCE_KERNEL_DEB:-}" ]; then
        [ -f "$SHOAL_SOFTROCE_KERNEL_DEB" ] || die "SHOAL_SOFTROCE_KERNEL_DEB=$SHOAL_SOFTROCE_KERNEL_DEB: no such file"
        echo "$SHOAL_SOFTROCE_KERNEL_DEB"
        return
    fi
    local deb pkg prefix tmp apt_opts=()
    deb=$(find "$cache/debs" -maxdepth 1 -name 'linux-image-*.deb' -printf '%T@ %p\n' | sort -rn | head -1 | cut -d' ' -f2-)
    if [ -n "$deb" ]; then
        echo "$deb"
        return
    fi
    # linux-image-amd64 is the metapackage; its dependency is the current versioned kernel.
    resolve() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'; }
    pkg=$(resolve)
    if [ -z "$pkg" ] && prefix=$(softroce_root_prefix); then
        # shellcheck disable=SC2086
        timeout 300 $prefix apt-get update -q >&2 || true
        pkg=$(resolve)
    fi
    [ -n "$pkg" ] || die "cannot resolve Debian's linux-image-amd64 (apt lists missing?); set SHOAL_SOFTROCE_KERNEL_DEB"
    softroce_log "downloading $pkg (first run, ~70 MB)"
    tmp=$(mktemp -d "$cache/debs/download.XXXXXX")
    [ "$(id -u)" != 0 ] || apt_opts=(-o APT::Sandbox::User=root)
    (cd "$tmp" && timeout 600 apt-get download -q "${apt_opts[@]}" "$pkg" >&2) ||
        { rm -rf "$tmp"; die "apt-get download $pkg failed"; }
    mv "$tmp"/linux-image-*.deb "$cache/debs/"
    rm -rf "$tmp"
    find "$cache/debs" -maxdepth 1 -name 'linux-image-*.deb' -printf '%T@ %p\n' | sort -rn | head -1 | cut -d' ' -f2-
}

image_key() { # changes whenever the image would be built differently
    {
        echo "format $IMAGE_FORMAT"
        basename "$1"
        printf '%s\n' "${GUEST_MODULES[@]}"
        cat "$here/guest/init-stage1.sh"
    } | sha256sum | cut -c1-16
}

# Writes the uncompressed vmlinux of bzImage $1 to $2. Booting the ELF through its PVH entry
# skips the kernel's self-decompression, which takes seconds under TCG. The boot-protocol header
# gives the payload's place: setup_sects at 0x1f1, payload_offset/length at 0x248 (protocol 2.08+).
extract_vmlinux() {
    local bz=$1 out=$2 setup_sects offset length start
    setup_sects=$(od -An -tu1 -j $((0x1f1)) -N1 "$bz" | tr -d ' ')
    read -r offset length < <(od -An -tu4 -j $((0x248)) -N8 "$bz")
    start=$(((setup_sects + 1) * 512 + offset))
    if [ "$(od -An -tx1 -j "$start" -N6 "$bz" | tr -d ' ')" = fd377a585a00 ]; then # xz magic
        # (xz stops at the end of the stream: the SIGPIPE of tail is expected, the ELF check decides)
        { tail -c +$((start + 1)) "$bz" | head -c "$length" | xz -dc --single-stream >"$out"; } 2>/dev/null || true
        [ "$(head -c4 "$out" | od -An -tx1 | tr -d ' ')" != 7f454c46 ] || return 0
    fi
    softroce_log "kernel payload is not xz, booting the compressed bzImage (slower)"
    cp "$bz" "$out"
}

# Strips the appended signature of every module in $1: the guest then skips verifying it (slow
# under TCG). Layout of the trailer: signature, 12-byte info block ending in the big-endian
# signature length, then the 28-byte magic.
strip_module_signatures() {
    local ko size sig_len magic="~Module signature appended~"
    while IFS= read -r -d '' ko; do
        [ "$(tail -c 28 "$ko" | head -c 27)" = "$magic" ] || continue
        size=$(stat -c %s "$ko")
        sig_len=$(od -An -tu1 -j $((size - 32)) -N4 "$ko" | awk '{ print (($1 * 256 + $2) * 256 + $3) * 256 + $4 }')
        truncate -s $((size - 28 - 12 - sig_len)) "$ko"
    done < <(find "$1" -name '*.ko' -print0)
}

build_image() { # $1 kernel .deb, $2 destination directory
    local deb=$1 dest=$2 work kroot kver kmods ir module f rel
    softroce_log "building the guest image from $(basename "$deb")"
    rm -rf "$cache"/images/.build.* # leftovers of an interrupted build (we hold the lock)
    work=$(mktemp -d "$cache/images/.build.XXXXXX")
    kroot=$work/kernel
    dpkg-deb -x "$deb" "$kroot"
    kver=$(find "$kroot/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -1)
    [ -n "$kver" ] && [ -f "$kroot/boot/vmlinuz-$kver" ] || die "$(basename "$deb") is not a kernel package"
    kmods=$kroot/lib/modules/$kver
    [ -f "$kmods/modules.dep" ] || depmod -b "$kroot" "$kver"
    extract_vmlinux "$kroot/boot/vmlinuz-$kver" "$work/vmlinux"

    ir=$work/initramfs
    mkdir -p "$ir"/{bin,dev,proc,sys,etc,lib/modules/"$kver"}
    { ldd /bin/busybox 2>&1 || true; } | grep -q "not a dynamic" || die "/bin/busybox is not static (install busybox-static)"
    cp /bin/busybox "$ir/bin/busybox"
    for module in "${GUEST_MODULES[@]}"; do
        modprobe -d "$kroot" -S "$kver" --show-depends "$module" || die "kernel $kver has no module $module"
    done | awk '$1 == "insmod" { print $2 }' | sort -u | while read -r f; do
        rel=${f#"$kmods"/}
        mkdir -p "$ir/lib/modules/$kver/$(dirname "$rel")"
        cp "$f" "$ir/lib/modules/$kver/$rel"
    done
    cp "$kmods"/modules.{order,builtin,builtin.modinfo} "$ir/lib/modules/$kver/"
    strip_module_signatures "$ir/lib/modules"
    depmod -b "$ir" "$kver"
    printf '%s\n' "${GUEST_MODULES[@]}" >"$ir/etc/softroce-modules"
    install -m 755 "$here/guest/init-stage1.sh" "$ir/init"
    (cd "$ir" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"

    rm -rf "$dest"
    mkdir -p "$dest"
    mv "$work/vmlinux" "$work/initrd.gz" "$dest/"
    echo "$kver" >"$dest/kernel-version"
    touch "$dest/ready"
    find "$cache/images" -mindepth 1 -maxdepth 1 ! -name "$(basename "$dest")" -exec rm -rf {} + # older images
    softroce_log "guest image ready: $dest (kernel $kver)"
}

prepare() { # sets $image
    local lock deb key t0=$SECONDS
    exec {lock}>"$cache/lock"
    flock -w 1800 "$lock" || die "timed out waiting for the cache lock $cache/lock"
    install_missing_packages
    deb=$(kernel_package)
    key=$(image_key "$deb")
    image=$cache/images/$key
    if [ "$rebuild" = 1 ] || [ ! -f "$image/ready" ]; then
        build_image "$deb" "$image"
        softroce_log "first-run preparation took $((SECONDS - t0)) s"
    fi
    exec {lock}>&-
    command -v "$(softroce_qemu)" >/dev/null || die "$(softroce_qemu) not found"
}

prepare
[ "$action" = run ] || exit 0

# ------------------------------------------------------------------ per-run directory
find "$cache/runs" -mindepth 1 -maxdepth 1 -mmin +720 -exec rm -rf {} + 2>/dev/null || true # crashed runs
run=$(mktemp -d "$cache/runs/run.XXXXXX")
qemu_pid="" reader_pids=() watchdog_pid=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    if [ -n "$qemu_pid" ]; then # `timeout` forwards SIGTERM to qemu, SIGKILL follows after 5 s
        kill -TERM "$qemu_pid" 2>/dev/null || true
        wait "$qemu_pid" 2>/dev/null || true
    fi
    [ -z "${watchdog_pid:-}" ] || kill "$watchdog_pid" 2>/dev/null || true
    local p
    for p in "${reader_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -n "${SHOAL_SOFTROCE_KEEP:-}" ]; then
        echo "softroce: run directory kept: $run" >&2
    else
        rm -rf "$run"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Shares: the cwd and --rw dirs, parents first; a dir inside another share is already visible.
cwd=$(pwd -P)
candidates=()
[ "$cwd" = / ] || candidates+=("$cwd")
for d in "${rw_dirs[@]}"; do
    d=$(realpath -e -- "$d" 2>/dev/null) && [ -d "$d" ] || die "--rw: no such directory: $d"
    [ "$d" != / ] || die "--rw /: the host root is shared read-only; share a subdirectory"
    candidates+=("$d")
done
for d in "${candidates[@]}"; do
    [[ "$d" != *[$'\t\n']* ]] || die "cannot share a path containing a tab or newline: $d"
done
shares=()
while IFS= read -r d; do
    for s in "${shares[@]}"; do [[ "$d" == "$s" || "$d" == "$s"/* ]] && continue 2; done
    shares+=("$d")
done < <(for d in "${candidates[@]}"; do
    printf '%d\t%s\n' "${#d}" "$d"
done | sort -n -s -k1,1 | cut -f2-)

qemu_path() { echo "${1//,/,,}"; } # qemu option values escape ',' as ',,'
: >"$run/shares"
share_args=()
for i in "${!shares[@]}"; do
    printf 'rw%d\t%s\n' "$i" "${shares[$i]}" >>"$run/shares"
    share_args+=(-fsdev "local,id=rw$i,path=$(qemu_path "${shares[$i]}"),security_model=none,multidevs=remap"
        -device "virtio-9p-pci,fsdev=rw$i,mount_tag=rw$i")
done
printf 'SOFTROCE_IP=%s\nSOFTROCE_MTU=%s\nSOFTROCE_ROOT_CACHE=%s\n' "$ip" "$mtu" loose >"$run/guest.env"
cp "$here/guest/init-stage2.sh" "$run/init-stage2.sh"

# The command, run by the host's bash inside the chroot: host environment, then ours.
{
    echo "# generated by run-in-guest.sh"
    for var in $(compgen -e); do
        case "$var" in
            PWD | OLDPWD | SHLVL | _ | TMPDIR | BASH* | SHELLOPTS | UID | EUID | PPID | RDMA_VM | RDMA_VM_*) continue ;;
            SHOAL_RDMA_DEVICE | SHOAL_RDMA_NETDEV | SHOAL_RDMA_IP | SHOAL_RDMA_GID_INDEX) continue ;;
        esac
        printf 'export %s=%q\n' "$var" "${!var}"
    done
    echo "export RDMA_VM=1 SHOAL_RDMA_DEVICE=rxe0 SHOAL_RDMA_NETDEV=dummy0 SHOAL_RDMA_IP=$ip SHOAL_RDMA_GID_INDEX=1"
    printf 'cd -- %q || exit 125\n' "$cwd"
    printf 'exec'
    printf ' %q' "$@"
    printf '\n'
} >"$run/cmd.sh"

# ------------------------------------------------------------------ guest I/O
# (Set up again for each boot attempt.)
start_guest_io() {
    rm -f "$run"/{out,err,ctl}.{in,out} "$run/ctl.log" "$run/console.log" "$run/qemu.log" "$run/rc"
    # Each virtio port is a qemu "pipe" chardev: qemu writes to $run/<port>.out (a FIFO).
    for port in out err ctl; do mkfifo "$run/$port.in" "$run/$port.out"; done
    touch "$run/ctl.log"
    # If our own stdout/stderr goes away, keep draining so the guest never blocks on a full pipe.
    (exec <"$run/out.out"; cat || exec cat >/dev/null) &
    reader_pids+=($!)
    (exec <"$run/err.out"; cat >&2 || exec cat >/dev/null) &
    reader_pids+=($!)
    (exec <"$run/ctl.out"; while IFS= read -r line; do echo "${EPOCHREALTIME//[.,]/} $line"; done >"$run/ctl.log") &
    reader_pids+=($!)
}

accel=${SHOAL_SOFTROCE_ACCEL:-}
if [ -z "$accel" ]; then
    accel=tcg
    if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then accel=kvm; fi
fi
# shellcheck disable=SC2054 # commas belong to qemu's option syntax
case "$accel" in
    kvm) accel_args=(-accel kvm -cpu host) ;;
    tcg) accel_args=(-accel tcg,thread=multi -cpu "${SHOAL_SOFTROCE_CPU:-max,la57=off}") ;; # no AVX-512
    *) die "SHOAL_SOFTROCE_ACCEL must be tcg or kvm" ;;
esac
# shellcheck disable=SC2054
# Kernel command line: acpi=noirq skips ACPI IRQ routing (~1 s under TCG), cryptomgr.notests
# the crypto self-tests, tsc=reliable/no_timer_check the clock checks; panic=-1 ends the VM.
qemu=("$(softroce_qemu)" -name "$name" -M pc "${accel_args[@]}" -smp "$smp" -m "$mem"
    -nodefaults -no-user-config -display none -monitor none -no-reboot
    -kernel "$image/vmlinux" -initrd "$image/initrd.gz"
    -append "console=ttyS0 quiet panic=-1 acpi=noirq mitigations=off cryptomgr.notests tsc=reliable no_timer_check ${SHOAL_SOFTROCE_APPEND:-}"
    -chardev "file,id=console,path=$(qemu_path "$run/console.log")" -serial chardev:console
    -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
    -fsdev "local,id=softroce,path=$(qemu_path "$run"),security_model=none"
    -device virtio-9p-pci,fsdev=softroce,mount_tag=softroce
    -device virtio-serial-pci)
for port in out err ctl; do
    qemu+=(-chardev "pipe,id=$port,path=$(qemu_path "$run/$port")" -device "virtserialport,chardev=$port,name=$port")
done
qemu+=("${share_args[@]}")
# shellcheck disable=SC2206 # word splitting is the documented behaviour
[ -z "${SHOAL_SOFTROCE_QEMU_ARGS:-}" ] || qemu+=($SHOAL_SOFTROCE_QEMU_ARGS)

# ------------------------------------------------------------------ run
# A boot that makes no progress: no "start" from the guest within this many seconds (boots
# measured 3-15 s on a loaded 2-core host without KVM). It is retried once; a command that
# started is never retried, whatever it does.
boot_limit=${SHOAL_SOFTROCE_BOOT_TIMEOUT:-60}
[[ "$boot_limit" =~ ^[0-9]+$ ]] && [ "$boot_limit" -gt 0 ] || die "bad SHOAL_SOFTROCE_BOOT_TIMEOUT $boot_limit"

# One boot with `limit` seconds for everything; sets qemu_rc, t_launch, t_exit, t_start, t_end,
# guest_failure, and boot_stalled=1 when the watchdog killed a guest that never started.
run_guest_once() {
    local limit=$1
    start_guest_io
    # `timeout` bounds the run (SIGTERM, SIGKILL 5 s later); setpriv makes it receive SIGTERM (and
    # forward it to qemu) even if this script is SIGKILLed, so no guest outlives its harness.
    t_launch=${EPOCHREALTIME//[.,]/}
    setpriv --pdeathsig TERM -- timeout -k 5 "$limit" "${qemu[@]}" </dev/null >"$run/qemu.log" 2>&1 &
    qemu_pid=$!
    boot_stalled=0
    # The watchdog: kills a guest that shows no progress (no "start") within boot_limit.
    (
        deadline=$((SECONDS + boot_limit))
        while kill -0 "$qemu_pid" 2>/dev/null; do
            grep -q ' start$' "$run/ctl.log" 2>/dev/null && exit 0
            if [ "$SECONDS" -ge "$deadline" ]; then
                : >"$run/boot-stalled"
                kill -TERM "$qemu_pid" 2>/dev/null
                exit 0
            fi
            sleep 0.5
        done
    ) &
    watchdog_pid=$!
    qemu_rc=0
    wait "$qemu_pid" || qemu_rc=$?
    qemu_pid=""
    kill "$watchdog_pid" 2>/dev/null || true
    wait "$watchdog_pid" 2>/dev/null || true
    watchdog_pid=""
    t_exit=${EPOCHREALTIME//[.,]/}

    # Readers still blocked in open() (qemu died before opening the FIFOs) get EOF once we open and
    # close the write side; then they all exit.
    for _ in $(seq 50); do
        alive=0
        for p in "${reader_pids[@]}"; do ! kill -0 "$p" 2>/dev/null || alive=1; done
        [ "$alive" = 1 ] || break
        for port in out err ctl; do
            exec {fd}<>"$run/$port.out"
            exec {fd}>&-
        done
        sleep 0.1
    done
    reader_pids=()

    t_start="" t_end="" guest_failure=""
    while read -r t what rest; do
        case "$what" in
            start) t_start=$t ;;
            end) t_end=$t ;;
            fail) guest_failure=$rest ;;
        esac
    done <"$run/ctl.log"
    if [ -z "$t_start" ] && [ -e "$run/boot-stalled" ]; then
        boot_stalled=1
    fi
    rm -f "$run/boot-stalled"
}

t_first=${EPOCHREALTIME//[.,]/}
run_guest_once "$timeout_s"
if [ "$boot_stalled" = 1 ]; then
    used=$(((t_exit - t_first) / 1000000))
    echo "softroce: the guest made no progress in $boot_limit s of boot (console: $(wc -c <"$run/console.log" 2>/dev/null || echo 0) bytes); retrying the boot once" >&2
    [ "${SHOAL_SOFTROCE_KEEP:-}" = "" ] || cp "$run/console.log" "$run/console.stalled.log" 2>/dev/null || true
    if [ $((timeout_s - used)) -gt 5 ]; then
        run_guest_once $((timeout_s - used))
        if [ "$boot_stalled" = 1 ]; then
            echo "softroce: the retried boot made no progress either" >&2
        fi
    fi
fi

secs() { printf '%d.%d' $((($1 + 50000) / 1000000)) $(((($1 + 50000) % 1000000) / 100000)); }
print_console() {
    echo "----- guest console ($run/console.log) -----" >&2
    cat "$run/console.log" >&2 2>/dev/null || true
    if [ -s "$run/qemu.log" ]; then
        echo "----- qemu output -----" >&2
        cat "$run/qemu.log" >&2
    fi
    echo "----- end of guest console -----" >&2
}

if [ "$qemu_rc" = "$SOFTROCE_TIMEOUT_CODE" ]; then
    if [ -n "$t_start" ]; then
        echo "softroce: timeout after $timeout_s s, guest killed (boot $(secs $((t_start - t_launch))) s," \
            "the command ran $(secs $((t_exit - t_start))) s)" >&2
    else
        echo "softroce: timeout after $timeout_s s during boot, guest killed" >&2
    fi
    print_console
    exit "$SOFTROCE_TIMEOUT_CODE"
fi
if [ -z "$t_start" ]; then
    echo "softroce: the guest failed before the command ran${guest_failure:+: $guest_failure}" \
        "(qemu exit status $qemu_rc, after $(secs $((t_exit - t_launch))) s)" >&2
    print_console
    exit "$SOFTROCE_VM_FAILURE_CODE"
fi
rc=""
[ -s "$run/rc" ] && rc=$(<"$run/rc")
if ! [[ "$rc" =~ ^[0-9]+$ ]]; then
    echo "softroce: the guest died while the command ran (qemu exit status $qemu_rc)" >&2
    print_console
    exit "$SOFTROCE_VM_FAILURE_CODE"
fi
[ -n "$t_end" ] || t_end=$t_exit
echo "softroce: boot $(secs $((t_start - t_launch))) s, command $(secs $((t_end - t_start))) s," \
    "total $(secs $((t_exit - t_launch))) s" >&2
if [ "$rc" = 132 ]; then
    echo "softroce: the command died of SIGILL: was it built with -march=native? The guest CPU stops at AVX2." >&2
fi
[ "$show_console" = 0 ] || print_console
exit "$rc"
