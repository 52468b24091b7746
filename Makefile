# SPDX-License-Identifier: GPL-2.0
#
# stablesend: top-level build and test entry points.  `make help` lists them.

VERSION := $(shell sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' dkms.conf)
PREFIX ?= /usr/local
DESTDIR ?=
export STABLESEND_CACHE ?= /var/cache/stablesend

# Kernel to build the module for with `make all`/`sparse`: the running one,
# else the newest whose headers are installed.
KVER ?= $(shell if [ -d /lib/modules/$$(uname -r)/build ]; then uname -r; \
	  else ls -d /lib/modules/*/build 2>/dev/null | sort -V | tail -1 | \
	  cut -d/ -f4; fi)
KDIR ?= /lib/modules/$(KVER)/build

KERNEL_SRC_PKG := linux-source-6.12
CHECKPATCH := $(STABLESEND_CACHE)/checkpatch/scripts/checkpatch.pl
KSOURCES := $(wildcard module/*.[ch] module/compat/*.[ch]) uapi/linux/stablesend.h

.PHONY: all module lib check check-host demo install dkms-install dkms-remove \
	style sparse clean help deps bench fuzz integration deb deb-test \
	check-full

all: module lib

help:
	@echo "make demo          boot a stock Debian kernel in QEMU, show stable sends"
	@echo "make check         style, sparse, host tests, the QEMU kernel matrix"
	@echo "make check-full    make check + the suite on a 6.1 debug kernel (sendpage path under fault injection; +20 min, not in CI)"
	@echo "make all           module (KVER=$(KVER)), library and tool"
	@echo "make install       library, headers, tool, man pages (PREFIX, DESTDIR)"
	@echo "make dkms-install  register, build and install the module with DKMS"
	@echo "make style|sparse  checkpatch --strict / sparse over module/ and uapi/"
	@echo "make bench         every way to send a file, side by side, on the three kernels (BENCH_ARGS='--quick -k 6.12')"
	@echo "make fuzz          fuzz.c and trinity, FUZZ_SCALE=10 times the make check budget, every kernel (FUZZ_ARGS='-k 6.12')"
	@echo "make integration   nginx, lighttpd, apache2, smbd of Debian 12 with and without libstablesend-preload.so, three kernels (INTEGRATION_ARGS='-k 6.12 -s nginx')"
	@echo "make deb           Debian packages (stablesend-dkms, libstablesend0, -dev, stablesend) + lintian, into DEB_DIR=$(DEB_DIR)"
	@echo "make deb-test      make deb, then install, reboot, upgrade the kernel, purge in Debian 12 and 13 guests (tests/integration/packages)"
	@echo "tests/vm --help    run anything in a guest"

module:
	@test -d "$(KDIR)" || { echo "no kernel headers at $(KDIR): apt-get install linux-headers-$(KVER)" >&2; exit 1; }
	$(MAKE) -C module KDIR=$(KDIR) W=1

lib:
	$(MAKE) -C lib

deps:
	@tests/harness/deps host

check:
	@tests/harness/deps host
	@tests/harness/deps deb
	@tests/check

# make check with a fifth kernel, a 6.1 debug kernel: over CI's time budget.
check-full:
	@tests/harness/deps host
	@tests/harness/deps deb
	@tests/check -k 6.1 -k 6.12 -k newest -k debug -k debug-6.1

demo:
	@tests/harness/deps host
	@tests/demo/run

bench:
	@tests/harness/deps host
	@tests/bench/run $(BENCH_ARGS)

# Debian packages from a clean copy of the tree (lib/debian, lib/mkdeb).
DEB_DIR ?= $(STABLESEND_CACHE)/deb
deb:
	@tests/harness/deps deb
	@lib/mkdeb $(DEB_DIR)

deb-test: deb
	@tests/harness/deps host
	@DEB_DIR=$(DEB_DIR) tests/integration/packages $(DEB_TEST_ARGS)

# Debian 12's servers and clients in a guest, over the preload.
integration:
	@tests/harness/deps host
	$(MAKE) -C lib libstablesend-preload.so
	@tests/integration/run $(INTEGRATION_ARGS)

# The in-guest fuzzers with FUZZ_SCALE times their make check budget (and
# timeout): copies of fuzz.c and trinity.sh with the scale written in.
FUZZ_SCALE ?= 10
FUZZ_DIR := $(STABLESEND_CACHE)/work/fuzz-tests
fuzz:
	@tests/harness/deps host
	rm -rf $(FUZZ_DIR) && mkdir -p $(FUZZ_DIR)
	ln -s $(CURDIR)/tests/guest/*.h $(FUZZ_DIR)/
	t=$$((180 * $(FUZZ_SCALE) + 90)); \
	sed -e 's/^#define FUZZ_SCALE\t1$$/#define FUZZ_SCALE\t$(FUZZ_SCALE)/' \
		-e "s/test-timeout: [0-9]*/test-timeout: $$t/" tests/guest/fuzz.c >$(FUZZ_DIR)/fuzz.c && \
	sed -e 's/^scale=1$$/scale=$(FUZZ_SCALE)/' \
		-e "s/test-timeout: [0-9]*/test-timeout: $$t/" tests/guest/trinity.sh >$(FUZZ_DIR)/trinity.sh && \
	grep -q '^#define FUZZ_SCALE.$(FUZZ_SCALE)$$' $(FUZZ_DIR)/fuzz.c && \
	grep -q '^scale=$(FUZZ_SCALE)$$' $(FUZZ_DIR)/trinity.sh
	@tests/run-matrix --tests $(FUZZ_DIR) --no-selftests $(FUZZ_ARGS)

install: lib
	$(MAKE) -C lib install PREFIX=$(PREFIX) DESTDIR=$(DESTDIR)

.PHONY: uninstall
uninstall:
	$(MAKE) -C lib uninstall PREFIX=$(PREFIX) DESTDIR=$(DESTDIR)

# The module source DKMS builds from: dkms.conf, module/ and uapi/.
dkms-install:
	rm -rf /usr/src/stablesend-$(VERSION)
	mkdir -p /usr/src/stablesend-$(VERSION)
	cp -r dkms.conf module uapi /usr/src/stablesend-$(VERSION)/
	dkms remove -m stablesend -v $(VERSION) --all >/dev/null 2>&1 || true
	dkms add -m stablesend -v $(VERSION)
	dkms install -m stablesend -v $(VERSION) -k $(KVER)

dkms-remove:
	dkms remove -m stablesend -v $(VERSION) --all
	rm -rf /usr/src/stablesend-$(VERSION)

$(CHECKPATCH):
	@tests/harness/deps style
	mkdir -p $(STABLESEND_CACHE)/checkpatch
	tar -xJf /usr/src/$(KERNEL_SRC_PKG).tar.xz --strip-components=1 \
		-C $(STABLESEND_CACHE)/checkpatch \
		$(KERNEL_SRC_PKG)/scripts/checkpatch.pl \
		$(KERNEL_SRC_PKG)/scripts/spelling.txt \
		$(KERNEL_SRC_PKG)/scripts/const_structs.checkpatch

style: $(CHECKPATCH)
	$(CHECKPATCH) --strict --no-tree --show-types -f $(KSOURCES)

# sparse and W=1 over every file (C=2), failing on any warning.
sparse:
	@command -v sparse >/dev/null || tests/harness/deps style
	@test -d "$(KDIR)" || { echo "no kernel headers at $(KDIR)" >&2; exit 1; }
	$(MAKE) -C module KDIR=$(KDIR) clean >/dev/null
	$(MAKE) -C $(KDIR) M=$(CURDIR)/module C=2 CHECK=sparse W=1 modules 2>&1 | \
		tee module/.sparse.log
	@$(MAKE) -C module KDIR=$(KDIR) clean >/dev/null
	@! grep -E '(warning|error):' module/.sparse.log

clean:
	-$(MAKE) -C module KDIR=$(KDIR) clean
	$(MAKE) -C lib clean
