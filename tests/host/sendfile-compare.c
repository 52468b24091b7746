// SPDX-License-Identifier: MIT
/*
 * stablesend_sendfile() against sendfile(2), side by side: the same call on
 * fresh, identical fds must give the same return value, errno, *offset,
 * file position and output bytes.  Output: AF_UNIX, TCP over IPv4 and IPv6
 * loopback, a regular file, a pipe.  Without the module this checks the
 * copy path; with it, the module path (falling back for files and pipes).
 * Inputs: a regular file, and in the guest a RAM disk (brd's /dev/ram0;
 * the module takes regular files only, so a block device goes through the
 * copy path).
 */
#include <limits.h>
#include <stdint.h>
#include <sys/sendfile.h>
#include <sys/stat.h>

#include <stablesend.h>

#include "common.h"

#define FILE_SIZE	(1024 * 1024 + 12345)

enum in_kind { IN_FILE, IN_WRONLY, IN_OPATH, IN_PIPE, IN_CLOSED, IN_BLK };
enum out_mod {
	OUT_OK, OUT_RDONLY, OUT_APPEND, OUT_CLOSED,
	OUT_NB,			/* O_NONBLOCK, empty */
	OUT_NB_FULL,		/* O_NONBLOCK, filled until EAGAIN */
};
enum out_kind { O_UNIX, O_TCP4, O_TCP6, O_FILE, O_PIPE, O_NKINDS };

static const char *const out_names[] = {
	"unix", "tcp4", "tcp6", "file", "pipe",
};

struct tcase {
	const char *name;
	enum in_kind in;
	int use_off;		/* pass &off, else NULL (file position) */
	long long start;	/* *offset, or the file position to seek to */
	size_t count;
	enum out_mod out;
};

#define END	FILE_SIZE

/* A block device input, holding the pattern over its first BLK_SIZE bytes. */
#define BLK_DEV		"/dev/ram0"
#define BLK_SIZE	(256 * 1024)

static const struct tcase cases[] = {
	{ "pos 0, 1000",		IN_FILE, 0, 0, 1000, OUT_OK },
	{ "pos 777, 5000",		IN_FILE, 0, 777, 5000, OUT_OK },
	{ "off 4097, 10000",		IN_FILE, 1, 4097, 10000, OUT_OK },
	{ "off 0, whole file",		IN_FILE, 1, 0, END, OUT_OK },
	{ "pos 0, whole file",		IN_FILE, 0, 0, END, OUT_OK },
	{ "off past EOF",		IN_FILE, 1, END + 100, 10, OUT_OK },
	{ "off at EOF",			IN_FILE, 1, END, 10, OUT_OK },
	{ "pos at EOF",			IN_FILE, 0, END, 10, OUT_OK },
	{ "pos past EOF",		IN_FILE, 0, END + 4096, 10, OUT_OK },
	{ "off, count 0",		IN_FILE, 1, 100, 0, OUT_OK },
	{ "pos, count 0",		IN_FILE, 0, 100, 0, OUT_OK },
	{ "short file, off",		IN_FILE, 1, END - 333, 100000, OUT_OK },
	{ "short file, pos",		IN_FILE, 0, END - 333, 100000, OUT_OK },
	{ "unaligned 1+4095",		IN_FILE, 1, 1, 4095, OUT_OK },
	{ "unaligned 4095+2",		IN_FILE, 1, 4095, 2, OUT_OK },
	{ "unaligned 65535+65538",	IN_FILE, 1, 65535, 65538, OUT_OK },
	{ "unaligned 12345+200001",	IN_FILE, 0, 12345, 200001, OUT_OK },
	{ "off 0, count SSIZE_MAX",	IN_FILE, 1, 0, SSIZE_MAX, OUT_OK },
	{ "pos 5, count INT_MAX+1",	IN_FILE, 0, 5, 1UL << 31, OUT_OK },
	{ "count SSIZE_MAX, overflows",	IN_FILE, 1, 3, SSIZE_MAX, OUT_OK },
	{ "count SIZE_MAX",		IN_FILE, 1, 3, SIZE_MAX, OUT_OK },
	{ "negative offset",		IN_FILE, 1, -1, 10, OUT_OK },
	{ "offset + count overflows",	IN_FILE, 1, LLONG_MAX - 5, 10, OUT_OK },
	{ "pipe in, pos",		IN_PIPE, 0, 0, 10, OUT_OK },
	{ "pipe in, off",		IN_PIPE, 1, 0, 10, OUT_OK },
	{ "write-only in, pos",		IN_WRONLY, 0, 0, 10, OUT_OK },
	{ "write-only in, off",		IN_WRONLY, 1, 0, 10, OUT_OK },
	{ "O_PATH in",			IN_OPATH, 1, 0, 10, OUT_OK },
	{ "closed in",			IN_CLOSED, 1, 0, 10, OUT_OK },
	{ "closed out",			IN_FILE, 1, 0, 10, OUT_CLOSED },
	{ "read-only out",		IN_FILE, 1, 0, 10, OUT_RDONLY },
	{ "O_APPEND out",		IN_FILE, 1, 0, 10, OUT_APPEND },
	{ "non-blocking out, whole",	IN_FILE, 1, 0, END, OUT_NB },
	{ "non-blocking out, full",	IN_FILE, 1, 0, 1000, OUT_NB_FULL },
	{ "block dev, off 4097, 10000",	IN_BLK, 1, 4097, 10000, OUT_OK },
	{ "block dev, pos 777, 200001",	IN_BLK, 0, 777, 200001, OUT_OK },
};

struct result {
	ssize_t ret;
	int err;
	long long off;		/* *offset after the call */
	long long pos;		/* in_fd position after, -1 if none */
	unsigned char *data;
	size_t len;
	int path;		/* stablesend_sendfile_path() after */
};

typedef ssize_t (*sendfile_fn)(int, int, off_t *, size_t);

static int data_fd;
static int have_module;
static int blk_fd = -1;
static int blk_required;	/* the guest test, which loaded brd */

static int open_in(const struct tcase *c, int *pipe_w)
{
	int fds[2], fd;

	*pipe_w = -1;
	switch (c->in) {
	case IN_FILE:
		fd = reopen(data_fd, O_RDONLY);
		if (!c->use_off && lseek(fd, c->start, SEEK_SET) < 0)
			DIE("lseek");
		return fd;
	case IN_WRONLY:
		return reopen(data_fd, O_WRONLY);
	case IN_OPATH:
		return reopen(data_fd, O_PATH);
	case IN_PIPE:
		if (pipe2(fds, O_CLOEXEC))
			DIE("pipe");
		if (write(fds[1], "0123456789abcdef", 16) != 16)
			DIE("write pipe");
		*pipe_w = fds[1];
		return fds[0];
	case IN_BLK:
		fd = reopen(blk_fd, O_RDONLY);
		if (!c->use_off && lseek(fd, c->start, SEEK_SET) < 0)
			DIE("lseek");
		return fd;
	case IN_CLOSED:
		break;
	}
	return -1;
}

/* Returns 0, or -1 if this output kind is unavailable. */
static int run_one(const struct tcase *c, enum out_kind k, sendfile_fn fn,
		   struct result *r)
{
	int in, pipe_w, out = -1, rd = -1, fds[2], file = -1;
	struct sink sink;
	off_t off = c->start;

	memset(r, 0, sizeof(*r));
	switch (k) {
	case O_UNIX:
	case O_TCP4:
	case O_TCP6:
		if (stream_pair(k == O_UNIX ? AF_UNIX : k == O_TCP4 ?
				AF_INET : AF_INET6, fds))
			return -1;
		out = fds[0];
		rd = fds[1];
		break;
	case O_PIPE:
		if (pipe2(fds, O_CLOEXEC))
			DIE("pipe");
		out = fds[1];
		rd = fds[0];
		break;
	case O_FILE:
		file = tmpfile_fd(0, 0);
		if (c->out == OUT_RDONLY)
			out = reopen(file, O_RDONLY);
		else if (c->out == OUT_APPEND)
			out = reopen(file, O_WRONLY | O_APPEND);
		else
			out = reopen(file, O_WRONLY);
		break;
	default:
		abort();
	}
	if (c->out == OUT_CLOSED) {
		close(out);
		out = -1;
	}

	if (c->out == OUT_NB || c->out == OUT_NB_FULL) {
		if (fcntl(out, F_SETFL, O_NONBLOCK))
			DIE("O_NONBLOCK");
	}
	if (c->out == OUT_NB_FULL) {
		static const char junk[4096];

		/* Down to single bytes: "full" must mean no room at all. */
		while (write(out, junk, sizeof(junk)) > 0)
			;
		while (write(out, junk, 1) > 0)
			;
		if (errno != EAGAIN)
			DIE("fill");
	}

	in = open_in(c, &pipe_w);
	if (rd >= 0 && c->out != OUT_NB_FULL)
		sink_start(&sink, rd);

	errno = 0;
	r->ret = fn(out, in, c->use_off ? &off : NULL, c->count);
	r->err = r->ret < 0 ? errno : 0;
	r->off = off;
	r->pos = in >= 0 ? lseek(in, 0, SEEK_CUR) : -1;
	r->path = stablesend_sendfile_path();
	if (c->out == OUT_NB_FULL)
		sink_start(&sink, rd);

	if (out >= 0)
		close(out);
	output_collect(rd, &sink, file, &r->data, &r->len);
	if (in >= 0)
		close(in);
	if (pipe_w >= 0)
		close(pipe_w);
	return 0;
}

/* The RAM disk with the pattern written over its start, or -1. */
static int blk_open(void)
{
	unsigned char *buf;
	size_t i;
	int fd;

	fd = open(BLK_DEV, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	buf = malloc(BLK_SIZE);
	if (!buf)
		DIE("malloc");
	for (i = 0; i < BLK_SIZE; i++)
		buf[i] = pat(i, 1);
	if (pwrite(fd, buf, BLK_SIZE, 0) != BLK_SIZE || fsync(fd))
		DIE("write %s", BLK_DEV);
	free(buf);
	return fd;
}

static ssize_t real_sendfile(int out, int in, off_t *off, size_t count)
{
	return sendfile(out, in, off, count);
}

static void compare(const struct tcase *c, enum out_kind k)
{
	struct result want, got;
	int bad = 0, lenient = 0;

	if (c->in == IN_BLK && blk_fd < 0) {
		printf("  %-28s %-5s not run (only in the guest)\n",
		       c->name, out_names[k]);
		return;
	}
	if (run_one(c, k, real_sendfile, &want)) {
		printf("  %-28s %-5s skipped (unavailable)\n", c->name,
		       out_names[k]);
		return;
	}
	if (run_one(c, k, stablesend_sendfile, &got))
		DIE("%s second run", out_names[k]);

	/*
	 * Into a pipe, sendfile(2) moves what fits at once, ending on a page
	 * boundary, and stablesend up to the pipe size; into a non-blocking
	 * socket, what fits at that moment.  These are short counts a caller
	 * loops over: compare what was moved, not how much.
	 */
	if ((k == O_PIPE || c->out == OUT_NB) && want.ret > 0 &&
	    got.ret > 0 && (size_t)got.ret <= c->count) {
		if (got.ret != want.ret)
			printf("  %-28s %-5s short counts differ: sendfile "
			       "%zd, stablesend %zd (allowed)\n", c->name,
			       out_names[k], want.ret, got.ret);
		want.ret = got.ret;
		lenient = 1;
		if (c->use_off)
			want.off = c->start + got.ret;
		else
			want.pos = c->start + got.ret;
	}
	/*
	 * A socket filled until EAGAIN may still take a sendfile(2) that
	 * appends to its last skb (6.1's unix_stream_sendpage); stablesend
	 * answers EAGAIN whenever poll(2) says the socket is not writable.
	 */
	if (c->out == OUT_NB_FULL && got.ret == -1 && got.err == EAGAIN &&
	    want.ret > 0) {
		printf("  %-28s %-5s sendfile %zd, stablesend EAGAIN "
		       "(allowed)\n", c->name, out_names[k], want.ret);
		want.ret = -1;
		want.err = EAGAIN;
		want.off = c->start;
	}
	if (want.ret != got.ret || want.err != got.err) {
		fprintf(stderr, "  %s/%s: sendfile %zd (%s), stablesend %zd "
			"(%s)\n", c->name, out_names[k], want.ret,
			want.err ? strerror(want.err) : "-", got.ret,
			got.err ? strerror(got.err) : "-");
		bad = 1;
	}
	if (want.off != got.off || want.pos != got.pos) {
		fprintf(stderr, "  %s/%s: offset %lld/%lld pos %lld/%lld "
			"(sendfile/stablesend)\n", c->name, out_names[k],
			want.off, got.off, want.pos, got.pos);
		bad = 1;
	}
	/*
	 * A lenient compare checks the common prefix (all bytes are checked
	 * below); after filling a socket the amounts of filler differ.
	 */
	if (c->out == OUT_NB_FULL)
		;
	else if ((want.len != got.len && !lenient) ||
	    memcmp(want.data, got.data, want.len < got.len ?
		   want.len : got.len)) {
		fprintf(stderr, "  %s/%s: output differs (%zu vs %zu bytes)\n",
			c->name, out_names[k], want.len, got.len);
		bad = 1;
	}
	/* And the bytes must be the file's, where the file was read. */
	if (got.ret > 0 && (c->in == IN_FILE || c->in == IN_BLK) &&
	    c->out != OUT_NB_FULL) {
		long long first = c->start;
		size_t i;

		for (i = 0; i < got.len; i++)
			if (got.data[i] != pat(first + i, 1))
				break;
		if (i != got.len || got.len != (size_t)got.ret) {
			fprintf(stderr, "  %s/%s: wrong bytes at %zu\n",
				c->name, out_names[k], i);
			bad = 1;
		}
	}
	/* With the module, sockets it takes must go through it. */
	if (got.ret > 0 && have_module && k != O_FILE && k != O_PIPE &&
	    c->in != IN_BLK && got.path != STABLESEND_PATH_MODULE) {
		fprintf(stderr, "  %s/%s: copied, not sent by the module\n",
			c->name, out_names[k]);
		bad = 1;
	}
	if (bad)
		t_failed++;
	printf("  %-28s %-5s %s ret %zd%s%s%s\n", c->name, out_names[k],
	       bad ? "MISMATCH" : "ok", got.ret, got.err ? " " : "",
	       got.err ? strerror(got.err) : "", got.ret <= 0 ? "" :
	       got.path == STABLESEND_PATH_MODULE ? " [module]" : " [copy]");
	free(want.data);
	free(got.data);
}

int main(void)
{
	unsigned int i;
	int k;

	have_module = access(STABLESEND_DEVICE, F_OK) == 0;
	printf("%s\n", have_module ? "module present: sockets must use it" :
	       "no module: checking the copy path");
	data_fd = tmpfile_fd(FILE_SIZE, 1);
	/* Never written to on a host: it may be somebody's disk. */
	blk_fd = blk_required ? blk_open() : -1;
	if (blk_fd < 0 && blk_required) {
		fprintf(stderr, "%s: %s (brd was loaded)\n", BLK_DEV,
			strerror(errno));
		t_failed++;
	}
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (k = 0; k < O_NKINDS; k++) {
			if ((cases[i].out == OUT_RDONLY ||
			     cases[i].out == OUT_APPEND) && k != O_FILE)
				continue;
			if ((cases[i].out == OUT_NB ||
			     cases[i].out == OUT_NB_FULL) && k == O_FILE)
				continue;
			compare(&cases[i], k);
		}
	}
	return t_result();
}
