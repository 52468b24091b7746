#!/bin/sh
# The module DKMS built is loaded and registered its device.
[ -c /dev/stablesend ] || { echo "no character device /dev/stablesend"; exit 1; }
[ -d /sys/module/stablesend ] || { echo "no /sys/module/stablesend"; exit 1; }
echo "stablesend loaded, /dev/stablesend is $(stat -c '%t:%T' /dev/stablesend)"
# MODULE_VERSION, from dkms.conf's PACKAGE_VERSION.
v=$(cat /sys/module/stablesend/version 2>/dev/null)
echo "$v" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+$' || { echo "module version '$v' (want X.Y.Z from dkms.conf)"; exit 1; }
echo "stablesend version $v"
