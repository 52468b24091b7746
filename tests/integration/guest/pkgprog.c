// SPDX-License-Identifier: MIT
/*
 * pkgprog: built in the guest against the installed libstablesend-dev with
 * "cc pkgprog.c $(pkg-config --cflags --libs libstablesend)".  Sends a
 * 1 MiB file over an AF_UNIX stream with stablesend_sendfile(), rewrites
 * the file as soon as the call returns, and checks that the peer (a child
 * that starts reading 200 ms after the call began, so that the socket is
 * full when the call returns) got the old bytes, through the module
 * (STABLESEND_REQUIRE_MODULE=1 is set, so a fallback to the copy path is
 * an error, not a pass).  Exit 0 on success.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stablesend.h>
#include <linux/stablesend.h>	/* the uapi header, from the .pc's -I */

#define LEN (1 << 20)

static int receive(int s)
{
	static char got[LEN];
	size_t have = 0, i;
	ssize_t r;

	usleep(200 * 1000);
	while ((r = read(s, got + have, LEN - have)) > 0)
		have += r;
	for (i = 0; i < have; i++)
		if (got[i] != 'A')
			return fprintf(stderr, "pkgprog: byte %zu is '%c', not 'A'\n", i, got[i]), 1;
	if (have != LEN)
		return fprintf(stderr, "pkgprog: received %zu bytes, not %d\n", have, LEN), 1;
	return 0;
}

int main(void)
{
	static char buf[LEN];
	char path[] = "/tmp/pkgprog.XXXXXX";
	int sv[2], fd, path_used, st;
	off_t off = 0;
	ssize_t n;
	pid_t child;

	if (!stablesend_check_version(STABLESEND_VERSION_MAJOR, STABLESEND_VERSION_MINOR)) {
		fprintf(stderr, "pkgprog: library %s does not match the header\n",
			stablesend_version());
		return 1;
	}
	setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
	memset(buf, 'A', LEN);
	fd = mkstemp(path);
	if (fd < 0 || write(fd, buf, LEN) != LEN || unlink(path))
		return perror("pkgprog: file"), 1;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return perror("pkgprog: socketpair"), 1;
	child = fork();
	if (child < 0)
		return perror("pkgprog: fork"), 1;
	if (!child) {
		close(sv[0]);
		_exit(receive(sv[1]));
	}
	close(sv[1]);
	n = stablesend_sendfile(sv[0], fd, &off, LEN);
	if (n != LEN)
		return fprintf(stderr, "pkgprog: stablesend_sendfile: %zd (%s)\n", n,
			       n < 0 ? strerror(errno) : "short"), 1;
	path_used = stablesend_sendfile_path();
	memset(buf, 'B', LEN);
	if (pwrite(fd, buf, LEN, 0) != LEN)
		return perror("pkgprog: pwrite"), 1;
	close(sv[0]);
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st))
		return fprintf(stderr, "pkgprog: the receiver failed\n"), 1;
	printf("pkgprog: libstablesend %s, %zd bytes sent, received as before the overwrite, path %s\n",
	       stablesend_version(), n,
	       path_used == STABLESEND_PATH_MODULE ? "module" : "copy");
	return path_used == STABLESEND_PATH_MODULE ? 0 : 1;
}
