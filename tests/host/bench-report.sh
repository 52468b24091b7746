#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/bench/report.c on a CSV made up here: every target's verdict
# carries the ratio within each run and how many runs met it, and the
# "targets by run" line counts them (README's Performance section and
# tests/bench/README say so).

set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/stablesend-report.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
failed=0

printf 'int report(int argc, char **argv);\nint main(int c, char **v) { return report(c - 1, v + 1); }\n' \
	>"$work/main.c"
${CC:-cc} -O2 -o "$work/report" "$work/main.c" "$top/tests/bench/report.c" -lm ||
	exit 1

# SEND against pread+send at 4 KiB, 2 CPUs, TCP loopback, three runs:
# per-run ratios 0.50, 1.50 and 0.90, medians 90 and 100 MB/s (0.90x).
{
	echo "kernel,cpus,transport,size,method,variant,depth,run,throughput_Bps,sent_throughput_Bps,sys_cpu_ns_per_byte,sender_cpu_ns_per_byte,peak_inflight_bytes,checked_bytes"
	for r in "1 50" "2 150" "3 90"; do
		set -- $r
		echo "9.9.9-test,2,tcp-lo,4096,stablesend-sync,,1,$1,${2}000000,,1.0,1.0,4096,4096"
		echo "9.9.9-test,2,tcp-lo,4096,pread+send,,1,$1,100000000,,1.0,1.0,4096,4096"
	done
} >"$work/bench.csv"

"$work/report" "$work/bench.csv" >"$work/out" 2>&1 || { cat "$work/out"; exit 1; }
line=$(grep 'stablesend-sync vs pread+send throughput @4KiB tcp-lo' "$work/out")
echo "$line"
case $line in
*"0.90x (target >= 1.00x) MISS (runs 0.50-1.50, 1 of 3 met)"*) echo "ok: the verdict with its runs" ;;
*) echo "FAIL: want 0.90x, MISS, runs 0.50-1.50, 1 of 3 met"; failed=1 ;;
esac
if grep -q '^targets by run: 0 met in every run, 0 in none, 1 in some$' "$work/out"; then
	echo "ok: targets by run"
else
	echo "FAIL: the targets-by-run line:"
	grep '^targets' "$work/out"
	failed=1
fi
exit $failed
