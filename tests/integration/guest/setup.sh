#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# int-setup (busybox, outside the chroot): mount the Debian 12 image
# (/dev/vda, snapshot=on: writes are discarded) on /mnt/deb, give it /proc,
# /sys, /dev, tmpfs /tmp and /run, this directory as /int, the module as
# /int-ko/stablesend.ko; then the two network namespaces over veth.
set -eu
R=/mnt/deb

mkdir -p $R
mount -t ext4 /dev/vda $R
mount -t proc proc $R/proc
mount -o rbind /sys $R/sys
mount -o rbind /dev $R/dev
mount -t tmpfs tmpfs $R/tmp
mount -t tmpfs tmpfs $R/run
mkdir -p $R/int $R/int-ko
mount -o bind /tests $R/int
cp /lib/modules/stablesend.ko $R/int-ko/
[ -c $R/dev/stablesend ] || { echo "no /dev/stablesend in the chroot"; exit 1; }
echo "root: $(cat $R/etc/debian_version), $(uname -r), $(grep MemTotal /proc/meminfo)"
exec chroot $R /bin/bash /int/cases.sh int-setup
