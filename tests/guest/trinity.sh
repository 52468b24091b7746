#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Debian's trinity aimed at /dev/stablesend: its only file fds are opens of
# the device (-V; no sockets, pipes, memfds...), and it calls ioctl, read,
# write, poll, mmap, close and friends with random arguments, as user
# nobody (-X), in its own directory, two children, a fixed number of
# syscalls.  Passes when trinity finishes its budget in time, saw no
# taint (the harness fails any splat anyway), and afterwards the module
# holds no request, byte, pool page or context.
# TRINITY_SEED=N reproduces a run; make fuzz multiplies the budget.
# test-timeout: 240
# host-bins: /usr/bin/trinity
set -eu
scale=1
calls=$((500 * scale))
limit=$((150 * scale * ${STABLESEND_TIMEOUT_SCALE:-1}))	# debug kernel: slower
seed=${TRINITY_SEED:-$(($(date +%s) % 100000))}
stats=/sys/module/stablesend/stats

command -v trinity >/dev/null || { echo "trinity is not in the initramfs (host package trinity?)"; exit 77; }
[ -c /dev/stablesend ] || { echo "no /dev/stablesend"; exit 77; }

# -X switches to nobody: the guest has no user database of its own.
grep -q '^nobody:' /etc/passwd 2>/dev/null ||
	echo 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >>/etc/passwd
grep -q '^nogroup:' /etc/group 2>/dev/null || echo 'nogroup:x:65534:' >>/etc/group
dir=/tmp/trinity.$$
mkdir -p "$dir"
chmod 1777 "$dir"
cd "$dir"

fail=0
# check: judge the last phase (rc, ran, trinity.log)
check() {
	if [ "$rc" = 124 ] || [ "$rc" = 143 ]; then	# busybox: 128 + SIGTERM
		echo "FAIL: trinity did not finish $calls syscalls in $limit s; its last lines:"
		tail -n 20 trinity.log
		fail=1
	elif grep -qiE 'became tainted|Detected kernel tainting' trinity.log; then
		grep -iE 'taint' trinity.log
		echo "FAIL: the kernel became tainted while trinity ran"
		fail=1
	elif [ -z "$ran" ]; then
		tail -n 30 trinity.log
		# Not a skip: whatever stopped it (no fds, no user) is ours to fix.
		echo "FAIL: trinity exited ($rc) without running its syscalls"
		fail=1
	fi
}

# ioctls 32|64: ioctl calls trinity attempted in that ABI (its --stats)
ioctls() {
	awk -v abi="$1bit:" '/^(32|64)bit:/ { in_abi = ($1 == abi); next }
		in_abi && /^ioctl: \(attempted:/ { sub(/.*attempted:/, ""); n += $0 + 0 }
		END { print n + 0 }' trinity.log
}

# phase NAME SYSCALL...: $calls random calls of those on device fds
phase() {
	name=$1
	shift
	echo "trinity $name: seed $seed, $calls syscalls (reproduce: TRINITY_SEED=$seed)"
	t0=$(date +%s)
	rc=0
	timeout "$limit" trinity -X -q -s "$seed" -N "$calls" -C 2 -l off --stats \
		-V /dev/stablesend \
		--disable-fds=sockets,pipes,perf,epoll,eventfd,timerfd,testfile,memfd,drm \
		"$@" >trinity.log 2>&1 || rc=$?
	t=$(($(date +%s) - t0))
	grep -A 200 -E '^(32|64)bit:' trinity.log | grep -vE '^\[child' || true
	ran=$(sed -n 's/.*Ran \([0-9]*\) syscalls.*/\1/p' trinity.log | tail -n1)
	echo "trinity $name: exit status $rc after $t s, ${ran:-no} syscalls run"
	# What reached the device's ioctl (few: see the phase below).
	echo "trinity: $(ioctls 64) ioctls (64-bit), $(ioctls 32) (32-bit)"
	check
}

# Not ioctl alone: this trinity's children die after each ioctl (its other
# fd providers, bpf, fanotify, inotify, userfaultfd, stay on), so that
# phase never finishes; fuzz.c covers the ioctls.
phase mix -c ioctl -c read -c readv -c write -c poll -c ppoll -c select \
	-c mmap -c fcntl -c dup -c lseek -c close

# Every fd is closed now: everything the module held must go.
i=0
while [ $i -lt 300 ]; do
	busy=0
	for s in requests_in_flight bytes_in_flight pool_bytes contexts; do
		[ "$(cat $stats/$s)" = 0 ] || busy=1
	done
	[ $busy = 0 ] && break
	usleep 100000
	i=$((i + 1))
done
for s in requests_in_flight bytes_in_flight pool_bytes contexts; do
	v=$(cat $stats/$s)
	echo "$s $v"
	[ "$v" = 0 ] || { echo "FAIL: $s is $v after trinity exited"; fail=1; }
done
cd /tmp
rm -rf "$dir"
exit $fail
