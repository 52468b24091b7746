#!/bin/sh
# Harness self-test: a kernel "WARNING:" line fails a test that exited 0.
# expect: FAIL kernel log: WARNING: harness self-test
echo "WARNING: harness self-test" >/dev/kmsg
exit 0
