#!/bin/sh
# Harness self-test: a test that skips reports SKIP; not being on
# tests/skips.allow, it must then count as a failure (unlisted-skip-fails).
# expect: SKIP
echo "SKIP: harness self-test"
exit 77
