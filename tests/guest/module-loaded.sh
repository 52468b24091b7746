#!/bin/sh
# The module DKMS built is loaded and registered its device.
[ -c /dev/stablesend ] || { echo "no character device /dev/stablesend"; exit 1; }
[ -d /sys/module/stablesend ] || { echo "no /sys/module/stablesend"; exit 1; }
echo "stablesend loaded: $(cat /sys/module/stablesend/srcversion 2>/dev/null)"
