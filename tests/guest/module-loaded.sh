#!/bin/sh
# The module DKMS built is loaded and registered its device.
[ -c /dev/stablesend ] || { echo "no character device /dev/stablesend"; exit 1; }
[ -d /sys/module/stablesend ] || { echo "no /sys/module/stablesend"; exit 1; }
echo "stablesend loaded, /dev/stablesend is $(stat -c '%t:%T' /dev/stablesend)"
