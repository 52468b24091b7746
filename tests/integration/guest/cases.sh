# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# cases.sh NAME: one integration test, run with bash inside the Debian 12
# chroot (tests/integration/guest/setup.sh made it).  Servers live in the
# network namespace "srv" (10.77.0.1), clients in "cli" (10.77.0.2), over
# veth.  Each transfer: a file of SIZE bytes of 'A' is requested, the
# client stops reading (its output goes through a pipe that is not read),
# the test waits until the server has handed the whole response to its
# socket (bytes_acked + Send-Q stable), overwrites the file in place with
# 'B' (dd conv=notrunc, same inode), lets the client read on, and counts
# the 'B's it received.  Lines starting "result:" are shown by the host.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C

SRV=10.77.0.1
CLI=10.77.0.2
DOCS=/srv/int
SIZE=$((4 << 20))
PRELOAD=/int/libstablesend-preload.so
STATS=/sys/module/stablesend/stats
T=/tmp/int
SERVER_PID=
CLIENT_PID=

say() { printf '%s\n' "$*"; }
fail() { say "FAIL: $*"; exit 1; }
in_srv() { ip netns exec srv "$@"; }
in_cli() { ip netns exec cli "$@"; }
# Cheaper than ip netns exec (no new mount namespace): for polling.
ss_srv() { nsenter --net=/run/netns/srv ss "$@"; }

REINSERT=0
cleanup() {
	[[ -z $CLIENT_PID ]] || kill "$CLIENT_PID" 2>/dev/null || true
	stop_server
	# The tests after a "nomodule" one need the module back.
	if ((REINSERT)) && [[ ! -e /sys/module/stablesend ]]; then
		insmod /int-ko/stablesend.ko || say "FAIL: insmod stablesend.ko again failed"
	fi
}
trap cleanup EXIT

# --- setup (once per boot) ----------------------------------------------------
setup() {
	mkdir -p /run/netns "$DOCS" "$T"
	ip netns add srv
	ip netns add cli
	ip link add vsrv type veth peer name vcli
	ip link set vsrv netns srv
	ip link set vcli netns cli
	in_srv ip addr add "$SRV/24" dev vsrv
	in_cli ip addr add "$CLI/24" dev vcli
	in_srv ip link set lo up
	in_cli ip link set lo up
	in_srv ip link set vsrv up
	in_cli ip link set vcli up
	# Room for the whole response on the server's side while the client
	# does not read: the overwrite must find it all queued.
	in_srv sysctl -qw net.ipv4.tcp_wmem="4096 16777216 16777216"
	chmod 755 "$DOCS"
	echo small >"$DOCS/small"
	chmod 644 "$DOCS/small"
	say "versions: $(dpkg-query -W -f='${Package} ${Version}, ' nginx-light lighttpd apache2 samba curl wget smbclient)"
	ls -l /dev/stablesend "$PRELOAD" 2>&1 || true
	[[ -c /dev/stablesend ]] || fail "no /dev/stablesend in the chroot"
}

# --- servers ------------------------------------------------------------------
# start_server NAME MODE (plain|preload): in the background, in netns srv,
# stderr to $T/NAME.err; waits until it listens.
start_server() {
	local name=$1 mode=$2 port=80 i env=(env)
	if [[ $mode == preload ]]; then
		[[ -e $PRELOAD ]] || fail "libstablesend-preload.so missing (make -C lib): cannot test the preload"
		# Its log to a file the servers' unprivileged workers can write.
		install -m 0666 /dev/null "$T/preload.log"
		env+=(LD_PRELOAD="$PRELOAD" STABLESEND_PRELOAD_LOG="$T/preload.log")
	fi
	: >"$T/$name.err"
	case $name in
	nginx)
		nginx_conf "$mode" >"$T/nginx.conf"
		in_srv "${env[@]}" nginx -c "$T/nginx.conf" 2>"$T/$name.err" &
		;;
	lighttpd)
		lighttpd_conf >"$T/lighttpd.conf"
		in_srv "${env[@]}" lighttpd -D -f "$T/lighttpd.conf" 2>"$T/$name.err" &
		;;
	apache2)
		# A pid file left by a killed server names a pid that may be
		# taken again: apache2 would refuse to start.
		rm -f "$T/apache2.pid"
		apache_conf >"$T/apache2.conf"
		in_srv "${env[@]}" apache2 -D FOREGROUND -f "$T/apache2.conf" 2>"$T/$name.err" &
		;;
	smbd)
		port=445
		smb_conf >"$T/smb.conf"
		mkdir -p "$T/smb/lock" "$T/smb/state" "$T/smb/cache" "$T/smb/private" \
			"$T/smb/ncalrpc" /run/samba
		in_srv "${env[@]}" smbd --foreground --no-process-group --debug-stdout \
			--configfile="$T/smb.conf" >"$T/$name.out" 2>"$T/$name.err" &
		;;
	esac
	SERVER_PID=$!
	for ((i = 0; i < 300; i++)); do
		ss_srv -Htln "( sport = :$port )" | grep -q . && return 0
		kill -0 "$SERVER_PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$T/$name.err" "$T/$name.out" 2>/dev/null || true
	fail "$name does not listen on port $port"
}

stop_server() {
	local i pid=$SERVER_PID
	[[ -n $pid ]] || return 0
	SERVER_PID=
	kill "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	pkill -KILL -P "$pid" 2>/dev/null || true
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	# What else runs in netns srv (apache's and smbd's children).
	for pid in $(ip netns pids srv); do kill -KILL "$pid" 2>/dev/null || true; done
	sleep 0.2
}

nginx_conf() {
	cat <<EOF
worker_processes 1;
daemon off;
master_process on;
pid $T/nginx.pid;
error_log $T/nginx-error.log;
$([[ $1 == preload ]] && printf 'env LD_PRELOAD;\nenv STABLESEND_PRELOAD_LOG;')
events { worker_connections 64; }
http {
	sendfile on;
	access_log $T/nginx-access.log;
	client_body_temp_path $T;
	proxy_temp_path $T;
	server {
		listen $SRV:80;
		root $DOCS;
	}
}
EOF
}

lighttpd_conf() {
	cat <<EOF
server.document-root = "$DOCS"
server.bind = "$SRV"
server.port = 80
server.username = "www-data"
server.groupname = "www-data"
server.network-backend = "sendfile"
server.max-worker = 0
EOF
}

apache_conf() {
	cat <<EOF
ServerRoot /etc/apache2
DefaultRuntimeDir $T
PidFile $T/apache2.pid
Mutex file:$T default
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
User www-data
Group www-data
ServerName int
Listen $SRV:80
ErrorLog $T/apache2-error.log
EnableSendfile On
EnableMMAP Off
DocumentRoot $DOCS
<Directory $DOCS>
	Require all granted
</Directory>
EOF
}

smb_conf() {
	cat <<EOF
[global]
	server role = standalone server
	map to guest = Bad User
	guest account = nobody
	interfaces = $SRV/24
	bind interfaces only = yes
	smb ports = 445
	disable netbios = yes
	use sendfile = yes
	# smbd tries an asynchronous pread first (aio read size 1): off, so
	# that its reads go to sendfile.
	aio read size = 0
	# smbclient reads a whole READ response before it writes any of it:
	# 64 KiB reads, and (client -b) 64 of them outstanding, so that the
	# responses wait in the socket while the client is stopped.
	smb2 max read = 65536
	server signing = disabled
	server smb encrypt = off
	load printers = no
	printcap name = /dev/null
	lock directory = $T/smb/lock
	state directory = $T/smb/state
	cache directory = $T/smb/cache
	private dir = $T/smb/private
	pid directory = $T/smb
	ncalrpc dir = $T/smb/ncalrpc
	log file = $T/smb/log
	log level = 1
[int]
	path = $DOCS
	guest ok = yes
	read only = yes
EOF
}

# --- clients -----------------------------------------------------------------
# client SERVER FILE: the client's command for FILE, body to stdout.
client() {
	case $1 in
	nginx | apache2) echo "curl -sS -m 120 http://$SRV/$2" ;;
	lighttpd) echo "wget -q -T 120 -O - http://$SRV/$2" ;;
	smbd) echo "smbclient //$SRV/int -N -b $SIZE -c 'get $2 -'" ;;
	esac
}

# What the server has handed to its socket (bytes acknowledged + Send-Q),
# summed over its established connections on PORT.
queued() {
	ss_srv -tinH state established "( sport = :$1 )" |
		awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^bytes_acked:/) { sub(/.*:/, "", $i); a += $i }
		       if ($1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/) q += $2 }
		     END { print a + q }'
}

# Wait until queued() reaches WANT and holds still for a second.
wait_queued() { # PORT WANT
	local n last=-1 still=0 end=$((SECONDS + 40))
	while ((SECONDS < end)); do
		n=$(queued "$1")
		if ((n >= $2 && n == last)); then
			((++still >= 4)) && { say "queued: $n bytes on the server's side"; return 0; }
		else
			still=0
		fi
		last=$n
		sleep 0.25
	done
	say "queued: only $n of $2 bytes after 40 s"
	ss_srv -tinp
	ps -ef
	return 1
}

fill() { # FILE CHAR
	head -c "$SIZE" /dev/zero | tr '\0' "$2" | dd of="$1" conv=notrunc bs=1M status=none
}

stat_bytes() { cat "$STATS/bytes_sent" 2>/dev/null || echo 0; }

# The preload's log lines (path=module|copy|...), counted into PATHS: from
# its log file, and from the server's stderr and error log, where they go
# when the log file's name was lost.
preload_paths() { # SERVER
	local logs=() f
	PATHS=
	[[ -e $T/preload.log ]] || return 0
	for f in "$T/preload.log" "$T/$1.err" "$T/$1-error.log"; do
		[[ -e $f ]] && logs+=("$f")
	done
	say "preload log:"
	grep -h 'libstablesend-preload' "${logs[@]}" || true
	PATHS=$(grep -ho 'path=[a-z-]*' "${logs[@]}" | sort | uniq -c | xargs) || true
	grep -q 'path=' "$T/preload.log" ||
		PATHS+=" (logged to the server's stderr, not to STABLESEND_PRELOAD_LOG=$T/preload.log)"
	: >"$T/$1-error.log" 2>/dev/null || true
}

# transfer SERVER MODE: one overwrite-during-transfer; sets A, B, MODBYTES.
transfer() {
	local server=$1 mode=$2 port=80 f=$DOCS/big ino out=$T/out bytes0 i
	[[ $server == smbd ]] && port=445
	rm -f "$f" "$out" "$T/go" "$T/preload.log"
	fill "$f" A
	chmod 644 "$f"
	ino=$(stat -c %i "$f")
	start_server "$server" "$mode"
	bytes0=$(stat_bytes)
	# The client's output goes through a pipe nobody reads until $T/go.
	# shellcheck disable=SC2046
	(in_cli bash -c "$(client "$server" big)" |
		{ while [[ ! -e $T/go ]]; do sleep 0.05; done; cat >"$out"; }) &
	CLIENT_PID=$!
	wait_queued "$port" "$SIZE" || { touch "$T/go"; fail "the server never queued the whole file"; }
	fill "$f" B
	[[ $(stat -c %i "$f") == "$ino" ]] || fail "the overwrite changed the inode"
	touch "$T/go"
	for ((i = 0; i < 1200; i++)); do
		kill -0 "$CLIENT_PID" 2>/dev/null || break
		sleep 0.1
	done
	wait "$CLIENT_PID" || fail "the client failed ($(client "$server" big))"
	CLIENT_PID=
	MODBYTES=$(($(stat_bytes) - bytes0))
	stop_server
	A=$(tr -cd A <"$out" | wc -c)
	B=$(tr -cd B <"$out" | wc -c)
	say "server stderr (last lines):"
	tail -n 5 "$T/$server.err" || true
	preload_paths "$server"
	say "result: $server $mode $(uname -r): received $(stat -c %s "$out") bytes, A=$A B=$B, module bytes +$MODBYTES${PATHS:+, preload $PATHS}"
	((A + B == SIZE)) || fail "expected $SIZE bytes of A and B, got A=$A B=$B ($(stat -c %s "$out") bytes)"
}

case_control() {
	transfer "$1" plain
	((B > 0)) || fail "control: no B received; the test cannot see the overwrite"
}

case_preload() {
	transfer "$1" preload
	((B == 0)) || fail "preload: $B bytes of the overwrite reached the client"
	((MODBYTES >= SIZE)) || fail "preload: the module sent only $MODBYTES bytes (stats/bytes_sent)"
	[[ $PATHS == *path=module* && $PATHS != *path=copy* ]] ||
		fail "preload: its log does not say path=module (only): ${PATHS:-no log}"
}

case_nomodule() {
	local i
	for ((i = 0; i < 50; i++)); do
		rmmod stablesend 2>/dev/null && break
		sleep 0.2
	done
	[[ ! -e /sys/module/stablesend ]] || fail "rmmod stablesend failed"
	REINSERT=1
	transfer "$1" preload
	((B == 0)) || fail "nomodule: $B bytes of the overwrite reached the client through the preload's copy fallback"
	[[ $PATHS == *path=copy* && $PATHS != *path=module* ]] ||
		fail "nomodule: the preload's log does not say path=copy (only): ${PATHS:-no log}"
}

# One worker; a client that never reads a 32 MiB file fills its socket;
# a second client must be served within a second.
case_stalled() {
	local t rc=0
	in_srv sysctl -qw net.ipv4.tcp_wmem="4096 16384 4194304"
	SIZE=$((32 << 20)) fill "$DOCS/huge" A
	chmod 644 "$DOCS/huge"
	start_server nginx preload
	# shellcheck disable=SC2216 # a reader that never reads
	(in_cli curl -sS -m 100 "http://$SRV/huge" | sleep 100) &
	CLIENT_PID=$!
	sleep 1
	say "stalled client: $(queued 80) bytes queued"
	t=$(in_cli curl -sS -m 10 -o /dev/null -w '%{http_code} %{time_total}' "http://$SRV/small") || rc=1
	say "result: nginx stalled $(uname -r): second client: $t (code, seconds)"
	in_srv sysctl -qw net.ipv4.tcp_wmem="4096 16777216 16777216"
	((rc == 0)) || fail "the second client was not served"
	[[ $t == "200 "* ]] || fail "the second client got ${t%% *}"
	awk -v t="${t#* }" 'BEGIN { exit !(t < 1.0) }' || fail "the second client waited ${t#* } s"
}

# --- throughput (tests/integration/run --bench) -------------------------------
# Bodies of each size, requested over and over: requests/s of the server
# without and with the preload, rounds interleaved (plain first in odd
# rounds, preload first in even ones), every size per server start.
BENCH_SIZES="4096 65536 1048576"
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_SECONDS=${BENCH_SECONDS:-2}

# One HTTP measurement with Debian's ab (keep-alive, 4 connections) for
# BENCH_SECONDS: prints requests/s, or fails when a request failed.
http_rate() { # FILE
	local out c f r
	out=$(in_cli ab -q -k -c 4 -t "$BENCH_SECONDS" -n 10000000 "http://$SRV/$1" 2>&1) ||
		{ say "$out"; fail "ab failed"; }
	c=$(awk '/^Complete requests:/ { print $3 }' <<<"$out")
	f=$(awk '/^Failed requests:/ { print $3 }' <<<"$out")
	r=$(awk '/^Requests per second:/ { print $4 }' <<<"$out")
	((${c:-0} > 0 && ${f:-1} == 0)) || { say "$out"; fail "ab: $c complete, $f failed"; }
	echo "$r"
}

# One SMB measurement: N gets of FILE in one smbclient session, less the
# time of a session with one get; prints requests/s.
smb_rate() { # FILE N
	local cmds='' i t0 t1 t2
	for ((i = 0; i < $2; i++)); do cmds+="get $1 /dev/null; "; done
	t0=$(date +%s.%N)
	in_cli smbclient "//$SRV/int" -N -c "get $1 /dev/null" >/dev/null 2>&1 || fail "smbclient get $1"
	t1=$(date +%s.%N)
	in_cli smbclient "//$SRV/int" -N -c "$cmds" >/dev/null 2>&1 || fail "smbclient $2 gets of $1"
	t2=$(date +%s.%N)
	awk -v n="$2" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { d = (c - b) - (b - a); if (d <= 0) d = c - b; printf "%.1f\n", (n - 1) / d }'
}

case_bench() {
	local server=$1 round mode size r b0 moved
	for size in $BENCH_SIZES; do
		head -c "$size" /dev/zero | tr '\0' A >"$DOCS/b$size"
		chmod 644 "$DOCS/b$size"
	done
	for ((round = 1; round <= BENCH_ROUNDS; round++)); do
		for mode in $( ((round % 2)) && echo plain preload || echo preload plain); do
			start_server "$server" "$mode"
			b0=$(stat_bytes)
			for size in $BENCH_SIZES; do
				if [[ $server == smbd ]]; then
					r=$(smb_rate "b$size" $((size > 65536 ? 40 : 200)))
				else
					r=$(http_rate "b$size")
				fi
				say "bench,$(uname -r),$server,$size,$mode,$round,$r"
			done
			moved=$(($(stat_bytes) - b0))
			stop_server
			if [[ $mode == preload ]]; then
				((moved > 0)) || fail "preload round $round: the module sent nothing"
			else
				((moved == 0)) || fail "plain round $round: the module sent $moved bytes"
			fi
		done
	done
	say "result: $server throughput measured, $BENCH_ROUNDS rounds of ${BENCH_SECONDS}s cells"
}

# tests/host/preload with the module loaded: its contract cases (every
# call through the preload against the raw system call) now go to the
# module first, and its log must say path=module.
case_contract() {
	local bytes0
	bytes0=$(stat_bytes)
	(cd /tmp && STABLESEND_EXPECT_PATH=module TMPDIR=/tmp /int/preload-contract.bin) ||
		fail "tests/host/preload failed with the module loaded"
	say "result: preload-contract $(uname -r): module bytes +$(($(stat_bytes) - bytes0))"
	(($(stat_bytes) > bytes0)) || fail "the module sent nothing"
}

main() {
	local name=$1
	case $name in
	int-setup) setup ;;
	preload-contract) case_contract ;;
	*-control) case_control "${name%-control}" ;;
	*-preload) case_preload "${name%-preload}" ;;
	*-nomodule) case_nomodule "${name%-nomodule}" ;;
	nginx-stalled) case_stalled ;;
	*-bench) case_bench "${name%-bench}" ;;
	*) fail "unknown test $name" ;;
	esac
}

main "$@"
