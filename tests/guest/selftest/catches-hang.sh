#!/bin/sh
# Harness self-test: a test that hangs past its timeout must fail.
# test-timeout: 3
# expect: FAIL timeout after 3 s
sleep 1000
