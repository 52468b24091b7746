#!/bin/sh
# SPDX-License-Identifier: MIT
#
# in-guest.sh [-k KERNEL]: run the library's tests in a QEMU guest with the
# stablesend module loaded (through tests/vm), so that stablesend_sendfile()
# is checked on the module path against sendfile(2) on a real kernel.
# Needs root and what tests/vm needs.  KERNEL: 6.1, 6.12 (default), newest.

set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
kernel=6.12
[ "${1:-}" = -k ] && { kernel=${2:?-k needs a kernel}; shift 2; }
[ $# = 0 ] || { echo "usage: $0 [-k 6.1|6.12|newest]" >&2; exit 2; }

make -s -C "$top/lib"
work=$(mktemp -d "${TMPDIR:-/tmp}/stablesend-guest.XXXXXX")
trap 'rm -rf "$work"' EXIT
g=$work/libtests
mkdir "$g"
CFLAGS="-static -O2 -g -D_GNU_SOURCE -Wall -Wextra -Werror -I$top/lib/include -I$top/uapi"
for t in api-args sendfile-compare sendfile-stable sendfile-hdtr async-module open-nodev mock-module; do
	# shellcheck disable=SC2086
	${CC:-cc} $CFLAGS -o "$g/$t" "$here/$t.c" "$top/lib/libstablesend.a" -pthread
done
# getaddrinfo() in a static binary: numeric addresses only in the guest.
# shellcheck disable=SC2086
${CC:-cc} $CFLAGS -o "$g/tcp-sink" "$here/tcp-sink.c" 2>/dev/null
# shellcheck disable=SC2086
${CC:-cc} $CFLAGS -o "$g/stablesend" "$top/lib/tools/stablesend.c" \
	"$top/lib/libstablesend.a" 2>/dev/null

cat >"$g/run" <<'EOT'
#!/bin/sh
cd /host/libtests || exit 1
export TMPDIR=/tmp
mkdir -p /tmp
ip link set lo up 2>/dev/null
[ -c /dev/stablesend ] || { echo "no /dev/stablesend in the guest"; exit 1; }
pass=0 fail=0
check() {
	name=$1
	shift
	if "$@" >/tmp/$name.log 2>&1; then
		echo "PASS $name"; pass=$((pass + 1))
	else
		echo "FAIL $name"; sed 's/^/    /' /tmp/$name.log; fail=$((fail + 1))
	fi
}
for t in api-args sendfile-compare sendfile-stable sendfile-hdtr async-module open-nodev mock-module; do
	check $t ./$t
done
grep -h -E '^seed|^under fire' /tmp/sendfile-stable.log
STABLESEND_REQUIRE_MODULE=1 check sendfile-stable:required ./sendfile-stable
grep -q 'path used: module' /tmp/sendfile-stable:required.log ||
	{ echo "FAIL module path not used"; fail=$((fail + 1)); }

head -c 3000001 /dev/urandom >/tmp/data
./tcp-sink 127.0.0.1 /tmp/port /tmp/recv &
i=0
while [ ! -s /tmp/port ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
check tool-send ./stablesend send /tmp/data "127.0.0.1:$(cat /tmp/port)" --offset 1
wait
cat /tmp/tool-send.log
if tail -c +2 /tmp/data | cmp -s - /tmp/recv &&
   grep -q 'via module' /tmp/tool-send.log; then
	echo "PASS tool-send:bytes"; pass=$((pass + 1))
else
	echo "FAIL tool-send:bytes"; fail=$((fail + 1))
fi
check tool-status ./stablesend status
cat /tmp/tool-status.log
echo "$pass passed, $fail failed"
[ $fail = 0 ]
EOT
chmod +x "$g/run"
rc=0
"$top/tests/vm" -k "$kernel" -c "$g" -t 900 -- sh libtests/run || rc=$?
exit $rc
