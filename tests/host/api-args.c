// SPDX-License-Identifier: MIT
/*
 * Argument validation that needs no module, linked against the shared
 * library: NULL contexts, bad flags and fds, the version and feature
 * names; on a machine without /dev/stablesend also stablesend_open()
 * failing with ENOENT and STABLESEND_REQUIRE_MODULE=1 giving ENODEV.
 */
#include <sys/stat.h>

#include <stablesend.h>

#include "common.h"

int main(void)
{
	struct stablesend_req req;
	struct stablesend_cqe cqe;
	struct stablesend_counters c;
	int fds[2], fd;
	off_t off = 0;

	stablesend_prep_req(&req, 0, 1, 0, 1, 0);
	memset(&cqe, 0, sizeof(cqe));

	/* NULL context */
	CHECK_NEG(stablesend_submit(NULL, &req, 1), EINVAL);
	CHECK_NEG(stablesend_submit(NULL, NULL, 0), EINVAL);
	CHECK_NEG(stablesend_reap(NULL, &cqe, 1, 0), EINVAL);
	CHECK_NEG(stablesend_cancel(NULL, 1), EINVAL);
	CHECK_NEG(stablesend_counters(NULL, &c), EINVAL);
	CHECK_NEG(stablesend_fd(NULL), EINVAL);
	CHECK(stablesend_features(NULL) == 0, "features(NULL)");
	CHECK(stablesend_mem_limit(NULL) == 0, "mem_limit(NULL)");
	CHECK(stablesend_abi_version(NULL) == 0, "abi_version(NULL)");
	stablesend_close(NULL);

	/* open: flags and eventfd are checked before the device */
	CHECK_NULL_ERRNO(stablesend_open(-1, ~STABLESEND_OPEN_FLAGS), EINVAL);
	CHECK_NULL_ERRNO(stablesend_open(-1, 1U << 31), EINVAL);
	CHECK_NULL_ERRNO(stablesend_open(-2, 0), EBADF);

	/* misc */
	CHECK(!strncmp(stablesend_version(), "0.", 2) ||
	      strchr(stablesend_version(), '.'), "version %s",
	      stablesend_version());
	CHECK(!strcmp(stablesend_feature_name(STABLESEND_FEAT_SEND), "send"),
	      "feature name");
	CHECK(!strcmp(stablesend_feature_name(STABLESEND_FEAT_SPLICE_PAGES),
		      "splice_pages"), "feature name");
	CHECK(!strcmp(stablesend_feature_name(STABLESEND_FEAT_URING), "uring"),
	      "feature name");
	CHECK(!strcmp(stablesend_feature_name(STABLESEND_FEAT_SEND_SOCKFLAGS),
		      "send_sockflags"), "send_sockflags");
	CHECK(!stablesend_feature_name(0), "no name for 0");
	CHECK(!stablesend_feature_name(3), "no name for two bits");
	CHECK(!stablesend_feature_name(1ULL << 63), "no name for unknown");
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_NONE, "path");

	/* sendfile: bad fds as sendfile(2) */
	fd = tmpfile_fd(100, 0);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds))
		DIE("socketpair");
	CHECK_ERRNO(stablesend_sendfile(fds[0], -1, &off, 10), EBADF);
	CHECK_ERRNO(stablesend_sendfile(-1, fd, &off, 10), EBADF);
	CHECK_ERRNO(stablesend_sendfile(fds[0], 12345, NULL, 10), EBADF);
	CHECK_ERRNO(stablesend_sendfile(fds[0], fds[1], NULL, 10), EINVAL);
	CHECK_ERRNO(stablesend_sendfile(fds[0], fds[1], &off, 10), ESPIPE);
	CHECK(stablesend_sendfile(fds[0], fd, &off, 0) == 0, "count 0");

	/* Without the module: ENOENT, and ENODEV when it is required. */
	if (access(STABLESEND_DEVICE, F_OK) == 0) {
		printf("%s exists: skipping the no-module checks\n",
		       STABLESEND_DEVICE);
	} else {
		CHECK_NULL_ERRNO(stablesend_open(-1, 0), ENOENT);
		CHECK_NULL_ERRNO(stablesend_open_limit(-1, 0, 1 << 20), ENOENT);
		CHECK(stablesend_sendfile(fds[0], fd, &off, 10) == 10,
		      "fallback");
		CHECK(off == 10, "offset");
		CHECK(stablesend_sendfile_path() == STABLESEND_PATH_COPY,
		      "fallback path");
		setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
		CHECK_ERRNO(stablesend_sendfile(fds[0], fd, &off, 10), ENODEV);
		CHECK_ERRNO(stablesend_sendfile(fds[0], fd, &off, 0), ENODEV);
		CHECK(off == 10, "offset untouched");
		setenv(STABLESEND_ENV_REQUIRE_MODULE, "0", 1);
		CHECK(stablesend_sendfile(fds[0], fd, &off, 10) == 10,
		      "REQUIRE=0 allows the fallback");
	}
	close(fds[0]);
	close(fds[1]);
	close(fd);
	return t_result();
}
