#!/bin/sh
# Harness self-test: a kernel log splat after the last test's verdict (as
# from deferred work) fails the boot's "settle" verdict; the test passes.
# boot: alone
# expect: PASS
# settle: FAIL kernel log: BUG: harness self-test, late
setsid sh -c 'sleep 1; echo "BUG: harness self-test, late" >/dev/kmsg' </dev/null >/dev/null 2>&1 &
exit 0
