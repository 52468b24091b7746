# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash disable=SC1007,SC2013,SC2016,SC2034
#
# lib.sh: the functions behind tests/run-matrix and tests/vm.
#
# Pipeline for one kernel KEY (6.1, 6.12, newest):
#   ss_resolve    newest linux-image package of the series (apt, at run time)
#   ss_fetch      download and extract it into $SS_CACHE/kernels/KVER
#   ss_headers    linux-headers-KVER: host apt (Debian 12) or the trixie root
#   ss_dkms_build private DKMS tree: add + build; the .ko booted is DKMS's
#   ss_stage_base initramfs tree: init, busybox, kernel modules, our module
#   ss_boot       QEMU with three serial ports; a watchdog on the verdicts
#   ss_verdicts   one "PASS|FAIL|SKIP name reason" line per expected test
#
# Everything downloaded or built lives under $SS_CACHE, outside the repo:
#   apt/            host.updated stamp; trixie/ private apt config and lists
#   debs/           downloaded kernel packages
#   kernels/KVER/   extracted kernel packages (boot/vmlinuz-KVER, modules)
#   roots/trixie/   debootstrap'd build root for the newest kernel
#   bin/            host helpers (kvm-probe)
#   accel           cached KVM/TCG decision (per host boot)
#   work/           private DKMS tree (dkms/, src/) and run directories
#   lock            serialises apt, DKMS and root work between processes

SS_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SS_HARNESS=$SS_REPO/tests/harness
SS_CACHE=${STABLESEND_CACHE:-/var/cache/stablesend}
SS_WORK=$SS_CACHE/work
SS_ROOT=$SS_CACHE/roots/trixie
SS_TAPT=$SS_CACHE/apt/trixie
SS_GUEST_MODULES=${STABLESEND_GUEST_MODULES:-veth tls}
# kTLS's AES-GCM needs these where they are modules; which ones exist
# differs per kernel (7.3 has no ghash-generic), so each is optional.
# virtio_pci/virtio_net drive the guest's two NICs (modules on 6.1).
# brd gives sendfile-module a block device (/dev/ram0) to read.
SS_GUEST_OPTIONAL=${STABLESEND_GUEST_OPTIONAL:-gcm ghash-generic ctr virtio_pci virtio_net brd}
# More QEMU arguments for the next boot (tests/integration: its root image).
SS_QEMU_EXTRA=()
SS_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
SS_HOST_PKGS="qemu-system-x86 dkms busybox-static debootstrap cpio kmod gcc
	libc6-dev make xz-utils zstd gzip debian-archive-keyring util-linux iproute2 gcc-multilib
	trinity apparmor"
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
SS_APT_WAIT=(-o DPkg::Lock::Timeout=600) # another apt/dpkg may be running
# errexit inside $(...) too: a failing step must never run on with empty values.
shopt -s inherit_errexit

ss_say() { printf '%s\n' "$*" >&2; }
ss_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# --- cleanup: one EXIT trap per shell, running registered commands LIFO --
SS_CLEANUP=() SS_CLEANUP_PID=
ss_cleanup() {
	local i
	for ((i = ${#SS_CLEANUP[@]} - 1; i >= 0; i--)); do
		eval "${SS_CLEANUP[i]}" >/dev/null 2>&1 || true
	done
	SS_CLEANUP=()
}
ss_on_exit() {
	# A subshell starts its own list: never run the parent's cleanups.
	[[ $SS_CLEANUP_PID == "$BASHPID" ]] || SS_CLEANUP=() SS_CLEANUP_PID=$BASHPID
	SS_CLEANUP+=("$1")
	trap ss_cleanup EXIT
	trap 'exit 130' INT TERM HUP
}
ss_pop_exit() { unset 'SS_CLEANUP[-1]'; }

ss_kill_tree() { # PID and its descendants, by id
	local c
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do ss_kill_tree "$c"; done
	kill "$1" 2>/dev/null || true
}

# Run "$@" in a subshell with errexit, output to LOG; status in SS_RC.
# Call it as a plain statement: in an if/||/&& context bash ignores set -e
# inside, so a failing step would not stop the subshell.
ss_run_logged() {
	local log=$1
	shift
	set +e
	(
		set -e
		"$@"
	) >"$log" 2>&1
	SS_RC=$?
	set -e
}

# --- host packages and root -----------------------------------------------
ss_need_root() {
	[[ $EUID -eq 0 ]] || ss_die "$1 needs root (apt, DKMS, mounts); run it with sudo"
}

# Install what the harness needs on a fresh Debian 12; without root, say how.
ss_need_pkgs() {
	local p missing=()
	# shellcheck disable=SC2068
	for p in $@; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	((${#missing[@]})) || return 0
	if [[ $EUID -ne 0 ]]; then
		ss_say "missing packages; as root run:"
		ss_say "  apt-get install -y --no-install-recommends ${missing[*]}"
		exit 1
	fi
	ss_say "installing ${missing[*]}"
	apt-get install "${SS_APT_WAIT[@]}" -y --no-install-recommends "${missing[@]}" >&2 || {
		apt-get update "${SS_APT_WAIT[@]}" >&2 &&
			apt-get install "${SS_APT_WAIT[@]}" -y --no-install-recommends "${missing[@]}" >&2
	}
}

# --- apt --------------------------------------------------------------------
# Debian URIs from the host's apt configuration; the mirror is never written
# into this repository.  $1 = debian or debian-security.
ss_mirror() {
	local want=$1 uri
	for uri in $( { awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' \
			/etc/apt/sources.list.d/*.sources || true
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ "://") { print $i; break } }' \
			/etc/apt/sources.list /etc/apt/sources.list.d/*.list || true
		} 2>/dev/null); do
		[[ ${uri%/} == */"$want" ]] && { echo "${uri%/}"; return 0; }
	done
	[[ $want == debian-security ]] && return 0
	ss_die "no Debian mirror (a URI ending in /debian) in /etc/apt/sources.list{,.d}"
}

ss_stale() { # $1 = stamp file: true when missing or older than a day
	[[ ! -e $1 || -n $(find "$1" -mmin +1440) ]]
}
ss_forget_apt() { # refresh every apt list (once) in this run
	rm -f "$SS_CACHE/apt/host.updated" "$SS_TAPT/updated" "$SS_ROOT/.apt-updated"
}
if [[ ${STABLESEND_REFRESH:-0} == 1 ]]; then
	ss_forget_apt
	export STABLESEND_REFRESH=0
fi

# bookworm-backports on the host, pinned so nothing is ever taken from it
# unless asked by name; apt lists refreshed at most once a day.
ss_host_apt() {
	local src=/etc/apt/sources.list.d/stablesend-bookworm-backports.sources
	local pin=/etc/apt/preferences.d/stablesend-bookworm-backports
	local stamp=$SS_CACHE/apt/host.updated want
	grep -q 'VERSION_CODENAME=bookworm' /etc/os-release ||
		ss_die "the 6.1 and 6.12 kernels are built on a Debian 12 (bookworm) host"
	printf 'Package: *\nPin: release n=bookworm-backports\nPin-Priority: 1\n' >"$pin.new"
	mv "$pin.new" "$pin"
	if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ ||
		[[ -e $src ]]; then
		want=$(printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' \
			"$(ss_mirror debian)" "$SS_KEYRING")
		[[ -e $src && $(<"$src") == "$want" ]] || { echo "$want" >"$src"; rm -f "$stamp"; }
	fi
	if ss_stale "$stamp"; then
		ss_say "apt-get update (host)"
		apt-get update "${SS_APT_WAIT[@]}" -qq >&2 || ss_die "apt-get update failed"
		mkdir -p "${stamp%/*}" && touch "$stamp"
	fi
}

# Private apt configuration for trixie-backports: nothing added to the host.
SS_TAPT_OPTS=(-o "Dir::Etc::SourceList=$SS_TAPT/sources.list"
	-o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$SS_TAPT/lists"
	-o "Dir::Cache=$SS_TAPT/cache" -o Dir::State::Status=/dev/null
	-o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null)
ss_trixie_apt() {
	local want
	mkdir -p "$SS_TAPT/lists/partial" "$SS_TAPT/cache/archives/partial"
	want="deb [signed-by=$SS_KEYRING] $(ss_mirror debian) trixie-backports main"
	[[ -e $SS_TAPT/sources.list && $(<"$SS_TAPT/sources.list") == "$want" ]] ||
		{ echo "$want" >"$SS_TAPT/sources.list"; rm -f "$SS_TAPT/updated"; }
	if ss_stale "$SS_TAPT/updated"; then
		ss_say "apt-get update (private trixie-backports)"
		apt-get "${SS_TAPT_OPTS[@]}" update -qq >&2 || ss_die "apt-get update (trixie-backports) failed"
		touch "$SS_TAPT/updated"
	fi
}

ss_apt_opts() { # apt options for KEY
	[[ $1 == newest ]] && printf '%s\n' "${SS_TAPT_OPTS[@]}"
	return 0
}

# The kernel series of a debug key: "debug" is 6.12's.
ss_debug_series() {
	if [[ $1 == debug-6.1 ]]; then echo 6.1; else echo 6.12; fi
}

# Newest linux-image of a series: prints "KVER VERSION".
ss_resolve() {
	local key=$1 re opts best= bestv= pkg ver
	case $key in
	6.1) re='^linux-image-6\.1\.0-[0-9]+-amd64$' ;;
	6.12) re='^linux-image-6\.12\.[0-9]+\+[a-z0-9]+-amd64$' ;;
	newest) re='^linux-image-[0-9]+\.[0-9]+\.[0-9]+\+[a-z0-9]+-amd64$' ;;
	debug | debug-6.1) "$SS_HARNESS/debug-kernel" --series "$(ss_debug_series "$key")" --release; return ;; # built, not fetched
	*) ss_die "unknown kernel key '$key' (6.1, 6.12, newest, debug or debug-6.1)" ;;
	esac
	mapfile -t opts < <(ss_apt_opts "$key")
	if [[ $key == newest ]]; then ss_trixie_apt; else ss_host_apt; fi
	while read -r pkg ver; do
		if [[ -z $bestv ]] || dpkg --compare-versions "$ver" gt "$bestv"; then
			best=$pkg bestv=$ver
		fi
	done < <(apt-cache "${opts[@]}" pkgnames linux-image- | grep -E "$re" |
		xargs -r apt-cache "${opts[@]}" madison |
		awk -F' *[|] *' '$3 ~ /Packages/ { print $1, $2 }')
	[[ -n $best ]] || ss_die "no linux-image package for kernel '$key' in apt"
	echo "${best#linux-image-} $bestv"
}

# Download linux-image-KVER (and, for split packages as in 7.x, its
# linux-{base,binary,modules}-KVER) and extract it; reused while current,
# the key's previous kernel is removed.
ss_fetch() {
	local key=$1 kver=$2 ver=$3 dir=$SS_CACHE/kernels/$2 opts pkgs p deb old
	[[ $key == debug* ]] && return 0 # built by ss_prepare
	if [[ -e $dir/.version && $(<"$dir/.version") == "$ver" ]]; then
		echo "$kver" >"$SS_CACHE/kernels/.$key"
		return 0
	fi
	old=$(cat "$SS_CACHE/kernels/.$key" 2>/dev/null || true)
	if [[ -n $old && $old != "$kver" ]]; then
		rm -rf "${SS_CACHE:?}/kernels/$old"
		find "$SS_CACHE/debs" -name "*-${old}_*.deb" -delete 2>/dev/null || true
	fi
	mapfile -t opts < <(ss_apt_opts "$key")
	pkgs=("linux-image-$kver")
	for p in $(apt-cache "${opts[@]}" show "linux-image-$kver=$ver" |
		sed -n 's/^Depends: //p' | sed 's/[,|]/\n/g' | awk '{ print $1 }'); do
		[[ $p == *-"$kver" ]] && pkgs+=("$p")
	done
	mkdir -p "$SS_CACHE/debs"
	ss_say "downloading ${pkgs[*]} ($ver)"
	for p in "${pkgs[@]}"; do
		deb=$SS_CACHE/debs/${p}_${ver//:/%3a}_amd64.deb
		[[ -s $deb ]] && continue
		find "$SS_CACHE/debs" -name "${p}_*.deb" -delete
		(cd "$SS_CACHE/debs" && apt-get "${opts[@]}" -o APT::Sandbox::User=root download -q "$p=$ver" >&2) ||
			ss_die "apt-get download $p=$ver failed"
	done
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	for p in "${pkgs[@]}"; do
		dpkg-deb -x "$SS_CACHE/debs/${p}_${ver//:/%3a}_amd64.deb" "$dir.tmp"
	done
	# kmod 30 (bookworm) looks in lib/modules; trixie ships usr/lib/modules.
	[[ -d $dir.tmp/lib/modules/$kver ]] || ln -s usr/lib "$dir.tmp/lib"
	# Split packages (7.x) keep the image next to the modules.
	if [[ ! -e $dir.tmp/boot/vmlinuz-$kver && -e $dir.tmp/lib/modules/$kver/vmlinuz ]]; then
		mkdir -p "$dir.tmp/boot"
		ln -s "../lib/modules/$kver/vmlinuz" "$dir.tmp/boot/vmlinuz-$kver"
	fi
	[[ -e $dir.tmp/boot/vmlinuz-$kver ]] || ss_die "no vmlinuz for $kver in ${pkgs[*]}"
	depmod -b "$dir.tmp" "$kver"
	echo "$ver" >"$dir.tmp/.version"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	echo "$kver" >"$SS_CACHE/kernels/.$key"
}

# --- trixie build root (newest kernel) --------------------------------------
ss_root_ok() {
	local p
	for p in gcc make libc6-dev kmod dkms; do
		chroot "$1" dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
			grep -q 'install ok installed' || return 1
	done
}

# Create (or adopt an existing trixie.tmp of) the debootstrap'd root.
ss_root_create() {
	local tmp=$SS_ROOT.tmp
	[[ -e $SS_ROOT/.complete ]] && return 0
	if ! [[ -d $tmp ]] || ! ss_root_ok "$tmp"; then
		rm -rf "$tmp"
		ss_say "debootstrap trixie into $tmp (several minutes)"
		debootstrap --variant=minbase --include=gcc,make,libc6-dev,kmod,dkms,ca-certificates \
			trixie "$tmp" "$(ss_mirror debian)" >"$SS_CACHE/debootstrap.log" 2>&1 ||
			{ tail -n 30 "$SS_CACHE/debootstrap.log" >&2; ss_die "debootstrap failed"; }
	fi
	rm -rf "$SS_ROOT"
	mv "$tmp" "$SS_ROOT"
	touch "$SS_ROOT/.complete"
}

# Run a command in the root with /proc (objtool reads it) and the work tree
# mounted at the same path as on the host; always unmounted (lazily when
# busy: dkms leaves its progress "sleep" running in the build tree).
ss_chroot() (
	local m mounts=("$SS_ROOT/proc" "$SS_ROOT$SS_WORK")
	ss_on_exit 'for m in "${mounts[@]}"; do mountpoint -q "$m" && { umount "$m" || umount -l "$m"; }; done'
	mkdir -p "$SS_ROOT$SS_WORK"
	mountpoint -q "$SS_ROOT/proc" || mount -t proc proc "$SS_ROOT/proc"
	mountpoint -q "$SS_ROOT$SS_WORK" || mount --bind "$SS_WORK" "$SS_ROOT$SS_WORK"
	cp /etc/resolv.conf "$SS_ROOT/etc/resolv.conf" 2>/dev/null || true
	chroot "$SS_ROOT" /usr/bin/env PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"
)

ss_root_apt() {
	local want sec
	want=$(printf 'deb %s %s main\n' "$(ss_mirror debian)" trixie "$(ss_mirror debian)" trixie-updates \
		"$(ss_mirror debian)" trixie-backports)
	sec=$(ss_mirror debian-security)
	[[ -n $sec ]] && want+=$'\n'"deb $sec trixie-security main"
	[[ $(<"$SS_ROOT/etc/apt/sources.list") == "$want" ]] ||
		{ echo "$want" >"$SS_ROOT/etc/apt/sources.list"; rm -f "$SS_ROOT/.apt-updated"; }
	if ss_stale "$SS_ROOT/.apt-updated"; then
		ss_say "apt-get update (trixie root)"
		ss_chroot apt-get update -qq >&2 || ss_die "apt-get update in the trixie root failed"
		touch "$SS_ROOT/.apt-updated"
	fi
}

# --- headers ----------------------------------------------------------------
ss_headers() {
	local key=$1 kver=$2 ver=$3 pkg=linux-headers-$2 t=() q=(dpkg-query)
	[[ $key == debug* ]] && return 0 # the built tree is the headers
	[[ $key == newest ]] && q=(chroot "$SS_ROOT" dpkg-query)
	[[ $("${q[@]}" -W -f='${Version} ${Status}' "$pkg" 2>/dev/null) == "$ver install ok installed" ]] &&
		return 0
	if [[ $key == newest ]]; then
		ss_say "installing $pkg $ver in the trixie root"
		ss_root_apt
		local install=(apt-get install -y -q --no-install-recommends -t trixie-backports "$pkg=$ver")
		# The root's lists may be older than the private ones: refresh once.
		ss_chroot "${install[@]}" >&2 || {
			rm -f "$SS_ROOT/.apt-updated"
			ss_root_apt
			ss_chroot "${install[@]}" >&2
		} || ss_die "cannot install $pkg=$ver in the trixie root"
	else
		ss_say "installing $pkg $ver"
		apt-cache madison "$pkg" | grep "$ver.*bookworm-backports" >/dev/null && t=(-t bookworm-backports)
		apt-get install "${SS_APT_WAIT[@]}" -y -q --no-install-recommends "${t[@]}" "$pkg=$ver" >&2 ||
			ss_die "cannot install $pkg=$ver"
	fi
}

# --- DKMS -------------------------------------------------------------------
ss_module_version() {
	sed -n 's/^PACKAGE_VERSION="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$SS_REPO/dkms.conf"
}

# Build with a private DKMS tree (never the host's /var/lib/dkms) from a
# fresh copy of dkms.conf + module/ + uapi/; copy the module DKMS built to
# $4 (decompressed).  On failure print make.log.
ss_dkms_build() {
	local key=$1 kver=$2 out=$3 v d ko run=()
	[[ $key == debug* ]] && { ss_debug_module_build "$kver" "$out"; return; }
	v=$(ss_module_version)
	[[ -n $v ]] || ss_die "no PACKAGE_VERSION in dkms.conf"
	[[ -d $SS_REPO/module ]] || ss_die "module/ does not exist yet"
	[[ $key == newest ]] && run=(ss_chroot)
	rm -rf "$SS_WORK/src/stablesend-$v" "$SS_WORK/dkms/stablesend" # = dkms remove --all
	mkdir -p "$SS_WORK/src/stablesend-$v" "$SS_WORK/dkms"
	cp -RL --preserve=mode,timestamps "$SS_REPO/dkms.conf" "$SS_REPO/module" "$SS_REPO/uapi" \
		"$SS_WORK/src/stablesend-$v/"
	# Sign with a key of the private tree, not /var/lib/dkms/mok.*.
	local dkms=(env "mok_signing_key=$SS_WORK/mok.key" "mok_certificate=$SS_WORK/mok.pub"
		dkms --dkmstree "$SS_WORK/dkms" --sourcetree "$SS_WORK/src")
	ss_say "dkms build stablesend/$v for $kver"
	"${run[@]}" "${dkms[@]}" add -m stablesend -v "$v" >&2 || ss_die "dkms add failed"
	if ! "${run[@]}" "${dkms[@]}" build -m stablesend -v "$v" -k "$kver" >&2; then
		d=$SS_WORK/dkms/stablesend/$v
		for ko in "$d/build/make.log" "$d/$kver/x86_64/log/make.log"; do
			[[ -e $ko ]] && { ss_say "---- $ko"; cat "$ko" >&2; }
		done
		ss_die "DKMS build of stablesend $v failed for $kver"
	fi
	for ko in "$SS_WORK/dkms/stablesend/$v/$kver/x86_64/module/stablesend.ko"{,.xz,.zst}; do
		[[ -e $ko ]] && break
	done
	[[ -e $ko ]] || ss_die "DKMS reported success but built no stablesend.ko"
	ss_say "module: $ko"
	echo "$ko" >"$out.source"
	ss_unpack_ko "$ko" "$out"
}

# The debug kernel has no /lib/modules/KVER on the host for DKMS: build
# with dkms.conf's own MAKE line (make -C module KDIR=TREE) from a fresh
# copy, against the debug tree (its Module.symvers from "make modules").
ss_debug_module_build() { # KVER OUT
	local tree=$SS_CACHE/kernels/$1/src d=$SS_WORK/src-$1 out=$2
	[[ -s $tree/Module.symvers ]] || ss_die "no built debug tree in $tree"
	rm -rf "$d"
	mkdir -p "$d"
	cp -RL --preserve=mode,timestamps "$SS_REPO/dkms.conf" "$SS_REPO/module" "$SS_REPO/uapi" "$d/"
	ss_say "make -C module KDIR=$tree (debug kernel $1)"
	make -C "$d/module" KDIR="$tree" -j"$(nproc)" >&2 || ss_die "stablesend does not build for the debug kernel $1"
	echo "$d/module/stablesend.ko" >"$out.source"
	cp "$d/module/stablesend.ko" "$out"
}

ss_unpack_ko() {
	case $1 in
	*.xz) xz -dc "$1" >"$2" ;;
	*.zst) zstd -qdc "$1" >"$2" ;;
	*) cp "$1" "$2" ;;
	esac
}

# Everything before the boot: resolve, fetch, headers, DKMS.  Under the
# cache lock; writes KVER, VERSION and stablesend.ko (unless $3 = 0) to $2.
ss_prepare() {
	local key=$1 dir=$2 module=${3:-1} kver ver
	mkdir -p "$SS_CACHE" "$dir"
	# Minutes when cold: under its own lock, not the cache's.
	[[ $key == debug* ]] && "$SS_HARNESS/debug-kernel" --series "$(ss_debug_series "$key")" --build >/dev/null
	exec 9>"$SS_CACHE/lock"
	flock -n 9 || { ss_say "waiting for $SS_CACHE/lock"; flock 9; }
	read -r kver ver < <(ss_resolve "$key")
	[[ -n $kver ]] || exit 1
	echo "$kver" >"$dir/KVER"
	echo "$ver" >"$dir/VERSION"
	ss_say "$key: linux-image-$kver $ver"
	ss_fetch "$key" "$kver" "$ver"
	if [[ $module == 1 ]]; then
		[[ $key == newest ]] && ss_root_create
		ss_headers "$key" "$kver" "$ver"
		ss_dkms_build "$key" "$kver" "$dir/stablesend.ko"
	fi
	exec 9>&-
}

# --- initramfs --------------------------------------------------------------
ss_build_init() { # static PID 1, rebuilt when init.c changes
	local out=$SS_CACHE/bin/init
	mkdir -p "$SS_CACHE/bin"
	if ! [[ $out -nt $SS_HARNESS/init.c ]]; then
		gcc -static -O2 -Wall -o "$out.$$" "$SS_HARNESS/init.c" ||
			ss_die "cannot build tests/harness/init.c"
		mv "$out.$$" "$out"
	fi
	echo "$out"
}

# ss_stage_base DIR KVER MODE [KO [BIN...]]: init, busybox, the kernel's own
# modules (veth, tls and dependencies, decompressed), stablesend.ko if given,
# host programs BIN with their shared libraries and dynamic loader (ldd).
ss_stage_base() {
	local dir=${1:?} kver=$2 mode=$3 ko=${4:-} kdir=$SS_CACHE/kernels/$2 m n
	mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,etc/harness,lib/modules/kernel,tests,host,proc,sys,dev,tmp,run}
	cp "$(ss_build_init)" "$dir/init"
	echo "$mode" >"$dir/etc/harness/mode"
	[[ $mode == probe ]] && return 0
	cp /bin/busybox "$dir/bin/busybox"
	for m in $(/bin/busybox --list-full); do
		[[ -e $dir/$m ]] || ln -s /bin/busybox "$dir/$m"
	done
	: >"$dir/etc/harness/modules"
	# shellcheck disable=SC2086
	modprobe -C /dev/null -d "$kdir" -S "$kver" --show-depends -a $SS_GUEST_MODULES >"$dir/deps" ||
		ss_die "modprobe --show-depends $SS_GUEST_MODULES failed for $kver"
	for m in $SS_GUEST_OPTIONAL; do
		modprobe -C /dev/null -d "$kdir" -S "$kver" --show-depends "$m" >>"$dir/deps" 2>/dev/null || true
	done
	for m in $(awk '$1 == "insmod" { print $2 }' "$dir/deps"); do
		n=$(basename "$m") && n=${n%%.ko*}.ko
		grep -qx "/lib/modules/kernel/$n" "$dir/etc/harness/modules" && continue
		ss_unpack_ko "$m" "$dir/lib/modules/kernel/$n"
		echo "/lib/modules/kernel/$n" >>"$dir/etc/harness/modules"
	done
	rm -f "$dir/deps"
	[[ -z $ko ]] || cp "$ko" "$dir/lib/modules/stablesend.ko"
	shift $(($# < 4 ? $# : 4))
	for m; do
		[[ -x $m ]] || { ss_say "host program $m not found: not staged"; continue; }
		rm -f "$dir$m" # a busybox link of the same name
		for n in "$m" $(ldd "$m" 2>/dev/null | grep -o '/[^ ]*' || true); do
			[[ -e $dir$n ]] || install -D "$n" "$dir$n"
		done
	done
}

ss_pack() { # DIR OUT: gzip'd newc cpio
	(cd "${1:?}" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 >"$2"
}

# --- QEMU -------------------------------------------------------------------
# KVM only when the probe runs a vCPU AND a real guest reaches init under
# KVM; otherwise TCG.  Cached per host boot; STABLESEND_ACCEL overrides.
ss_accel() { # VMLINUZ
	local id cache=$SS_CACHE/accel probe=$SS_CACHE/bin/kvm-probe w a=tcg
	[[ -n ${STABLESEND_ACCEL:-} ]] && { echo "$STABLESEND_ACCEL"; return; }
	id="$(cat /proc/sys/kernel/random/boot_id) $(qemu-system-x86_64 --version | head -n1)"
	if [[ -e $cache && $(head -n1 "$cache") == "$id" ]]; then
		tail -n1 "$cache"
		return
	fi
	mkdir -p "$SS_CACHE/bin" "$SS_WORK"
	if [[ -w /dev/kvm ]] && gcc -O2 -o "$probe" "$SS_HARNESS/kvm-probe.c" && "$probe"; then
		w=$(mktemp -d "$SS_WORK/kvm-probe.XXXXXX")
		ss_stage_base "$w/root" none probe
		ss_pack "$w/root" "$w/initrd"
		SS_ACCEL=kvm ss_boot "$w" "$1" "$w/initrd" 30 >/dev/null 2>&1
		if grep -q '^BOOT' "$w/results.log"; then
			a=kvm
			ss_say "KVM: a real guest reached init under KVM: using kvm"
		else
			ss_say "KVM: the vCPU probe passed but a real guest did not reach init" \
				"within 30 s ($(head -n1 "$w/qemu.log")): using tcg"
		fi
		rm -rf "$w"
	else
		ss_say "KVM: not usable (no /dev/kvm or KVM_RUN probe failed): using tcg"
	fi
	printf '%s\n%s\n' "$id" "$a" >"$cache"
	echo "$a"
}

# A loaded TCG host can make the early IO-APIC timer check fail and panic
# the guest ("IO-APIC + timer doesn't work!", seen on 6.1 under load);
# the emulated timer is fine, skip the check.  tsc=reliable: the
# clocksource watchdog, seeing TCG's TSC drift against the HPET, marked it
# unstable 105 s into a 7.3.4 run, and switching sched_clock's static key
# at run time patched code another vCPU was running ("Oops: int3" in
# sched_clock_cpu, make check of 27a668c); the TSC stays the clocksource.
SS_BOOT_QUIRKS="no_timer_check tsc=reliable"
# Debug kernel (KASAN, lockdep, kmemleak... under TCG): test timeouts and
# the watchdog are multiplied by this.
SS_DEBUG_SCALE=${STABLESEND_DEBUG_SCALE:-4}

# ss_boot WORK VMLINUZ INITRD BOOT_TIMEOUT [stream]
# Boots with console -> WORK/console.log, verdicts -> WORK/results.log,
# output -> WORK/output.log (streamed to stdout with "stream").  A
# watchdog kills a guest that does not advance: boot timeout first, then
# "RUN name T" allows T + 60 s, any other verdict 120 s until the next.
# SS_KILLED=1 when the watchdog had to kill the guest.
#
# A stock kernel that dies in its own boot, before init runs and so before
# the module is loaded, is booted once more, and the harness says so: TCG
# on a loaded host rarely makes a boot-time code patch trip (seen once on
# 7.3.4: "Oops: int3" in a static-key site at 1.4 s, four guests on two
# cores).  A second death counts, as does everything after "BOOT".  The
# debug kernel gets no second boot: its splats are the detectors' findings.
#
# The guest gets two virtio-net NICs, a real driver's transmit path: tap
# backends (with virtio-net headers, so the NICs offer scatter-gather and
# checksum offload, as on a real host) on a bridge inside a network
# namespace of QEMU's own, so the host's network is never touched.  Only
# STABLESEND_NIC=hub joins them with a QEMU hub instead (no offloads: the
# NIC tests then expect TCP to copy, and say so); a host that cannot make
# taps otherwise gives the guest no NICs, so the tests that need them fail
# rather than flip their expectations silently (STABLESEND_NIC=none does
# the same on purpose).  The guest learns which
# from "ss_nic=tap|hub|none" on its command line.
SS_NIC_SETUP='ip link add ssbr type bridge && ip link set ssbr up &&
	for t in sst0 sst1; do ip tuntap add dev $t mode tap vnet_hdr &&
		ip link set $t master ssbr up || exit 1; done'
ss_nics() { # sets SS_NIC (tap|hub|none), SS_NIC_ARGS, SS_NIC_WRAP
	local i err
	SS_NIC=${STABLESEND_NIC:-tap} SS_NIC_WRAP=() SS_NIC_ARGS=()
	case $SS_NIC in
	tap)
		if [[ ! -c /dev/net/tun ]]; then
			err="no /dev/net/tun"
		elif ! err=$(unshare --net -- sh -c "$SS_NIC_SETUP" 2>&1); then
			err=${err:-"the tap setup failed"}
		else
			err=
		fi
		if [[ -n $err ]]; then
			ss_say "harness: cannot make tap NICs ($err): the guest gets none and the NIC tests fail; STABLESEND_NIC=hub runs them over a QEMU hub without offloads"
			SS_NIC=none
			return 0
		fi
		# shellcheck disable=SC2016
		SS_NIC_WRAP=(unshare --net -- sh -c "$SS_NIC_SETUP"' && exec "$@"' sh)
		;;
	hub) ss_say "harness: STABLESEND_NIC=hub: the guest's NICs have no offloads; the NIC tests expect copies" ;;
	none) ss_say "harness: STABLESEND_NIC=none: the guest gets no NICs (the NIC tests fail)"; return 0 ;;
	*) ss_die "STABLESEND_NIC is '$SS_NIC' (tap, hub or none)" ;;
	esac
	for i in 0 1; do
		if [[ $SS_NIC == tap ]]; then
			SS_NIC_ARGS+=(-netdev "tap,id=n$i,ifname=sst$i,script=no,downscript=no,vhost=off")
		else
			SS_NIC_ARGS+=(-netdev "hubport,id=n$i,hubid=0")
		fi
		SS_NIC_ARGS+=(-device "virtio-net-pci,netdev=n$i,romfile=")
	done
}

ss_boot() {
	local w=$1 splat kept n
	ss_boot_once "$@"
	for n in first second; do
		grep -q '^BOOT' "$w/results.log" && return
		[[ -e ${2%/boot/*}/stablesend-debug ]] && return
		splat=$(tr -d '\r' <"$w/console.log" | grep -m 1 -E 'Kernel panic|BUG:|WARNING:|Oops') || return 0
		kept=$w/console-$n-boot.log
		mv "$w/console.log" "$kept"
		ss_say "harness: the kernel died in its own boot, before init ran ($splat; console kept in $kept); booting it once more"
		ss_boot_once "$@"
	done
}

ss_boot_once() {
	local w=$1 kernel=$2 initrd=$3 deadline=$(($(date +%s) + $4)) stream=${5:-}
	local accel=${SS_ACCEL:-tcg} cpu=max qemu tail= seen=0 line lines
	local smp=${STABLESEND_VM_CPUS:-2} debug= slack=60 finished=0 data
	SS_KILLED=0
	[[ $accel == kvm ]] && cpu=host
	# The debug kernel has no ACPI: plain "-smp 2" would bring up one CPU.
	# Its tests' timeouts are scaled in the guest (init.c), the watchdog's
	# slack here.
	if [[ -e ${kernel%/boot/*}/stablesend-debug ]]; then
		smp=2,sockets=2,cores=1,threads=1 slack=$((60 * SS_DEBUG_SCALE))
		debug=" debug_pagealloc=on kmemleak=on printk.time=1 STABLESEND_DEBUG_KERNEL=1 STABLESEND_TIMEOUT_SCALE=$SS_DEBUG_SCALE"
		# A series' own boot arguments (tests/harness/debug-kernel).
		[[ -s ${kernel%/boot/*}/boot-args ]] && debug+=" $(<"${kernel%/boot/*}/boot-args")"
	fi
	local f
	for f in console results output; do : >"$w/$f.log"; done
	ss_nics
	"${SS_NIC_WRAP[@]}" qemu-system-x86_64 -nographic -nodefaults -no-reboot -machine pc \
		-accel "$accel" -cpu "$cpu" -smp "$smp" -m "${STABLESEND_VM_MEM:-1024}" \
		-kernel "$kernel" -initrd "$initrd" "${SS_NIC_ARGS[@]}" "${SS_QEMU_EXTRA[@]}" \
		-append "console=ttyS0 panic_on_warn=1 oops=panic panic=-1 printk.devkmsg=on ss_nic=$SS_NIC $SS_BOOT_QUIRKS$debug" \
		-serial "file:$w/console.log" -serial "file:$w/results.log" \
		-serial "file:$w/output.log" </dev/null >"$w/qemu.log" 2>&1 &
	qemu=$!
	ss_on_exit "kill $qemu"
	if [[ $stream == stream ]]; then
		tail -n +1 -f --pid="$qemu" "$w/output.log" &
		tail=$!
		ss_on_exit "kill $tail"
	fi
	while kill -0 "$qemu" 2>/dev/null; do
		# Whole lines only: the guest writes the serial port a byte at a
		# time, and a line read half-written ("RUN use" of "RUN
		# userbound 240", make check of d2a4556) is not a verdict.
		data=$(tr -d '\r' <"$w/results.log"; echo .)
		data=${data%.}
		[[ $data == *$'\n' ]] || data=${data%"${data##*$'\n'}"}
		mapfile -t lines < <(printf '%s' "$data")
		while ((seen < ${#lines[@]})); do
			line=${lines[seen++]}
			case $line in
			"RUN "*[0-9]) deadline=$(($(date +%s) + ${line##* } + slack)) ;;
			# Everything is reported: a kernel without ACPI (the debug
			# tier) halts instead of powering off, so stop it ourselves.
			DONE) deadline=$(($(date +%s) + 10)) finished=1 ;;
			*) deadline=$(($(date +%s) + 2 * slack)) ;;
			esac
		done
		if ((finished && $(date +%s) > deadline)); then
			kill "$qemu" 2>/dev/null || true
			break
		fi
		if (($(date +%s) > deadline)); then
			SS_KILLED=1
			kill "$qemu" 2>/dev/null || true
			sleep 1
			kill -9 "$qemu" 2>/dev/null || true
			break
		fi
		sleep 0.5
	done
	wait "$qemu" 2>/dev/null || true
	[[ -z $tail ]] || { wait "$tail" 2>/dev/null || true; ss_pop_exit; }
	ss_pop_exit
	if [[ -s $w/qemu.log ]] && ! grep -q '^BOOT' "$w/results.log"; then
		ss_say "qemu: $(head -c 2000 "$w/qemu.log")"
	fi
}

# ss_verdicts WORK NAME...: one "PASS|FAIL|SKIP name [reason]" per expected
# name, filling in what a dead guest never reported.
ss_verdicts() {
	local w=$1 name v running= done=0
	shift
	tr -d '\r' <"$w/results.log" >"$w/results.txt"
	grep -qx DONE "$w/results.txt" && done=1
	running=$(awk '$1 == "RUN" { r = $2 } $1 ~ /^(PASS|FAIL|SKIP)$/ && $2 == r { r = "" } END { print r }' \
		"$w/results.txt")
	for name in "$@"; do
		v=$(awk -v n="$name" '$1 ~ /^(PASS|FAIL|SKIP)$/ && $2 == n { print; exit }' "$w/results.txt")
		if [[ -n $v ]]; then
			echo "$v"
		elif [[ $name == "$running" ]]; then
			echo "FAIL $name guest died while running it (panic or hang; see console)"
		elif ((done)); then
			echo "FAIL $name not run"
		else
			echo "FAIL $name not run: the guest died first"
		fi
	done
}

ss_test_output() { # WORK NAME: what the test printed, less trailing blank lines
	awk -v b="@@@ begin $2" -v e="@@@ end $2" '$0 == e { p = 0 } p { print } $0 == b { p = 1 }' \
		"$1/output.log" | tr -d '\r' | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
}

ss_console_tail() { # WORK: the kernel's last words
	local c=$1/console.log
	ss_say "---- console: first splat lines"
	tr -d '\r' <"$c" | grep -m 8 -E 'Kernel panic|BUG:|WARNING:|Oops|Call Trace|UBSAN:|kmemleak:' >&2 || ss_say "(none)"
	ss_say "---- console: last 40 lines ($c)"
	tr -d '\r' <"$c" | tail -n 40 >&2
	ss_say "----"
}

# --- guest tests ------------------------------------------------------------
# ss_build_tests SRCDIR OUTDIR: *.c compiled static (with lib/libstablesend.a,
# brought up to date first), *.sh copied; writes OUTDIR/.list ("name
# timeout" lines) and OUTDIR/.broken (tests that do not compile).  A test
# sets its own timeout with a "test-timeout: N" comment in its first 30 lines;
# a .c test with "compat32: yes" there is also built -m32 (i386: the kernel's
# IA32 emulation and compat_ioctl) as NAME-m32, listed right after NAME.
ss_build_tests() {
	local src=$1 out=$2 f name t libs=() libs32=()
	mkdir -p "$out"
	: >"$out/.list"
	: >"$out/.broken"
	if [[ -e $SS_REPO/lib/Makefile ]]; then
		make -s -C "$SS_REPO/lib" libstablesend.a >&2 || ss_say "lib/libstablesend.a does not build"
		if grep -qs 'compat32: *yes' "$src"/*.c; then
			make -s -C "$SS_REPO/lib" libstablesend-m32.a >&2 ||
				ss_say "lib/libstablesend-m32.a does not build (gcc-multilib?)"
		fi
	fi
	[[ -e $SS_REPO/lib/libstablesend.a ]] && libs=("$SS_REPO/lib/libstablesend.a")
	[[ -e $SS_REPO/lib/libstablesend-m32.a ]] && libs32=("$SS_REPO/lib/libstablesend-m32.a")
	for f in "$src"/*.c "$src"/*.sh; do
		[[ -e $f ]] || continue
		name=$(basename "${f%.*}")
		[[ -e $out/$name ]] && ss_die "two tests named $name in $src"
		case $f in
		*.c)
			# shellcheck disable=SC2086
			if ! gcc -static -O2 -Wall -I "$SS_REPO/uapi" -I "$SS_REPO/lib" \
				-I "$SS_REPO/lib/include" -pthread -o "$out/$name" "$f" "${libs[@]}" \
				${STABLESEND_GUEST_LDLIBS:-}; then
				ss_say "guest test $f does not compile"
				echo "$name" >>"$out/.broken"
				continue
			fi
			;;
		*) install -m 0755 "$f" "$out/$name" ;;
		esac
		t=$(head -n 30 "$f" | sed -n 's/.*test-timeout: *\([0-9][0-9]*\).*/\1/p' | head -n1)
		echo "$name ${t:-${STABLESEND_TEST_TIMEOUT:-120}}" >>"$out/.list"
		[[ $f == *.c ]] || continue
		head -n 30 "$f" | grep -q 'compat32: *yes' || continue
		# 64-bit off_t as in the library (splice() takes a loff_t *).
		# shellcheck disable=SC2086
		if gcc -m32 -D_FILE_OFFSET_BITS=64 -static -O2 -Wall -I "$SS_REPO/uapi" \
			-I "$SS_REPO/lib" -I "$SS_REPO/lib/include" -pthread -o "$out/$name-m32" \
			"$f" "${libs32[@]}" ${STABLESEND_GUEST_LDLIBS:-}; then
			echo "$name-m32 ${t:-${STABLESEND_TEST_TIMEOUT:-120}}" >>"$out/.list"
		else
			ss_say "guest test $f does not compile with -m32 (gcc-multilib installed?)"
			echo "$name-m32" >>"$out/.broken"
		fi
	done
}
