#!/bin/sh
# Harness self-test: a test that exits non-zero must fail.
# expect: FAIL exit status 3
echo "failing on purpose"
exit 3
