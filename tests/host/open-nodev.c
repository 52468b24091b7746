// SPDX-License-Identifier: MIT
/*
 * stablesend_open() and stablesend_sendfile() when the device node is
 * missing, has no driver behind it, or is something else.  Linked with
 * libstablesend.a to point the library at other paths; each case runs
 * in a child because the sendfile device is opened once per process.
 */
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include <stablesend.h>

#include "common.h"

extern const char *ss_device_path;	/* libstablesend.a internal */

static char tmpdir[4096];

/* Open fails with one of errs[]; sendfile falls back, or fails ENODEV. */
static void expect_absent(const char *path, int e1, int e2)
{
	int fd = tmpfile_fd(1000, 2), fds[2];
	struct stablesend *ss;
	off_t off = 0;
	char buf[1000];

	ss_device_path = path;
	errno = 0;
	ss = stablesend_open(-1, 0);
	CHECK(!ss && (errno == e1 || errno == e2), "%s: open gave %p %s",
	      path, (void *)ss, strerror(errno));
	if (ss)
		stablesend_close(ss);

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds))
		DIE("socketpair");
	CHECK(stablesend_sendfile(fds[0], fd, &off, 1000) == 1000,
	      "%s: fallback", path);
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_COPY, "path");
	CHECK(read(fds[1], buf, sizeof(buf)) == 1000 && buf[999] == (char)pat(999, 2),
	      "%s: bytes", path);
	setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
	off = 0;
	CHECK_ERRNO(stablesend_sendfile(fds[0], fd, &off, 1000), ENODEV);
	unsetenv(STABLESEND_ENV_REQUIRE_MODULE);
	close(fds[0]);
	close(fds[1]);
	close(fd);
}

static int run(const char *path, int e1, int e2)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	int status;

	if (pid < 0)
		DIE("fork");
	if (!pid) {
		expect_absent(path, e1, e2);
		exit(t_result());
	}
	if (waitpid(pid, &status, 0) < 0)
		DIE("waitpid");
	printf("%-40s %s\n", path, WIFEXITED(status) &&
	       !WEXITSTATUS(status) ? "ok" : "FAILED");
	return WIFEXITED(status) ? WEXITSTATUS(status) : T_FAIL;
}

int main(void)
{
	char path[4200];
	int fd;

	snprintf(tmpdir, sizeof(tmpdir), "%s/stablesend-nodev.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir))
		DIE("mkdtemp");

	/* no node */
	snprintf(path, sizeof(path), "%s/missing", tmpdir);
	CHECK(run(path, ENOENT, ENOENT) == 0, "missing");

	/* something else at the path: SETUP gives ENOTTY */
	CHECK(run("/dev/null", ENOTTY, ENOTTY) == 0, "/dev/null");
	snprintf(path, sizeof(path), "%s/file", tmpdir);
	fd = open(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0)
		DIE("create");
	close(fd);
	CHECK(run(path, ENOTTY, ENOTTY) == 0, "regular file");
	unlink(path);

	/* a node without a driver (major 240 is for local use) */
	snprintf(path, sizeof(path), "%s/nodriver", tmpdir);
	if (mknod(path, S_IFCHR | 0600, makedev(240, 77)) == 0) {
		CHECK(run(path, ENXIO, ENODEV) == 0, "no driver");
		unlink(path);
	} else {
		printf("%-40s skipped (mknod: %s)\n", "no driver",
		       strerror(errno));
	}
	rmdir(tmpdir);
	return t_result();
}
