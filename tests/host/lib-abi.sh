#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The built library as a package: exported symbols exactly as listed in
# libstablesend.map with their version nodes, soname, version macros against
# dkms.conf, frozen structure layouts, optional -Werror, header, man pages
# (one per function, each with ATTRIBUTES), CHANGELOG, the "make install"
# tree and "make uninstall" (lib/ and top level) leaving nothing behind,
# pkg-config, linking a program against the install (shared, static), the
# tool linked to libstablesend.so.0 without RPATH (and fully static).

set -u
# Run make as a user would, not with the flags of a "make check" above us.
unset MAKEFLAGS MFLAGS MAKELEVEL WERROR
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
lib=$top/lib
CC=${CC:-cc}
failed=0
work=$(mktemp -d "${TMPDIR:-/tmp}/stablesend-abi.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok: $*"; }

version=$(sed -n 's/^PACKAGE_VERSION="\{0,1\}\([0-9][^"]*\)"\{0,1\}[[:space:]]*$/\1/p' "$top/dkms.conf")
[ -n "$version" ] || { echo "no PACKAGE_VERSION in dkms.conf"; exit 1; }
so=$lib/libstablesend.so.$version

# Exports: exactly the symbols libstablesend.map lists, each in its node;
# no wildcard in a global: section; one node per release, each inheriting
# the one before.
map=$lib/libstablesend.map
[ -f "$so" ] || { echo "$so not built"; exit 1; }
perl -0777 -pe 's{/\*.*?\*/}{}gs' "$map" | awk '
	/^[A-Za-z_][A-Za-z_0-9.]*[ \t]*\{/ { node = $1; sect = ""; print "node " node; next }
	/^\}/ { node = ""; next }
	/global:/ { sect = "g"; next }
	/local:/ { sect = "l"; next }
	node != "" && sect == "g" { gsub(/[ \t;]/, ""); if ($0 != "") print "sym " $0 "@@" node }
' >"$work/map"
grep '^node ' "$work/map" | cut -d' ' -f2 >"$work/map-nodes"
grep '^sym ' "$work/map" | cut -d' ' -f2 | sort >"$work/map-syms"
if grep -q '[*?[]' "$work/map-syms"; then
	fail "wildcard in a global: list of libstablesend.map: $(grep '[*?[]' "$work/map-syms" | tr '\n' ' ')"
fi
[ -s "$work/map-syms" ] || fail "no symbols in libstablesend.map"
nm -D --defined-only "$so" | awk '$2 != "A" { print $3 }' | sort >"$work/exported"
cmp -s "$work/map-syms" "$work/exported" &&
	ok "exports == libstablesend.map ($(wc -l <"$work/exported") symbols, nodes $(tr '\n' ' ' <"$work/map-nodes"))" ||
	fail "exports vs libstablesend.map: $(diff "$work/map-syms" "$work/exported" | grep '^[<>]' | tr '\n' ' ')"
# The version definitions of the .so: the map's nodes, in order, each
# after the first with the previous one as its parent.
readelf -V "$so" | awk '
	/^Version definition section/ { on = 1; next }
	/^Version needs section/ || /^Version symbols section/ { on = 0 }
	on && /Flags: BASE/ { skip = 1; next }
	on && /Name:/ { sub(/.*Name: /, ""); name = $1; skip = 0; print "def " name; next }
	on && !skip && /Parent 1:/ { sub(/.*Parent 1: /, ""); print "parent " name " " $1 }
' >"$work/verdefs"
grep '^def ' "$work/verdefs" | cut -d' ' -f2 >"$work/so-nodes"
cmp -s "$work/map-nodes" "$work/so-nodes" ||
	fail "version nodes: map '$(tr '\n' ' ' <"$work/map-nodes")', .so '$(tr '\n' ' ' <"$work/so-nodes")'"
prev='' chained=1
for n in $(cat "$work/so-nodes"); do
	par=$(awk -v n="$n" '$1 == "parent" && $2 == n { print $3 }' "$work/verdefs")
	[ "$par" = "$prev" ] || { fail "version node $n: parent '$par', want '${prev:-none}'"; chained=0; }
	prev=$n
done
[ $chained = 1 ] && ok "version nodes chained: $(tr '\n' ' ' <"$work/so-nodes")"
sed 's/@.*//' "$work/exported" | sort >"$work/exports"
[ -s "$work/exports" ] || fail "no exported functions"

# Every exported function is declared in the header and has a man page;
# every non-inline function the header declares is exported.
sed -n 's/^[a-z_0-9 ]*[ *]\(stablesend_[a-z_]*\)(.*/\1/p' "$lib/include/stablesend.h" |
	sort -u >"$work/declared"
grep -n 'static inline' -A1 "$lib/include/stablesend.h" |
	sed -n 's/.*[ *]\(stablesend_[a-z_]*\)(.*/\1/p' | sort -u >"$work/inline"
comm -23 "$work/declared" "$work/inline" >"$work/public"
cmp -s "$work/public" "$work/exports" && ok "header declarations == exports" ||
	fail "header vs exports: $(diff "$work/public" "$work/exports" | tr '\n' ' ')"
for f in $(cat "$work/declared"); do
	[ -f "$lib/man/$f.3" ] || fail "no man page for $f"
done

# Every function's man page says how it behaves with threads.
for m in "$lib"/man/*.3; do
	grep -q '^\.so ' "$m" && continue
	grep -q '^\.SH ATTRIBUTES' "$m" || fail "man $(basename "$m"): no ATTRIBUTES (thread safety) section"
done
ok "man pages (3) state thread safety"

# The compile-time version is dkms.conf's PACKAGE_VERSION;
# STABLESEND_CHECK_VERSION() agrees with it.
cat >"$work/v.c" <<'EOT'
#include <stdio.h>
#include <stablesend.h>
#if !STABLESEND_CHECK_VERSION(STABLESEND_VERSION_MAJOR, STABLESEND_VERSION_MINOR) || \
	!STABLESEND_CHECK_VERSION(0, 0) || \
	STABLESEND_CHECK_VERSION(STABLESEND_VERSION_MAJOR, STABLESEND_VERSION_MINOR + 1) || \
	STABLESEND_CHECK_VERSION(STABLESEND_VERSION_MAJOR + 1, 0)
#error "STABLESEND_CHECK_VERSION() is wrong"
#endif
int main(void)
{
	printf("%d.%d.%d\n", STABLESEND_VERSION_MAJOR, STABLESEND_VERSION_MINOR,
	       STABLESEND_VERSION_PATCH);
	return 0;
}
EOT
want=$(echo "$version" | sed -n 's/^\([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p')
if $CC -Wall -Werror -I"$lib/include" -I"$top/uapi" -o "$work/v" "$work/v.c"; then
	got=$("$work/v")
	[ "$got" = "$want" ] && ok "STABLESEND_VERSION_* $got == dkms.conf $version" ||
		fail "STABLESEND_VERSION_* in stablesend.h are $got, dkms.conf says $version"
else
	fail "version macros do not compile"
fi

# The structures the library exchanges with callers keep their layout
# (lib/README.md, ABI policy), on 64-bit and, if the compiler can, 32-bit;
# the header refuses a <linux/stablesend.h> that resizes one.
cat >"$work/layout.c" <<'EOT'
#include <stddef.h>
#include <stablesend.h>
#define AT(t, m, off) _Static_assert(offsetof(struct t, m) == (off), #t "." #m " moved")
#define SIZE(t, n) _Static_assert(sizeof(struct t) == (n), #t " resized")
AT(stablesend_req, file_fd, 0); AT(stablesend_req, sock_fd, 4);
AT(stablesend_req, offset, 8); AT(stablesend_req, len, 16);
AT(stablesend_req, head, 24); AT(stablesend_req, tail, 32);
AT(stablesend_req, head_len, 40); AT(stablesend_req, tail_len, 44);
AT(stablesend_req, user_data, 48); AT(stablesend_req, flags, 56);
AT(stablesend_req, reserved, 60); SIZE(stablesend_req, STABLESEND_REQ_SIZE);
AT(stablesend_cqe, user_data, 0); AT(stablesend_cqe, res, 8);
AT(stablesend_cqe, flags, 16); AT(stablesend_cqe, reserved, 20);
SIZE(stablesend_cqe, STABLESEND_CQE_SIZE);
AT(stablesend_counters, submitted, 0); AT(stablesend_counters, copied, 72);
AT(stablesend_counters, reserved, 80); SIZE(stablesend_counters, STABLESEND_COUNTERS_SIZE);
_Static_assert(STABLESEND_REQ_SIZE == 64 && STABLESEND_CQE_SIZE == 24 &&
	       STABLESEND_COUNTERS_SIZE == 128, "frozen sizes changed");
/* What the kernel copies: the sizes in the ioctl numbers. */
_Static_assert(_IOC_SIZE(STABLESEND_IOC_COUNTERS) == STABLESEND_COUNTERS_SIZE, "COUNTERS");
_Static_assert(_IOC_SIZE(STABLESEND_IOC_SEND) == STABLESEND_REQ_SIZE, "SEND");
EOT
$CC -std=c11 -Wall -Werror -fsyntax-only -D_FILE_OFFSET_BITS=64 -I"$lib/include" \
	-I"$top/uapi" "$work/layout.c" && ok "structure layouts frozen (native)" ||
	fail "structure layouts changed (native)"
if echo 'int main(void){return 0;}' | $CC -m32 -x c -o "$work/probe32" - 2>/dev/null; then
	$CC -m32 -std=c11 -Wall -Werror -fsyntax-only -D_FILE_OFFSET_BITS=64 \
		-I"$lib/include" -I"$top/uapi" "$work/layout.c" &&
		ok "structure layouts frozen (-m32)" || fail "structure layouts changed (-m32)"
else
	echo "skip: no -m32 compiler for the 32-bit layout"
fi
mkdir -p "$work/grown/linux"
sed 's/__u64 reserved\[6\];/__u64 reserved[7];/' "$top/uapi/linux/stablesend.h" \
	>"$work/grown/linux/stablesend.h"
grep -q 'reserved\[7\]' "$work/grown/linux/stablesend.h" || fail "could not grow the counters"
printf '#include <stablesend.h>\nint main(void) { return 0; }\n' >"$work/g.c"
if $CC -fsyntax-only -I"$lib/include" -I"$work/grown" "$work/g.c" 2>/dev/null; then
	fail "stablesend.h accepts a <linux/stablesend.h> with a larger struct stablesend_counters"
else
	ok "stablesend.h refuses a resized structure"
fi

# -Werror only with WERROR=1, and "make check" sets it.
make -s -n -B -C "$lib" src/util.o 2>&1 | grep -q -e '-Werror' &&
	fail "lib/Makefile uses -Werror without WERROR=1" || ok "no -Werror by default"
make -s -n -B -C "$lib" src/util.o WERROR=1 2>&1 | grep -q -e '-Werror' &&
	ok "-Werror with WERROR=1" || fail "WERROR=1 does not add -Werror"
make -s -n -B -C "$lib" check 2>&1 | grep -e ' -o src/util\.o ' | grep -q -e '-Werror' &&
	ok "make check builds the library with -Werror" ||
	fail "make check builds the library without -Werror"

# The changes of this release are written down.
grep -q "^## \[\{0,1\}$version\]\{0,1\}" "$lib/CHANGELOG.md" 2>/dev/null &&
	ok "CHANGELOG.md has $version" || fail "lib/CHANGELOG.md has no '## $version' section"

# The LD_PRELOAD library: sendfile and sendfile64 only, self-contained.
pre=$lib/libstablesend-preload.so
if [ -f "$pre" ]; then
	exp=$(nm -D --defined-only "$pre" | awk '$2 != "A" { print $3 }' | sort | tr '\n' ' ')
	[ "$exp" = "sendfile sendfile64 " ] && ok "preload exports sendfile, sendfile64" ||
		fail "preload exports: $exp"
	readelf -d "$pre" | grep -q TEXTREL && fail "preload: text relocations"
	readelf -d "$pre" | grep NEEDED | grep -q libstablesend &&
		fail "preload needs libstablesend.so: one file must do"
else
	fail "$pre not built"
fi

# Soname, symlinks.
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libstablesend.so.0 ] && ok "soname $soname" || fail "soname '$soname'"
[ "$(readlink "$lib/libstablesend.so.0")" = "libstablesend.so.$version" ] &&
	[ "$(readlink "$lib/libstablesend.so")" = libstablesend.so.0 ] &&
	ok "symlinks" || fail "symlinks"
readelf -d "$so" | grep -q TEXTREL && fail "text relocations"
readelf -V "$so" | grep -q 'STABLESEND_0\.1' && ok "version node" || fail "no version node"

# The header stands alone, in C and C++.
printf '#include <stablesend.h>\nint main(void) { return 0; }\n' >"$work/h.c"
$CC -std=c99 -Wall -Wextra -Werror -pedantic -I"$lib/include" -I"$top/uapi" \
	-c -o "$work/h.o" "$work/h.c" && ok "header: C99" || fail "header: C99"
if command -v c++ >/dev/null; then
	cp "$work/h.c" "$work/h.cc"
	c++ -Wall -Wextra -Werror -I"$lib/include" -I"$top/uapi" \
		-c -o "$work/h.o" "$work/h.cc" && ok "header: C++" || fail "header: C++"
fi

# Man pages render without warnings.
for m in "$lib"/man/*.[0-9]; do
	grep -q '^\.so ' "$m" && continue
	w=$(MANWIDTH=80 man --warnings -l "$m" 2>&1 >/dev/null)
	[ -z "$w" ] || fail "man $m: $w"
	MANWIDTH=80 man -l "$m" 2>/dev/null | grep -q . || fail "man $m: empty"
done
ok "man pages render"

# Install tree.  "make install" runs "all": give it the flags the tree was
# built with (lib/.build-flags), so that it does not rebuild.
werror=
grep -q -e ' -Werror' "$lib/.build-flags" 2>/dev/null && werror=1
d=$work/root
make -s -C "$lib" install DESTDIR="$d" PREFIX=/usr WERROR=$werror >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; fail "make install"; }
for f in usr/include/stablesend.h usr/include/stablesend/linux/stablesend.h \
	 usr/lib/libstablesend.so.$version usr/lib/libstablesend.so.0 \
	 usr/lib/libstablesend.so usr/lib/libstablesend.a \
	 usr/lib/pkgconfig/libstablesend.pc usr/bin/stablesend \
	 usr/share/man/man1/stablesend.1 usr/share/man/man3/stablesend_sendfile.3 \
	 usr/share/man/man3/stablesend_check_version.3 \
	 usr/share/man/man4/stablesend.4 usr/share/man/man7/stablesend.7 \
	 usr/lib/libstablesend-preload.so usr/share/man/man7/libstablesend-preload.7; do
	[ -e "$d/$f" ] || fail "not installed: $f"
done
# The kernel header stays out of linux-libc-dev's <linux/...>.
[ -e "$d/usr/include/linux" ] && fail "installed into usr/include/linux/: $(ls "$d/usr/include/linux")"
for m in $(cat "$work/declared") stablesend libstablesend-preload "4 stablesend" \
	 "7 stablesend"; do
	# shellcheck disable=SC2086
	man -M "$d/usr/share/man" -w $m >/dev/null 2>&1 &&
	MANWIDTH=80 man -M "$d/usr/share/man" $m 2>/dev/null | grep -q "${m#? }" ||
		fail "installed man page $m does not render"
done
ok "install tree"
# Nothing installed carries an RPATH or RUNPATH (Debian policy).
for f in usr/bin/stablesend usr/lib/libstablesend.so.$version usr/lib/libstablesend-preload.so; do
	readelf -d "$d/$f" | grep -q -e '(RPATH)' -e '(RUNPATH)' &&
		fail "installed $f has an RPATH/RUNPATH: $(readelf -d "$d/$f" | grep PATH)"
done

# The installed tool is linked to libstablesend.so.0, found in the install.
tool=$d/usr/bin/stablesend
needed=$(readelf -d "$tool" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
case " $needed" in
*" libstablesend.so.0 "*) ok "installed tool NEEDED: $needed" ;;
*) fail "installed tool is not linked to libstablesend.so.0 (NEEDED: $needed)" ;;
esac
readelf -V "$tool" | grep -q 'STABLESEND_0\.1' || fail "installed tool binds no STABLESEND_0.1"
LD_LIBRARY_PATH="$d/usr/lib" ldd "$tool" 2>/dev/null |
	grep -q "libstablesend.so.0 => $d/usr/lib/libstablesend.so.0" ||
	fail "installed tool does not load $d/usr/lib/libstablesend.so.0"
out=$(LD_LIBRARY_PATH="$d/usr/lib" "$tool" --version) && [ "$out" = "stablesend $version" ] &&
	ok "installed tool runs with the installed library" || fail "installed tool: '$out'"
# The build tree's tool: the same, found through RUNPATH $ORIGIN/.. only.
readelf -d "$lib/tools/stablesend" | grep -q 'NEEDED.*\[libstablesend\.so\.0\]' ||
	fail "tools/stablesend is not linked to libstablesend.so.0"
env -u LD_LIBRARY_PATH ldd "$lib/tools/stablesend" 2>/dev/null |
	grep -q "libstablesend.so.0 => .*/lib/tools/\.\./libstablesend.so.0" &&
	env -u LD_LIBRARY_PATH "$lib/tools/stablesend" --version >/dev/null &&
	ok "tools/stablesend runs from the build tree" ||
	fail "tools/stablesend does not run from the build tree with its own library"

# pkg-config.
export PKG_CONFIG_PATH="$d/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$d"
# Under a sysroot, /usr/include and /usr/lib are not system directories.
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
pkg-config --validate libstablesend && ok "pkg-config --validate" || fail "pkg-config --validate"
v=$(pkg-config --modversion libstablesend)
[ "$v" = "$version" ] && ok "pkg-config version $v" || fail "pkg-config version '$v'"
cflags=$(pkg-config --cflags libstablesend)
libs=$(pkg-config --libs libstablesend)
cat >"$work/t.c" <<'EOT'
#include <stdio.h>
#include <string.h>
#include <stablesend.h>
int main(void)
{
	struct stablesend_req r;
	int M = STABLESEND_VERSION_MAJOR, m = STABLESEND_VERSION_MINOR;

	stablesend_prep_req(&r, 0, 1, 0, 1, 7);
	printf("%s %s\n", stablesend_version(),
	       stablesend_feature_name(STABLESEND_FEAT_SEND));
	if (stablesend_check_version(M, m) != 1 || stablesend_check_version(0, 0) != 1 ||
	    stablesend_check_version(M, m + 1) != 0 || stablesend_check_version(M + 1, 0) != 0 ||
	    (m && stablesend_check_version(M, m - 1) != 1)) {
		printf("stablesend_check_version() is wrong\n");
		return 1;
	}
	return r.user_data == 7 ? 0 : 1;
}
EOT
# The headers the compiler takes with pkg-config's flags are the installed
# ones: <stablesend.h> and <linux/stablesend.h> under the library's folder.
# shellcheck disable=SC2086
$CC $cflags -M "$work/t.c" >"$work/deps" 2>&1 || fail "pkg-config --cflags: $(cat "$work/deps")"
for h in "$d/usr/include/stablesend.h" "$d/usr/include/stablesend/linux/stablesend.h"; do
	tr ' \\' '\n\n' <"$work/deps" | grep -qx "$h" || fail "compiled without $h (cflags: $cflags)"
done
other=$(tr ' \\' '\n\n' <"$work/deps" | grep 'stablesend\.h$' | grep -v "^$d/")
[ -z "$other" ] || fail "compiled with $(echo "$other" | tr '\n' ' '), not the installed headers"
# shellcheck disable=SC2086
$CC -Wall -Werror $cflags -o "$work/t" "$work/t.c" $libs || fail "link via pkg-config"
out=$(LD_LIBRARY_PATH="$d/usr/lib" "$work/t") && [ "$out" = "$version send" ] &&
	ok "program built with pkg-config ($cflags $libs) runs" || fail "pkg-config program: '$out'"
LD_LIBRARY_PATH="$d/usr/lib" ldd "$work/t" 2>/dev/null |
	grep -q "libstablesend.so.0 => $d/usr/lib/" || fail "not linked to the installed .so.0"
readelf -V "$work/t" | grep -q 'STABLESEND_0\.1' && ok "program binds STABLESEND_0.1" ||
	fail "program has no STABLESEND_0.1 version need"

# Static: the library archive alone, then fully static like the guest tests.
# shellcheck disable=SC2086
$CC -Wall -Werror $cflags -o "$work/ts" "$work/t.c" "$d/usr/lib/libstablesend.a" &&
	[ "$("$work/ts")" = "$version send" ] && ok "static archive" || fail "static archive"
if echo 'int main(void){return 0;}' | $CC -static -x c -o "$work/probe" - 2>/dev/null; then
	$CC -static -Wall -Werror -I "$top/uapi" -I "$lib/include" -o "$work/stablesend" \
		"$lib/tools/stablesend.c" "$lib/libstablesend.a" 2>"$work/static.log" &&
		"$work/stablesend" --version | grep -q "$version" &&
		ok "tool links fully static" || { cat "$work/static.log"; fail "static tool"; }
else
	echo "skip: no static libc"
fi

# Uninstall leaves nothing behind: "make -C lib uninstall", then the top
# level's "make uninstall" after a second install.
left() {
	(cd "$1" && find . ! -type d | sort)
	[ -d "$1/usr/include/stablesend" ] && echo "./usr/include/stablesend/"
}
make -s -C "$lib" uninstall DESTDIR="$d" PREFIX=/usr >"$work/uninstall.log" 2>&1 ||
	{ cat "$work/uninstall.log"; fail "make -C lib uninstall"; }
l=$(left "$d")
[ -z "$l" ] && ok "make -C lib uninstall leaves nothing" ||
	fail "left after make -C lib uninstall: $(echo "$l" | tr '\n' ' ')"
d2=$work/root2
make -s -C "$lib" install DESTDIR="$d2" PREFIX=/usr WERROR=$werror >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; fail "make install (2)"; }
make -s -C "$top" uninstall DESTDIR="$d2" PREFIX=/usr >"$work/uninstall.log" 2>&1 ||
	{ cat "$work/uninstall.log"; fail "make uninstall (top level)"; }
l=$(left "$d2")
[ -z "$l" ] && ok "top-level make uninstall leaves nothing" ||
	fail "left after top-level make uninstall: $(echo "$l" | tr '\n' ' ')"

exit $failed
