#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The built library as a package: exported symbols, soname, version,
# header, man pages, "make install" tree, pkg-config, linking a program
# against it (shared, static, and the tool fully static).

set -u
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

# Exports: only stablesend_*, all in node STABLESEND_0.1.
[ -f "$so" ] || { echo "$so not built"; exit 1; }
nm -D --defined-only "$so" >"$work/nm" || fail "nm -D"
bad=$(awk '$2 != "A" && $3 !~ /^stablesend_[a-z_]+@@STABLESEND_0\.1$/' "$work/nm")
[ -z "$bad" ] && ok "exports only stablesend_*@@STABLESEND_0.1" ||
	fail "unexpected exports: $bad"
awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' "$work/nm" | sort >"$work/exports"
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

# Install tree.
d=$work/root
make -s -C "$lib" install DESTDIR="$d" PREFIX=/usr >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; fail "make install"; }
for f in usr/include/stablesend.h usr/include/linux/stablesend.h \
	 usr/lib/libstablesend.so.$version usr/lib/libstablesend.so.0 \
	 usr/lib/libstablesend.so usr/lib/libstablesend.a \
	 usr/lib/pkgconfig/libstablesend.pc usr/bin/stablesend \
	 usr/share/man/man1/stablesend.1 usr/share/man/man3/stablesend_sendfile.3 \
	 usr/lib/libstablesend-preload.so usr/share/man/man7/libstablesend-preload.7; do
	[ -e "$d/$f" ] || fail "not installed: $f"
done
for m in $(cat "$work/declared") stablesend libstablesend-preload; do
	man -M "$d/usr/share/man" -w "$m" >/dev/null 2>&1 &&
	MANWIDTH=80 man -M "$d/usr/share/man" "$m" 2>/dev/null | grep -q "$m" ||
		fail "installed man page $m does not render"
done
ok "install tree"

# pkg-config.
export PKG_CONFIG_PATH="$d/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$d"
# Under a sysroot, /usr/include and /usr/lib are not system directories.
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
pkg-config --validate libstablesend && ok "pkg-config --validate" || fail "pkg-config --validate"
v=$(pkg-config --modversion libstablesend)
[ "$v" = "$version" ] && ok "pkg-config version $v" || fail "pkg-config version '$v'"
cat >"$work/t.c" <<'EOT'
#include <stdio.h>
#include <string.h>
#include <stablesend.h>
int main(void)
{
	struct stablesend_req r;

	stablesend_prep_req(&r, 0, 1, 0, 1, 7);
	printf("%s %s\n", stablesend_version(),
	       stablesend_feature_name(STABLESEND_FEAT_SEND));
	return r.user_data == 7 ? 0 : 1;
}
EOT
$CC -Wall -Werror $(pkg-config --cflags libstablesend) -o "$work/t" "$work/t.c" \
	$(pkg-config --libs libstablesend) || fail "link via pkg-config"
out=$(LD_LIBRARY_PATH="$d/usr/lib" "$work/t") && [ "$out" = "$version send" ] &&
	ok "program linked via pkg-config runs" || fail "pkg-config program: '$out'"
ldd "$work/t" 2>/dev/null | grep -q libstablesend.so.0 || fail "not linked to .so.0"
readelf -V "$work/t" | grep -q 'STABLESEND_0\.1' && ok "program binds STABLESEND_0.1" ||
	fail "program has no STABLESEND_0.1 version need"

# Static: the library archive alone, then fully static like the guest tests.
$CC -Wall -Werror -I"$d/usr/include" -o "$work/ts" "$work/t.c" "$d/usr/lib/libstablesend.a" &&
	[ "$("$work/ts")" = "$version send" ] && ok "static archive" || fail "static archive"
if echo 'int main(void){return 0;}' | $CC -static -x c -o "$work/probe" - 2>/dev/null; then
	$CC -static -Wall -Werror -I "$top/uapi" -I "$lib/include" -o "$work/stablesend" \
		"$lib/tools/stablesend.c" "$lib/libstablesend.a" 2>"$work/static.log" &&
		"$work/stablesend" --version | grep -q "$version" &&
		ok "tool links fully static" || { cat "$work/static.log"; fail "static tool"; }
else
	echo "skip: no static libc"
fi

exit $failed
