#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The stablesend tool: usage errors (2), status, send to IPv4 and IPv6
# loopback with and without --offset/--length, failures (1).

set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
tool=$top/lib/tools/stablesend
sink=$here/tcp-sink
failed=0
work=$(mktemp -d "${TMPDIR:-/tmp}/stablesend-tool.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok: $*"; }

# expect CODE DESCRIPTION CMD...: run, check the exit status.
expect() {
	want=$1 what=$2
	shift 2
	"$@" >"$work/out" 2>"$work/err"
	rc=$?
	if [ $rc = "$want" ]; then
		ok "$what (exit $rc)"
	else
		fail "$what: exit $rc, want $want"
		sed 's/^/    /' "$work/out" "$work/err"
	fi
}

[ -x "$tool" ] && [ -x "$sink" ] || { echo "build first"; exit 1; }

expect 2 "no arguments" "$tool"
expect 2 "unknown command" "$tool" frobnicate
expect 0 "--help" "$tool" --help
expect 0 "--version" "$tool" --version
grep -q "^stablesend [0-9]" "$work/out" || fail "--version output"
expect 2 "send without args" "$tool" send
expect 2 "send, bad HOST:PORT" "$tool" send /etc/hostname nohostport
expect 2 "send, unbracketed IPv6" "$tool" send /etc/hostname ::1:80
expect 2 "send, bad --offset" "$tool" send /etc/hostname 127.0.0.1:1 --offset x
expect 2 "send, negative --length" "$tool" send /etc/hostname 127.0.0.1:1 --length -5
expect 2 "status with arguments" "$tool" status extra

expect 0 "status" "$tool" status
cat "$work/out"
if [ -e /dev/stablesend ]; then
	grep -q "^module: loaded" "$work/out" || fail "status says not loaded"
else
	grep -q "^module: not loaded" "$work/out" || fail "status output"
	STABLESEND_REQUIRE_MODULE=1 expect 1 "status, module required" "$tool" status
fi

# A data file of odd size.
head -c 300001 /dev/urandom >"$work/data" || exit 1

# send ADDR HOSTPORT_FORMAT DESCRIPTION [tool options]: send to a tcp-sink,
# HOSTPORT_FORMAT has %s for the port; compares with the expected slice
# already in $work/want.
send() {
	addr=$1 fmt=$2 what=$3
	shift 3
	rm -f "$work/port" "$work/recv"
	"$sink" "$addr" "$work/port" "$work/recv" &
	pid=$!
	i=0
	while [ ! -s "$work/port" ] && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	if [ ! -s "$work/port" ]; then
		kill $pid 2>/dev/null
		return 77
	fi
	# shellcheck disable=SC2059
	hp=$(printf "$fmt" "$(cat "$work/port")")
	expect 0 "send $what to $hp" "$tool" send "$work/data" "$hp" "$@"
	wait $pid || fail "tcp-sink"
	cmp -s "$work/want" "$work/recv" && ok "$what: received bytes match" ||
		fail "$what: received bytes differ"
	grep -q "^sent $(stat -c %s "$work/want") bytes" "$work/out" ||
		fail "$what: output '$(cat "$work/out")'"
	if [ ! -s "$work/want" ]; then
		:	# nothing sent, no path to report
	elif [ -e /dev/stablesend ]; then
		grep -q "via module" "$work/out" || fail "$what: not via module"
	else
		grep -q "via fallback" "$work/out" || fail "$what: not via fallback"
	fi
}

cp "$work/data" "$work/want"
send 127.0.0.1 "127.0.0.1:%s" "whole file"
tail -c +1001 "$work/data" | head -c 123457 >"$work/want"
send 127.0.0.1 "127.0.0.1:%s" "range" --offset 1000 --length 123457
tail -c +4097 "$work/data" >"$work/want"
send 127.0.0.1 "localhost:%s" "by name, --offset=4K" --offset=4K
: >"$work/want"
send 127.0.0.1 "127.0.0.1:%s" "empty range" --offset 300001
head -c 100000 "$work/data" >"$work/want"
cp "$work/want" "$work/data.v6"
if send ::1 "[::1]:%s" "IPv6" --length 100000; then :; else
	[ $? = 77 ] && echo "skip: no IPv6 loopback"
fi

# Failures: exit 1 with a message.
expect 1 "missing file" "$tool" send "$work/nonexistent" 127.0.0.1:1
grep -q nonexistent "$work/err" || fail "no message for a missing file"
# A port nothing listens on: take one from a sink that has exited.
"$sink" 127.0.0.1 "$work/port2" "$work/recv2" &
pid=$!
i=0
while [ ! -s "$work/port2" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
"$tool" send /dev/null "127.0.0.1:$(cat "$work/port2")" >/dev/null 2>&1
wait $pid
expect 1 "connection refused" "$tool" send "$work/data" "127.0.0.1:$(cat "$work/port2")"
grep -q "connect" "$work/err" || fail "no message for a refused connection"
if [ ! -e /dev/stablesend ]; then
	rm -f "$work/port"
	"$sink" 127.0.0.1 "$work/port" "$work/recv" &
	pid=$!
	i=0
	while [ ! -s "$work/port" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
	STABLESEND_REQUIRE_MODULE=1 expect 1 "send, module required" \
		"$tool" send "$work/data" "127.0.0.1:$(cat "$work/port")"
	grep -q "No such device" "$work/err" || fail "ENODEV message: $(cat "$work/err")"
	wait $pid
fi

exit $failed
