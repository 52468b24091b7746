#!/bin/sh
# SPDX-License-Identifier: MIT
#
# "make deb" (lib/mkdeb): the four packages build from a clean copy of the
# tree and lintian finds no error or warning; each holds what it should
# (the DKMS source with dkms.conf, the udev rule, modules-load.d and
# sysusers.d files; the library with its symbols file listing exactly the
# version script's exports; headers and pkg-config; the tool linked to
# libstablesend.so.0 and the preload library); and a symbols file that
# misses an export fails the build (dpkg-gensymbols at check level 4).
# Installing them is tests/integration/packages (guests).

set -u
unset MAKEFLAGS MFLAGS MAKELEVEL WERROR
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
failed=0
work=$(mktemp -d "${TMPDIR:-/tmp}/stablesend-deb.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok: $*"; }

for c in dpkg-buildpackage dh dh_dkms lintian; do
	command -v $c >/dev/null || { echo "FAIL: $c missing (tests/harness/deps deb)"; exit 1; }
done
v=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$top/dkms.conf")
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

if "$top/lib/mkdeb" "$work/out" >"$work/mkdeb.log" 2>&1; then
	ok "make deb: $(tail -n 1 "$work/mkdeb.log")"
else
	cat "$work/mkdeb.log"
	fail "lib/mkdeb failed"
	exit 1
fi

has() { # DEB PATH...: the package holds each PATH
	d=$1
	shift
	dpkg-deb -c "$work/out/$d" | awk '{ print $6 }' | sed 's|^\.||; s|/$||' >"$work/list"
	for p; do
		grep -qx "$p" "$work/list" || fail "$d lacks $p"
	done
}
has "stablesend-dkms_${v}_all.deb" "/usr/src/stablesend-$v/dkms.conf" \
	"/usr/src/stablesend-$v/module/Kbuild" "/usr/src/stablesend-$v/module/compat/probe.sh" \
	"/usr/src/stablesend-$v/uapi/linux/stablesend.h" \
	/lib/udev/rules.d/60-stablesend-dkms.rules /usr/lib/modules-load.d/stablesend.conf \
	/usr/lib/sysusers.d/stablesend-dkms.conf
has "libstablesend0_${v}_amd64.deb" "/usr/lib/$ma/libstablesend.so.0" "/usr/lib/$ma/libstablesend.so.$v"
has "libstablesend-dev_${v}_amd64.deb" /usr/include/stablesend.h \
	/usr/include/stablesend/linux/stablesend.h "/usr/lib/$ma/libstablesend.so" \
	"/usr/lib/$ma/libstablesend.a" "/usr/lib/$ma/pkgconfig/libstablesend.pc" \
	/usr/share/man/man3/stablesend_sendfile.3.gz /usr/share/man/man4/stablesend.4.gz
has "stablesend_${v}_amd64.deb" /usr/bin/stablesend "/usr/lib/$ma/stablesend/libstablesend-preload.so" \
	/usr/share/man/man1/stablesend.1.gz
[ $failed = 0 ] && ok "each package holds its files"

dpkg-deb -x "$work/out/stablesend-dkms_${v}_all.deb" "$work/dkms"
grep -qx stablesend "$work/dkms/usr/lib/modules-load.d/stablesend.conf" || fail "modules-load.d does not name the module"
cmp -s "$work/dkms/usr/src/stablesend-$v/dkms.conf" "$top/dkms.conf" || fail "the packaged dkms.conf is not the tree's"
dpkg-deb -f "$work/out/stablesend-dkms_${v}_all.deb" Depends | grep -q dkms || fail "stablesend-dkms does not depend on dkms"

# Symbols: the control file lists exactly the version script's exports.
dpkg-deb -e "$work/out/libstablesend0_${v}_amd64.deb" "$work/ctl"
sed -n 's/^ \(stablesend_[a-z0-9_]*\)@STABLESEND_0.1 .*/\1/p' "$work/ctl/symbols" | sort >"$work/syms"
perl -0777 -pe 's{/\*.*?\*/}{}gs' "$top/lib/libstablesend.map" | grep -o 'stablesend_[a-z0-9_]*;' | tr -d ';' | sort >"$work/map"
if cmp -s "$work/syms" "$work/map"; then
	ok "symbols file: $(wc -l <"$work/syms") symbols, as libstablesend.map"
else
	diff "$work/map" "$work/syms"
	fail "the packaged symbols file differs from libstablesend.map"
fi

# The tool: linked to the shared library, no RPATH.
dpkg-deb -x "$work/out/stablesend_${v}_amd64.deb" "$work/tool"
dyn=$(readelf -d "$work/tool/usr/bin/stablesend")
echo "$dyn" | grep -q 'NEEDED.*libstablesend.so.0' || fail "the tool does not link libstablesend.so.0"
echo "$dyn" | grep -qE 'RPATH|RUNPATH' && fail "the tool has an RPATH"
dpkg-deb -f "$work/out/stablesend_${v}_amd64.deb" Depends | grep -q "libstablesend0 (>= $v)" ||
	fail "stablesend does not depend on libstablesend0 (>= $v)"

# Red control: a symbols file that misses an export must fail the build.
mkdir "$work/tree"
if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$top" && git ls-files -z | tar --null -T - -cf -) | tar -C "$work/tree" -xf -
else
	(cd "$top" && tar -cf - .) | tar -C "$work/tree" -xf -
fi
sed -i '/stablesend_version@/d' "$work/tree/lib/debian/libstablesend0.symbols"
if "$work/tree/lib/mkdeb" "$work/out2" >"$work/mkdeb2.log" 2>&1; then
	fail "a symbols file without stablesend_version still built"
else
	ok "a symbols file missing stablesend_version fails the build"
fi

[ $failed = 0 ] && echo "PASS deb" || echo "FAIL deb"
exit $failed
