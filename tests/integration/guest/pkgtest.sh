#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# pkgtest.sh (in a Debian guest booted with systemd, run by
# stablesend-pkgtest.service from the data disk, /srv/pkgtest): one stage
# of the package install test per boot, then power off.  Verdicts
# ("PASS|FAIL name[: reason]") and what each test saw ("  | ...") go to
# standard output (the second serial port).  /srv/pkgtest/config has
# BASE_KVER (the kernel of the first boots), EXTRA_KVER and EXTRA_SUITE
# (the backports kernel installed in the second), VERSION (the package).
#
#   install   apt install the four packages: DKMS builds the module, the
#             postinst loads it, udev gives /dev/stablesend its group
#   boot      after a reboot: loaded at boot, device mode and group,
#             "stablesend status", a program built with pkg-config against
#             libstablesend-dev sends through the module as nobody, the
#             admin's one-line 0660 policy; then the backports kernel and
#             headers: DKMS builds the module for it
#   extra     booted on that kernel: the module loads, the program (built
#             again: /tmp does not survive a boot) works;
#             apt purge leaves no module, source, rule or config
set -u
D=/srv/pkgtest
# shellcheck source=/dev/null
. $D/config
STATE=/var/lib/stablesend-pkgtest
mkdir -p $STATE
stage=$(cat $STATE/stage 2>/dev/null || echo install)
MARK="stablesend-pkgtest: stage $stage"
echo "$MARK" >/dev/kmsg

say() { printf '  | %s\n' "$@"; }
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
# t NAME CMD...: CMD's output is shown; its status is the verdict.
t() {
	local name=$1 out rc
	shift
	out=$("$@" 2>&1)
	rc=$?
	[[ -n $out ]] && printf '%s\n' "$out" | sed 's/^/  | /'
	if ((rc)); then fail "$name" "exit status $rc"; else pass "$name"; fi
}

next() {
	echo "$1" >$STATE/stage
	sync
}

splats() {
	dmesg | sed -n "/$MARK/,\$p" |
		grep -E 'WARNING:|BUG:|Oops|refcount_t|leak|KASAN|UBSAN|Call Trace' || true
}

device_ok() { # MODE: /dev/stablesend is a char device root:stablesend MODE
	local want="$1 root stablesend" got
	udevadm settle
	[[ -c /dev/stablesend ]] || { echo "no /dev/stablesend"; return 1; }
	got=$(stat -c '%a %U %G' /dev/stablesend)
	echo "/dev/stablesend: $got (want $want)"
	[[ $got == "$want" ]]
}

loaded_ok() {
	[[ -d /sys/module/stablesend ]] || { echo "module not loaded on $(uname -r)"; return 1; }
	echo "loaded on $(uname -r), version $(cat /sys/module/stablesend/version)"
	[[ $(cat /sys/module/stablesend/version) == "$VERSION" ]]
}

dkms_ok() { # KVER: DKMS built and installed the module for KVER
	local st
	st=$(dkms status stablesend 2>&1)
	echo "$st"
	[[ $st == *"stablesend/$VERSION, $1, x86_64: installed"* ]] &&
		modinfo -k "$1" -F version stablesend | grep -qx "$VERSION"
}

status_ok() { # "stablesend status", as root and as nobody
	local out
	out=$(stablesend status 2>&1) || { echo "$out"; return 1; }
	echo "$out" | head -n 12
	grep -q "^library: libstablesend $VERSION" <<<"$out" || { echo "status does not name library $VERSION"; return 1; }
	grep -q '^module: loaded' <<<"$out" || { echo "status does not show the module loaded"; return 1; }
	setpriv --reuid=65534 --regid=65534 --clear-groups stablesend status >/dev/null
}

prog_as() { # SETPRIV-ARGS...: the pkg-config program as that user
	(cd /tmp && setpriv "$@" /tmp/pkgprog)
}

prog_ok() {
	# shellcheck disable=SC2046 # the flags are words
	cc -Wall -Werror -o /tmp/pkgprog $D/pkgprog.c $(pkg-config --cflags --libs libstablesend) ||
		return 1
	echo "built with: $(pkg-config --cflags --libs libstablesend)"
	prog_as --reuid=65534 --regid=65534 --clear-groups
}

policy_ok() { # the admin's one line: 0660, group stablesend; then undone
	local gid rule=/etc/udev/rules.d/60-stablesend-dkms.rules rc=0
	gid=$(getent group stablesend | cut -d: -f3)
	[[ -n $gid ]] || { echo "no group stablesend"; return 1; }
	sed 's/GROUP="stablesend"$/GROUP="stablesend", MODE="0660"/' \
		/usr/lib/udev/rules.d/60-stablesend-dkms.rules >$rule
	grep -q 'MODE="0660"' $rule || { echo "the rule did not take the one-line change"; return 1; }
	udevadm control --reload
	udevadm trigger --action=add --sysname-match=stablesend
	device_ok 660 || rc=1
	if prog_as --reuid=65534 --regid=65534 --clear-groups 2>&1; then
		echo "nobody outside the group could still send through the module"
		rc=1
	fi
	prog_as --reuid=65534 --regid=65534 --groups="$gid" || rc=1
	rm -f $rule
	udevadm control --reload
	udevadm trigger --action=add --sysname-match=stablesend
	device_ok 666 || rc=1
	return $rc
}

extra_install() {
	# An initramfs with the modules this machine needs, not most of them:
	# minutes less under TCG, and nothing this test looks at.
	echo MODULES=dep >/etc/initramfs-tools/conf.d/stablesend-pkgtest
	# What the image downloaded: the meta packages, as an admin would.
	apt-get install -y -q --no-install-recommends -t "$EXTRA_SUITE" \
		linux-image-amd64 linux-headers-amd64 || return 1
	dkms_ok "$EXTRA_KVER" || return 1
	mkdir -p $D/boot
	cp "/boot/vmlinuz-$EXTRA_KVER" "/boot/initrd.img-$EXTRA_KVER" $D/boot/
}

purge_ok() {
	local files rc=0 f
	files=$(dpkg -L stablesend-dkms stablesend libstablesend0 libstablesend-dev |
		grep -v -e '^/usr/share/doc' -e '^/\.$' | sort -u)
	apt-get purge -y -q stablesend-dkms stablesend libstablesend-dev libstablesend0 || return 1
	for f in $files; do
		[[ -d $f ]] && continue # shared folders (and /lib -> usr/lib) stay
		[[ -e $f || -L $f ]] && { echo "left behind: $f"; rc=1; }
	done
	f=$(find /lib/modules /usr/lib/modules -name 'stablesend.ko*' 2>/dev/null)
	[[ -z $f ]] || { echo "module files left: $f"; rc=1; }
	[[ ! -e /usr/src/stablesend-$VERSION ]] || { echo "/usr/src/stablesend-$VERSION left"; rc=1; }
	[[ -z $(dkms status stablesend 2>/dev/null) ]] || { echo "dkms still knows stablesend"; rc=1; }
	echo "purged: $(echo "$files" | wc -l) packaged paths gone"
	return $rc
}

echo "stage $stage on $(uname -r), Debian $(cat /etc/debian_version)"
case $stage in
install)
	debs=()
	for f in "$D"/debs/*.deb; do [[ $f == *-dbgsym_* ]] || debs+=("$f"); done
	t install apt-get install -y -q "${debs[@]}"
	t install-dkms dkms_ok "$BASE_KVER"
	t install-loaded loaded_ok
	t install-device device_ok 666
	next boot
	;;
boot)
	t boot-loaded loaded_ok
	t boot-device device_ok 666
	t boot-status status_ok
	t boot-pkgconfig-program prog_ok
	t boot-policy-0660 policy_ok
	t extra-kernel-dkms extra_install
	next extra
	;;
extra)
	[[ $(uname -r) == "$EXTRA_KVER" ]] || fail extra-booted "running $(uname -r), not $EXTRA_KVER"
	t extra-loaded loaded_ok
	t extra-device device_ok 666
	t extra-program prog_ok
	t purge purge_ok
	next "done"
	;;
*)
	fail stage "unknown stage $stage"
	;;
esac
s=$(splats)
if [[ -n $s ]]; then
	fail "dmesg-$stage" "the kernel log has a splat"
	say "$s"
else
	pass "dmesg-$stage"
fi
echo "END $stage"
sync
systemctl --no-block poweroff
