#!/bin/sh
# Harness self-test: a guest that panics mid-test must fail that test.
# boot: alone
# expect: FAIL guest died while running it
echo c >/proc/sysrq-trigger
sleep 10
