#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The very last test (the runner runs *.c, then *.sh, in name order): once
# everything the other tests left in flight has drained, the module
# unloads, and its device node and sysfs directory go away.
# test-timeout: 60
m=/sys/module/stablesend
[ -d $m ] || { echo "stablesend is not loaded"; exit 77; }
stats=/sys/module/stablesend/stats
i=0
# Pages still held by the network stack keep a context, and so the module.
while [ "$(cat $m/refcnt)" != 0 ] && [ $i -lt 100 ]; do
	usleep 100000
	i=$((i + 1))
done
echo "refcnt $(cat $m/refcnt), contexts $(cat $stats/contexts)," \
	"requests in flight $(cat $stats/requests_in_flight), pool $(cat $stats/pool_bytes) bytes"
if ! rmmod stablesend; then
	echo "FAIL: rmmod stablesend"
	exit 1
fi
[ ! -e /dev/stablesend ] || { echo "FAIL: /dev/stablesend still exists"; exit 1; }
[ ! -e $m ] || { echo "FAIL: $m still exists"; exit 1; }
echo "ok: stablesend unloaded, /dev/stablesend gone"
