#!/bin/busybox sh
# shellcheck shell=dash
# Stage 1 of the Soft-RoCE guest: /init of the cached initramfs (busybox sh, PID 1).
# Loads the kernel modules listed in /etc/softroce-modules, mounts the per-run directory that
# run-in-guest.sh shares as 9p tag "softroce", and hands over to its init-stage2.sh. Kept minimal
# because it is baked into the image: any change here rebuilds the image (its hash is the key).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

die() {
    echo "softroce-guest: stage 1: $*" >/dev/console
    poweroff -f
}

while read -r module; do
    modprobe "$module" || die "modprobe $module failed"
done </etc/softroce-modules

mkdir -p /softroce
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none softroce /softroce ||
    die "cannot mount the per-run directory (9p tag softroce)"
[ -f /softroce/init-stage2.sh ] || die "the per-run directory has no init-stage2.sh"
exec sh /softroce/init-stage2.sh
