#!/bin/sh
# Harness self-test control: after the failures above the runner still
# reports a passing test as passing.
# expect: PASS
exit 0
