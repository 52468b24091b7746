#!/bin/sh
# SPDX-License-Identifier: MIT
#
# run.sh TEST...: run each test (a program, or a .sh script) with a timeout;
# exit 0 is a pass, 77 a skip (a failure unless tests/skips.allow lists it
# for "host"), anything else a failure.  Prints PASS, FAIL or SKIP and the
# name per test, then "N passed, N failed, N skipped", and
# exits non-zero if anything failed.  Output goes to NAME.log, shown on
# failure.
#
# VALGRIND="valgrind --error-exitcode=99 ...": run each program a second
# time under it, as NAME:valgrind.  TIMEOUT: seconds per test (120).

timeout=${TIMEOUT:-120}
pass=0 fail=0 skip=0
allow=$(dirname "$0")/../skips.allow

# allowed NAME: prints why tests/skips.allow lets NAME skip on the host, or fails
allowed() {
	awk -F '\t' -v n="$1" '$1 == "host" && $2 == n { print $3; found = 1; exit }
		END { exit !found }' "$allow" 2>/dev/null
}

# one NAME LOG CMD...
one() {
	name=$1 log=$2
	shift 2
	timeout "$timeout" "$@" >"$log" 2>&1
	rc=$?
	case $rc in
	0)	echo "PASS $name"; pass=$((pass + 1)) ;;
	77)	if why=$(allowed "$name"); then
			echo "SKIP (allowed) host $name: $why"
			skip=$((skip + 1))
		else
			echo "FAIL $name (skipped, and not on tests/skips.allow; log $log)"
			tail -n 30 "$log" | sed 's/^/    /'
			fail=$((fail + 1))
		fi ;;
	*)	[ $rc = 124 ] && echo "(timed out after ${timeout}s)" >>"$log"
		echo "FAIL $name (exit $rc, log $log)"
		tail -n 30 "$log" | sed 's/^/    /'
		fail=$((fail + 1)) ;;
	esac
}

for t in "$@"; do
	name=${t##*/}
	case $t in
	*.sh)	one "$name" "$name.log" sh "$t" ;;
	*)	one "$name" "$name.log" "$t"
		# shellcheck disable=SC2086
		[ -n "${VALGRIND:-}" ] &&
			one "$name:valgrind" "$name.valgrind.log" $VALGRIND "$t" ;;
	esac
done

echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
