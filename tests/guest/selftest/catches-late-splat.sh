#!/bin/sh
# Harness self-test: a kernel log splat after the last test's verdict (as
# from deferred work) fails the boot's "settle" verdict; the test passes.
# The writer leaves the test's process group (which the harness kills
# when the test exits) before the test exits.
# boot: alone
# expect: PASS
# settle: FAIL kernel log: BUG: harness self-test, late
rm -f late.escaped
setsid sh -c 'touch late.escaped; sleep 1; echo "BUG: harness self-test, late" >/dev/kmsg' \
	</dev/null >/dev/null 2>&1 &
i=0
while [ ! -e late.escaped ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -e late.escaped ] || { echo "the writer never started"; exit 1; }
exit 0
