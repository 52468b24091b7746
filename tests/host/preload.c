// SPDX-License-Identifier: MIT
/*
 * libstablesend-preload.so in an unmodified program: this one calls libc's
 * sendfile() and sendfile64() and links nothing of stablesend.  Run
 * without arguments it re-executes itself for each scenario, with
 * LD_PRELOAD and the STABLESEND_PRELOAD_* knobs set or not, and judges the
 * children's output:
 *
 *  - interposed: both symbols of a preloaded child resolve to the preload;
 *  - stable: A is sent, the file is overwritten with B right after the
 *    call, the peer reads A (AF_UNIX and TCP, sendfile and sendfile64);
 *    the same child without LD_PRELOAD is the control and must read B
 *    (this kernel's sendfile hands page-cache pages by reference), which
 *    shows the check can fail.  DISABLE=1 and MIN above the size must give
 *    B as well (passed through), MIN at the size A; garbage in MIN is
 *    reported and ignored.  Pipes and UDP pass through: their result is
 *    the control's (B here, so a stable copy would be caught);
 *  - contract: each call made through the preload and, side by side on
 *    fresh fds, as the raw system call: same result, errno, *offset, file
 *    position, bytes (NULL and non-NULL offset, EOF, count 0, EBADF,
 *    EINVAL, ESPIPE, EAGAIN on a full non-blocking socket, O_APPEND; into
 *    AF_UNIX, TCP, UDP, a pipe, a file), a short count on a non-blocking
 *    socket with some room (and on an AF_UNIX one with room but no
 *    POLLOUT), and an O_DIRECT input (passed through);
 *  - log: STABLESEND_PRELOAD_LOG=1 prints exactly one line per process
 *    (threads share it, a forked child prints its own) naming the path;
 *    a path value writes the file instead; without it nothing is printed.
 *
 * Here it runs without the module (the copy path).  The integration tier
 * runs it again in a guest with the module loaded and
 * STABLESEND_EXPECT_PATH=module, where every call first goes to the module
 * and the module's refusals decide what passes through.
 */
#include <dlfcn.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "common.h"

#ifndef PRELOAD_PATH
#error "PRELOAD_PATH: the built libstablesend-preload.so, from the Makefile"
#endif

#define SEED_SIZE	65536	/* fits the socket buffers unread */
#define FILE_SIZE	(1024 * 1024 + 12345)

extern char **environ;

typedef ssize_t (*sendfile_fn)(int, int, off_t *, size_t);

static ssize_t call_sendfile(int out, int in, off_t *off, size_t count)
{
	return sendfile(out, in, off, count);
}

static ssize_t call_sendfile64(int out, int in, off_t *off, size_t count)
{
	return sendfile64(out, in, off, count);
}

/* The kernel's sendfile, whatever is preloaded. */
static ssize_t sys_sendfile(int out, int in, off_t *off, size_t count)
{
	return syscall(SYS_sendfile, out, in, off, count);
}

/* ---- children ---- */

static void child_interposed(void)
{
	Dl_info a, b;

	if (!dladdr((void *)sendfile, &a) || !dladdr((void *)sendfile64, &b))
		DIE("dladdr");
	printf("sendfile %s\nsendfile64 %s\n", a.dli_fname, b.dli_fname);
}

static int udp_pair(int fds[2])
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fds[0] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	fds[1] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fds[0] < 0 || fds[1] < 0 ||
	    bind(fds[1], (struct sockaddr *)&sin, len) ||
	    getsockname(fds[1], (struct sockaddr *)&sin, &len) ||
	    connect(fds[0], (struct sockaddr *)&sin, len))
		DIE("udp");
	return 0;
}

/*
 * Bytes of the received data that are not A; -1 if the family is
 * unavailable.  family 0: a pipe; -1: UDP, in datagrams of 4 KiB.
 */
static long seed_run(int family, sendfile_fn fn)
{
	static unsigned char a[SEED_SIZE], b[SEED_SIZE], got[SEED_SIZE + 1];
	int fds[2], fd, in, out;
	size_t len = 0, i;
	off_t off = 0;
	long diff = 0;
	ssize_t n;

	memset(a, 'A', sizeof(a));
	memset(b, 'B', sizeof(b));
	if (!family) {
		if (pipe2(fds, O_CLOEXEC))
			DIE("pipe");
		fcntl(fds[1], F_SETPIPE_SZ, SEED_SIZE);
		in = fds[0];
		out = fds[1];
	} else if (family < 0) {
		udp_pair(fds);
		setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &(int){ 1 << 20 },
			   sizeof(int));
		in = fds[1];
		out = fds[0];
	} else {
		if (stream_pair(family, fds))
			return -1;
		in = fds[1];
		out = fds[0];
	}
	fd = tmpfile_fd(0, 0);
	if (pwrite(fd, a, sizeof(a), 0) != sizeof(a))
		DIE("pwrite A");
	while (off < SEED_SIZE) {
		n = fn(out, fd, &off, family < 0 ? 4096 : SEED_SIZE - off);
		if (n <= 0)
			DIE("sendfile: %zd", n);
	}
	/* The call returned: rewrite the file in place, then receive. */
	if (pwrite(fd, b, sizeof(b), 0) != sizeof(b))
		DIE("pwrite B");
	close(out);
	while ((n = family < 0 ?
		    recv(in, got + len, sizeof(got) - len, MSG_DONTWAIT) :
		    read(in, got + len, sizeof(got) - len)) > 0)
		len += n;
	if (n < 0 && family < 0 && errno == EAGAIN)
		n = 0;
	if (n < 0)
		DIE("read");
	close(in);
	close(fd);
	if (len != SEED_SIZE)
		return SEED_SIZE;
	for (i = 0; i < len; i++)
		diff += got[i] != 'A';
	return diff;
}

/* One line per output and function: "<name> <bytes not A>". */
static void child_seed(void)
{
	static const struct { int family; const char *name; } outs[] = {
		{ AF_UNIX, "unix" }, { AF_INET, "tcp4" }, { 0, "pipe" },
		{ -1, "udp" },
	};
	unsigned int i;

	for (i = 0; i < sizeof(outs) / sizeof(outs[0]); i++) {
		printf("%s/sendfile %ld\n", outs[i].name,
		       seed_run(outs[i].family, call_sendfile));
		printf("%s/sendfile64 %ld\n", outs[i].name,
		       seed_run(outs[i].family, call_sendfile64));
	}
}

enum in_kind { IN_FILE, IN_WRONLY, IN_PIPE, IN_CLOSED };
enum out_mod { OUT_OK, OUT_APPEND, OUT_CLOSED, OUT_NB_FULL, OUT_NB_POLLFULL };
enum out_kind { K_UNIX, K_TCP4, K_UDP, K_PIPE, K_FILE, K_N };

static const char *const kind_names[] = { "unix", "tcp4", "udp", "pipe",
					  "file" };

struct tcase {
	const char *name;
	enum in_kind in;
	int use_off;
	long long start;
	size_t count;
	enum out_mod out;
};

#define END	FILE_SIZE

static const struct tcase cases[] = {
	{ "off 0, 1000",		IN_FILE, 1, 0, 1000, OUT_OK },
	{ "pos 777, 5000",		IN_FILE, 0, 777, 5000, OUT_OK },
	{ "off 4097, whole rest",	IN_FILE, 1, 4097, END, OUT_OK },
	{ "pos 0, whole file",		IN_FILE, 0, 0, END, OUT_OK },
	{ "off past EOF",		IN_FILE, 1, END + 100, 10, OUT_OK },
	{ "off at EOF",			IN_FILE, 1, END, 10, OUT_OK },
	{ "pos at EOF",			IN_FILE, 0, END, 10, OUT_OK },
	{ "short file, off",		IN_FILE, 1, END - 333, 100000, OUT_OK },
	{ "short file, pos",		IN_FILE, 0, END - 333, 100000, OUT_OK },
	{ "off, count 0",		IN_FILE, 1, 100, 0, OUT_OK },
	{ "pos, count 0",		IN_FILE, 0, 100, 0, OUT_OK },
	{ "negative offset",		IN_FILE, 1, -1, 10, OUT_OK },
	{ "offset + count overflows",	IN_FILE, 1, LLONG_MAX - 5, 10, OUT_OK },
	{ "count SIZE_MAX",		IN_FILE, 1, 3, SIZE_MAX, OUT_OK },
	{ "pipe in, off",		IN_PIPE, 1, 0, 10, OUT_OK },
	{ "write-only in",		IN_WRONLY, 1, 0, 10, OUT_OK },
	{ "closed in",			IN_CLOSED, 1, 0, 10, OUT_OK },
	{ "closed out",			IN_FILE, 1, 0, 10, OUT_CLOSED },
	{ "O_APPEND out",		IN_FILE, 1, 0, 10, OUT_APPEND },
	{ "non-blocking out, full",	IN_FILE, 1, 0, 1000, OUT_NB_FULL },
	{ "non-blocking out, no POLLOUT", IN_FILE, 1, 0, 1000, OUT_NB_POLLFULL },
};

struct result {
	ssize_t ret;
	int err;
	long long off, pos;
	unsigned char *data;
	size_t len;
};

static int data_fd;
static int compared;

/* UDP: what arrived (loopback delivers during the send), no waiting. */
static void udp_drain(int fd, struct result *r)
{
	static unsigned char buf[65536];
	ssize_t n;

	while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		r->data = realloc(r->data, r->len + n);
		if (!r->data)
			DIE("realloc");
		memcpy(r->data + r->len, buf, n);
		r->len += n;
	}
}

static void run_one(const struct tcase *c, enum out_kind k, sendfile_fn fn,
		    struct result *r)
{
	int in = -1, pipe_w = -1, out = -1, rd = -1, fds[2], file = -1;
	struct sink sink;
	off_t off = c->start;

	memset(r, 0, sizeof(*r));
	switch (k) {
	case K_UNIX:
	case K_TCP4:
		if (stream_pair(k == K_UNIX ? AF_UNIX : AF_INET, fds))
			DIE("stream pair");
		out = fds[0];
		rd = fds[1];
		break;
	case K_UDP:
		udp_pair(fds);
		out = fds[0];
		break;
	case K_PIPE:
		if (pipe2(fds, O_CLOEXEC))
			DIE("pipe");
		out = fds[1];
		rd = fds[0];
		break;
	case K_FILE:
		file = tmpfile_fd(0, 0);
		out = reopen(file, O_WRONLY);
		break;
	default:
		abort();
	}
	if (c->out == OUT_APPEND && fcntl(out, F_SETFL, O_APPEND))
		DIE("O_APPEND");
	if (c->out == OUT_NB_FULL) {
		static const char junk[4096];

		if (fcntl(out, F_SETFL, O_NONBLOCK))
			DIE("O_NONBLOCK");
		while (write(out, junk, sizeof(junk)) > 0)
			;
		while (write(out, junk, 1) > 0)
			;
	}
	if (c->out == OUT_NB_POLLFULL) {
		/* Just past where poll() stops saying POLLOUT: room is left. */
		static const char junk[4096];
		struct pollfd p = { .fd = out, .events = POLLOUT };

		if (fcntl(out, F_SETFL, O_NONBLOCK))
			DIE("O_NONBLOCK");
		while (poll(&p, 1, 0) == 1 && write(out, junk, sizeof(junk)) > 0)
			;
	}
	if (rd >= 0 && c->out != OUT_NB_FULL && c->out != OUT_NB_POLLFULL)
		sink_start(&sink, rd);

	switch (c->in) {
	case IN_FILE:
		in = reopen(data_fd, O_RDONLY);
		if (!c->use_off && lseek(in, c->start, SEEK_SET) < 0)
			DIE("lseek");
		break;
	case IN_WRONLY:
		in = reopen(data_fd, O_WRONLY);
		break;
	case IN_PIPE:
		if (pipe2(fds, O_CLOEXEC))
			DIE("pipe");
		if (write(fds[1], "0123456789abcdef", 16) != 16)
			DIE("write pipe");
		in = fds[0];
		pipe_w = fds[1];
		break;
	case IN_CLOSED:
		break;
	}
	errno = 0;
	r->ret = fn(c->out == OUT_CLOSED ? -1 : out, in,
		    c->use_off ? &off : NULL, c->count);
	r->err = r->ret < 0 ? errno : 0;
	r->off = off;
	r->pos = in >= 0 ? lseek(in, 0, SEEK_CUR) : -1;
	if ((c->out == OUT_NB_FULL || c->out == OUT_NB_POLLFULL) && rd >= 0)
		sink_start(&sink, rd);
	if (k == K_UDP)
		udp_drain(fds[1], r);
	close(out);
	if (rd < 0 && k == K_UDP)
		close(fds[1]);
	else
		output_collect(rd, &sink, file, &r->data, &r->len);
	if (in >= 0)
		close(in);
	if (pipe_w >= 0)
		close(pipe_w);
}

static void compare(const struct tcase *c, enum out_kind k, sendfile_fn fn,
		    const char *fname)
{
	struct result want, got;

	run_one(c, k, sys_sendfile, &want);
	run_one(c, k, fn, &got);
	/*
	 * Into a pipe, sendfile(2) moves what fits at once, ending on a page
	 * boundary, and the copy path up to the pipe size: the same data, a
	 * different short count.  (Pipes pass through the preload, but the
	 * raw call and the libc call are not the same here either.)
	 */
	if (k == K_PIPE && want.ret > 0 && got.ret > 0 &&
	    (size_t)got.ret <= c->count) {
		want.ret = got.ret;
		if (c->use_off)
			want.off = c->start + got.ret;
		else
			want.pos = c->start + got.ret;
		if (want.len > got.len)
			want.len = got.len;
	}
	CHECK(got.ret == want.ret && got.err == want.err &&
	      got.off == want.off && got.pos == want.pos &&
	      got.len == want.len && !memcmp(got.data, want.data, got.len),
	      "%s, %s, %s: preload %zd errno %d off %lld pos %lld %zu bytes; "
	      "kernel %zd errno %d off %lld pos %lld %zu bytes", c->name,
	      kind_names[k], fname, got.ret, got.err, got.off, got.pos,
	      got.len, want.ret, want.err, want.off, want.pos, want.len);
	free(want.data);
	free(got.data);
	compared++;
}

/* A non-blocking socket with a little room: a short count, then EAGAIN. */
static void partial(sendfile_fn fn, const char *fname)
{
	int fds[2], in = reopen(data_fd, O_RDONLY);
	off_t off = 10;
	struct sink s;
	ssize_t n;
	size_t i;

	stream_pair(AF_UNIX, fds);
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &(int){ 8192 }, sizeof(int));
	n = fn(fds[0], in, &off, END);
	CHECK(n > 0 && n < END && off == 10 + n, "%s partial: %zd, off %lld",
	      fname, n, (long long)off);
	CHECK(lseek(in, 0, SEEK_CUR) == 0, "%s partial: position moved", fname);
	errno = 0;
	while ((n = fn(fds[0], in, &off, END)) > 0)
		;
	CHECK(n == -1 && errno == EAGAIN, "%s full: %zd %s", fname, n,
	      strerror(errno));
	sink_start(&s, fds[1]);
	close(fds[0]);
	sink_finish(&s);
	CHECK(s.len == (size_t)off - 10, "%s: received %zu", fname, s.len);
	for (i = 0; i < s.len; i++)
		if (s.buf[i] != pat(10 + i, 9))
			break;
	CHECK(i == s.len, "%s partial: byte %zu wrong", fname, i);
	free(s.buf);
	close(in);
}

/* O_DIRECT input (where the file system has it): as the kernel does. */
static void o_direct(void)
{
	char path[64];
	int in, fds[2];
	off_t off = 0;
	ssize_t n;

	if (fsync(data_fd))
		DIE("fsync");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", data_fd);
	in = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (in < 0) {
		printf("O_DIRECT: not supported here, skipped\n");
		return;
	}
	stream_pair(AF_UNIX, fds);
	n = sendfile(fds[0], in, &off, 8192);
	CHECK(n == 8192 && off == 8192, "O_DIRECT: %zd (%s)", n,
	      n < 0 ? strerror(errno) : "");
	compared++;
	close(fds[0]);
	close(fds[1]);
	close(in);
}

static void child_contract(void)
{
	unsigned int i, k;

	data_fd = tmpfile_fd(FILE_SIZE, 9);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (k = 0; k < K_N; k++) {
			/* a UDP socket is not "full"; a file is never */
			if (cases[i].out == OUT_NB_FULL &&
			    (k == K_UDP || k == K_FILE))
				continue;
			/*
			 * Room left where poll() says none: AF_UNIX (a
			 * quarter of the send buffer).  SEND refuses TCP
			 * there, without a copy (documented).
			 */
			if (cases[i].out == OUT_NB_POLLFULL && k != K_UNIX)
				continue;
			compare(&cases[i], k, call_sendfile, "sendfile");
			compare(&cases[i], k, call_sendfile64, "sendfile64");
		}
	}
	partial(call_sendfile, "sendfile");
	partial(call_sendfile64, "sendfile64");
	o_direct();
	printf("contract: %d calls compared with the kernel's\n", compared);
}

static void *log_thread(void *arg)
{
	long r = seed_run(AF_UNIX, (sendfile_fn)arg);

	return (void *)r;
}

/*
 * Calls from the main thread, two threads and a forked child, the first a
 * pass-through one.  Stable unless STABLESEND_PRELOAD_DISABLE is set.
 */
static void child_log(void)
{
	long want = getenv("STABLESEND_PRELOAD_DISABLE") ? -1 : 0;
	pthread_t t[2];
	void *r;
	pid_t pid;
	int st, i;

	char **e;

	/*
	 * As nginx does for its process title: the strings getenv() pointed
	 * into are overwritten after start-up; the log still goes where
	 * STABLESEND_PRELOAD_LOG said.
	 */
	for (e = environ; *e; e++)
		memset(*e, 0, strlen(*e));
	printf("pid %d\n", (int)getpid());
	CHECK(seed_run(0, call_sendfile) >= 0, "pipe");	/* passes through */
	CHECK(seed_run(AF_UNIX, call_sendfile) == 0 || want, "unstable");
	for (i = 0; i < 2; i++)
		if ((errno = pthread_create(&t[i], NULL, log_thread,
					    i ? (void *)call_sendfile64 :
					    (void *)call_sendfile)))
			DIE("pthread_create");
	for (i = 0; i < 2; i++) {
		pthread_join(t[i], &r);
		CHECK(r == NULL || want, "thread %d unstable", i);
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		DIE("fork");
	if (!pid) {
		printf("pid %d\n", (int)getpid());
		CHECK(seed_run(AF_INET, call_sendfile64) == 0 || want,
		      "unstable");
		CHECK(seed_run(AF_INET, call_sendfile) == 0 || want,
		      "unstable");
		fflush(stdout);
		_exit(t_result());
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		CHECK(0, "forked child failed: %#x", st);
}

/* ---- the parent: scenarios ---- */

struct out {
	int status;
	char *out, *err;	/* stdout, stderr */
};

static char *slurp(int fd)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	ssize_t n;

	if (!buf)
		DIE("malloc");
	lseek(fd, 0, SEEK_SET);
	while ((n = read(fd, buf + len, cap - len - 1)) > 0) {
		len += n;
		if (cap - len < 2) {
			cap *= 2;
			buf = realloc(buf, cap);
			if (!buf)
				DIE("realloc");
		}
	}
	buf[len] = 0;
	close(fd);
	return buf;
}

/*
 * Run this program as "self CASE" with the knobs of env (NAME=VALUE,
 * NULL-terminated) on top of ours, minus LD_PRELOAD and STABLESEND_*;
 * preload: with LD_PRELOAD.
 */
static void spawn(const char *what, const char *cs, int preload,
		  const char *const *env, struct out *o)
{
	static char self[PATH_MAX];
	char *argv[] = { self, (char *)cs, NULL };
	char **nenv;
	int fo = tmpfile_fd(0, 0), fe = tmpfile_fd(0, 0), n = 0, i;
	pid_t pid;
	ssize_t l;

	l = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (l < 0)
		DIE("readlink");
	self[l] = 0;
	for (i = 0; environ[i]; i++)
		;
	nenv = calloc(i + 16, sizeof(*nenv));
	if (!nenv)
		DIE("calloc");
	for (i = 0; environ[i]; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) &&
		    strncmp(environ[i], "STABLESEND_", 11))
			nenv[n++] = environ[i];
	if (preload)
		nenv[n++] = "LD_PRELOAD=" PRELOAD_PATH;
	for (i = 0; env && env[i]; i++)
		nenv[n++] = (char *)env[i];

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		DIE("fork");
	if (!pid) {
		dup2(fo, 1);
		dup2(fe, 2);
		execve(self, argv, nenv);
		_exit(127);
	}
	free(nenv);
	if (waitpid(pid, &o->status, 0) != pid)
		DIE("waitpid");
	o->out = slurp(fo);
	o->err = slurp(fe);
	if (!WIFEXITED(o->status) || WEXITSTATUS(o->status)) {
		CHECK(0, "%s: child exited %#x", what, o->status);
		fprintf(stderr, "--- %s stdout:\n%s--- stderr:\n%s---\n", what,
			o->out, o->err);
	}
}

static void out_free(struct out *o)
{
	free(o->out);
	free(o->err);
}

/* The number in "name N" of a seed child's output, or -2. */
static long seed_val(const struct out *o, const char *name)
{
	size_t nl = strlen(name);
	const char *p = o->out;

	while ((p = strstr(p, name))) {
		if ((p == o->out || p[-1] == '\n') && p[nl] == ' ')
			return strtol(p + nl + 1, NULL, 10);
		p += nl;
	}
	return -2;
}

static int count_lines(const char *s, const char *prefix)
{
	int n = 0;

	for (; s && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : "")
		n += !strncmp(s, prefix, strlen(prefix));
	return n;
}

static void seeds(void)
{
	static const char *const names[] = {
		"unix/sendfile", "unix/sendfile64", "tcp4/sendfile",
		"tcp4/sendfile64",
	};
	static const char *const passed[] = {
		"pipe/sendfile", "pipe/sendfile64", "udp/sendfile",
		"udp/sendfile64",
	};
	static const char *const min_above[] = {
		"STABLESEND_PRELOAD_MIN=65537", NULL };
	static const char *const min_at[] = {
		"STABLESEND_PRELOAD_MIN=65536", NULL };
	static const char *const min_bad[] = {
		"STABLESEND_PRELOAD_MIN=64k", NULL };
	static const char *const disable[] = {
		"STABLESEND_PRELOAD_DISABLE=1", NULL };
	struct out ctl, pre, off, above, at, bad;
	unsigned int i;

	spawn("control", "seed", 0, NULL, &ctl);
	spawn("preload", "seed", 1, NULL, &pre);
	spawn("disable", "seed", 1, disable, &off);
	spawn("min above", "seed", 1, min_above, &above);
	spawn("min at", "seed", 1, min_at, &at);
	spawn("min garbage", "seed", 1, min_bad, &bad);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		long c = seed_val(&ctl, names[i]);

		printf("%-16s B bytes after rewrite: control %ld, preload %ld, "
		       "DISABLE=1 %ld, MIN=65537 %ld, MIN=65536 %ld, "
		       "MIN=64k %ld\n", names[i], c, seed_val(&pre, names[i]),
		       seed_val(&off, names[i]), seed_val(&above, names[i]),
		       seed_val(&at, names[i]), seed_val(&bad, names[i]));
		CHECK(c > 0, "%s: control sendfile(2) without the preload was "
		      "stable (%ld): the test cannot tell", names[i], c);
		CHECK(seed_val(&pre, names[i]) == 0, "%s: preload unstable",
		      names[i]);
		CHECK(seed_val(&off, names[i]) > 0,
		      "%s: DISABLE=1 did not pass through", names[i]);
		CHECK(seed_val(&above, names[i]) > 0,
		      "%s: MIN=65537 did not pass through", names[i]);
		CHECK(seed_val(&at, names[i]) == 0, "%s: MIN=65536 unstable",
		      names[i]);
		CHECK(seed_val(&bad, names[i]) == 0, "%s: MIN=64k unstable",
		      names[i]);
	}
	/*
	 * Pipes and UDP pass through: whatever the kernel does, the same
	 * (on kernels that show the rewrite there, this tells the paths apart).
	 */
	for (i = 0; i < sizeof(passed) / sizeof(passed[0]); i++) {
		printf("%-16s B bytes after rewrite: control %ld, preload %ld "
		       "(passed through)\n", passed[i], seed_val(&ctl, passed[i]),
		       seed_val(&pre, passed[i]));
		CHECK(seed_val(&ctl, passed[i]) >= 0 &&
		      seed_val(&pre, passed[i]) == seed_val(&ctl, passed[i]),
		      "%s not passed through", passed[i]);
	}
	/* At load: valgrind's launcher, preloaded too, may say it first. */
	CHECK(count_lines(bad.err, "libstablesend-preload: ignoring "
			  "STABLESEND_PRELOAD_MIN=64k: ") >= 1,
	      "MIN=64k not reported: %s", bad.err);
	/* No log asked for: not a word. */
	CHECK(!strstr(pre.err, "libstablesend-preload") &&
	      !strstr(off.err, "libstablesend-preload"),
	      "unasked output: %s%s", pre.err, off.err);
	out_free(&ctl);
	out_free(&pre);
	out_free(&off);
	out_free(&above);
	out_free(&at);
	out_free(&bad);
}

/* Two lines, one per pid the child printed, all naming the same path. */
static void check_log(const char *what, const char *log, const char *out)
{
	char want[64];
	const char *p = out;
	int pids = 0;

	CHECK(count_lines(log, "libstablesend-preload[") == 2,
	      "%s: want 2 lines: %s", what, log);
	while ((p = strstr(p, "pid "))) {
		snprintf(want, sizeof(want), "libstablesend-preload[%ld] ",
			 strtol(p + 4, NULL, 10));
		CHECK(count_lines(log, want) == 1, "%s: %s: not once: %s",
		      what, want, log);
		pids++;
		p += 4;
	}
	CHECK(pids == 2, "%s: %d pids", what, pids);
	p = strstr(log, "path=");
	CHECK(p && strstr(p + 1, "path=") &&
	      !strncmp(p, strstr(p + 1, "path="), strcspn(p, " ")),
	      "%s: two paths: %s", what, log);
}

/* STABLESEND_EXPECT_PATH: the path the log must name (module, copy). */
static const char *expect_path;

static void logs(void)
{
	static const char *const log1[] = { "STABLESEND_PRELOAD_LOG=1", NULL };
	static const char *const logd[] = { "STABLESEND_PRELOAD_LOG=1",
		"STABLESEND_PRELOAD_DISABLE=1", NULL };
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char path[4096], env[4200];
	const char *logf[] = { env, NULL };
	struct out o;
	int fd;

	spawn("log", "log", 1, log1, &o);
	check_log("LOG=1", o.err, o.out);
	printf("LOG=1:\n%s", o.err);
	CHECK(strstr(o.err, "path=copy (") || strstr(o.err, "path=module ("),
	      "LOG=1 path: %s", o.err);
	if (expect_path) {
		snprintf(path, sizeof(path), "path=%s (", expect_path);
		CHECK(strstr(o.err, path), "LOG=1: want %s: %s", path, o.err);
	}
	out_free(&o);

	spawn("log disabled", "log", 1, logd, &o);
	check_log("LOG=1 DISABLE=1", o.err, o.out);
	CHECK(strstr(o.err, "path=pass-through ("), "%s", o.err);
	out_free(&o);

	snprintf(path, sizeof(path), "%s/stablesend-preload-log.XXXXXX", dir);
	fd = mkstemp(path);
	if (fd < 0)
		DIE("mkstemp");
	snprintf(env, sizeof(env), "STABLESEND_PRELOAD_LOG=%s", path);
	spawn("log file", "log", 1, logf, &o);
	{
		char *f = slurp(fd);

		check_log("LOG=file", f, o.out);
		CHECK(!strstr(o.err, "libstablesend-preload"),
		      "LOG=file wrote stderr: %s", o.err);
		free(f);
	}
	unlink(path);
	out_free(&o);
}

int main(int argc, char **argv)
{
	struct out o;

	if (argc == 2) {
		if (!strcmp(argv[1], "interposed"))
			child_interposed();
		else if (!strcmp(argv[1], "seed"))
			child_seed();
		else if (!strcmp(argv[1], "contract"))
			child_contract();
		else if (!strcmp(argv[1], "log"))
			child_log();
		else
			return T_FAIL;
		return t_result();
	}

	expect_path = getenv("STABLESEND_EXPECT_PATH");
	spawn("interposed", "interposed", 1, NULL, &o);
	CHECK(count_lines(o.out, "sendfile " PRELOAD_PATH) == 1 &&
	      count_lines(o.out, "sendfile64 " PRELOAD_PATH) == 1,
	      "not interposed: %s", o.out);
	out_free(&o);
	spawn("not interposed", "interposed", 0, NULL, &o);
	CHECK(!strstr(o.out, PRELOAD_PATH), "interposed without LD_PRELOAD");
	out_free(&o);

	seeds();

	spawn("contract", "contract", 1, NULL, &o);
	fputs(o.out, stdout);
	fputs(o.err, stderr);
	out_free(&o);

	logs();
	return t_result();
}
