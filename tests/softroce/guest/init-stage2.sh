#!/bin/busybox sh
# shellcheck shell=dash
# Stage 2 of the Soft-RoCE guest (busybox sh, PID 1), read from the per-run directory at every
# boot, so editing it needs no image rebuild. It builds the guest view of the host, brings up
# Soft-RoCE and runs the command:
#   /host       the host's root over 9p, read-only; the command runs chrooted into it
#   shares      host directories mounted read-write at their host paths (list in ./shares)
#   net         dummy0 with $SOFTROCE_IP/24, rxe0 on top of it (GID index 1 = ::ffff:$SOFTROCE_IP)
# It reports progress on the virtio port "ctl" (the host timestamps each line: "start", "end RC"),
# writes the command's exit status to ./rc and powers the guest off. Diagnostics go to the console.
R=/softroce
P9="trans=virtio,version=9p2000.L,msize=512000"
H=/host

stage() {
    read -r up _ </proc/uptime
    echo "softroce-guest: [$up s] $*" >/dev/console
}
ctl=/dev/null out=/dev/null err=/dev/console
for port in /sys/class/virtio-ports/*; do
    read -r name <"$port/name" || continue
    case "$name" in
        ctl) ctl=/dev/${port##*/} ;;
        out) out=/dev/${port##*/} ;;
        err) err=/dev/${port##*/} ;;
    esac
done
die() {
    stage "setup failed: $*"
    echo "fail $*" >"$ctl"
    poweroff -f
}
stage "stage 2"
# shellcheck source=/dev/null
. $R/guest.env || die "cannot read $R/guest.env"

mkdir -p $H
mount -t 9p -o "$P9,ro,cache=$SOFTROCE_ROOT_CACHE" hostroot $H || die "cannot mount the host root"
mount -t proc proc $H/proc && mount -t sysfs sysfs $H/sys && mount -t devtmpfs devtmpfs $H/dev ||
    die "cannot mount proc/sys/dev in the host root"
mkdir -p $H/dev/pts $H/dev/shm
mount -t devpts -o ptmxmode=666 devpts $H/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $H/dev/shm
for d in tmp var/tmp run; do
    [ -d $H/$d ] && mount -t tmpfs -o mode=1777 tmpfs $H/$d
done
mkdir -p $H/run/softroce && mount -o bind $R $H/run/softroce || die "cannot bind the run directory"
# Read-write shares, parents before children (run-in-guest.sh sorts them).
while IFS="$(printf '\t')" read -r tag path; do
    mkdir -p "$H$path" 2>/dev/null
    mount -t 9p -o "$P9,cache=mmap" "$tag" "$H$path" || die "cannot mount the share $path"
done <$R/shares
stage "filesystems mounted"

ip link set lo up
[ -d /sys/class/net/dummy0 ] || ip link add dummy0 type dummy
ip link set dummy0 mtu "$SOFTROCE_MTU" up && ip addr add "$SOFTROCE_IP/24" dev dummy0 ||
    die "cannot configure dummy0"
[ -x $H/usr/bin/rdma ] || die "the host has no /usr/bin/rdma (Debian package iproute2)"
chroot $H /usr/bin/rdma link add rxe0 type rxe netdev dummy0 || die "rdma link add rxe0 failed"
tries=0 # the IPv4 GID (index 1) appears asynchronously
until grep -q ffff /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null; do
    tries=$((tries + 1))
    [ $tries -le 200 ] || die "rxe0 never got its IPv4 GID (index 1)"
    usleep 25000
done
stage "rxe0 up on dummy0 ($SOFTROCE_IP)"

echo start >"$ctl"
chroot $H /bin/bash /run/softroce/cmd.sh </dev/null >"$out" 2>"$err"
rc=$?
echo $rc >$R/rc
echo "end $rc" >"$ctl"
stage "command exited with status $rc"
sync
poweroff -f
