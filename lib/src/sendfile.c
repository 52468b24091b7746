// SPDX-License-Identifier: MIT
/*
 * stablesend_sendfile(): sendfile(2) with pread(2) semantics for the data.
 *
 * With the module, each call is one synchronous STABLESEND_IOC_SEND on a
 * process-wide device fd, opened on first use.  Without it, the range is
 * pread() into a buffer and written out: the copy is taken during the call,
 * so this path is stable too.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* Bounce buffer of the copy path. */
#define SS_COPY_CHUNK	(64 * 1024)

/*
 * One call snapshots at most this fraction of the memory limit, so that
 * a caller looping over a large file has the next chunk copied while the
 * previous one is still held by the network stack, rather than waiting
 * for all of it to be acknowledged.
 */
#define SS_LIMIT_SHARE	4

/* Smallest SEND when halving after EMSGSIZE. */
#define SS_MIN_SEND	4096

enum { DEV_UNKNOWN, DEV_READY, DEV_ABSENT };

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static int dev_state = DEV_UNKNOWN;
static int dev_fd = -1;
static int dev_err;		/* why the state is DEV_ABSENT */
static size_t dev_max_len;	/* longest SEND one call makes */

static __thread int last_path;

static int require_module(void)
{
	const char *s = getenv(STABLESEND_ENV_REQUIRE_MODULE);

	return s && !strcmp(s, "1");
}

/* Errors of open()/SETUP that mean "no usable module here", for good. */
static int dev_missing(int err)
{
	switch (err) {
	case ENOENT:	/* no device node */
	case ENODEV:	/* node, but no driver */
	case ENXIO:
	case ENOTTY:	/* something else lives at the path */
	case EACCES:	/* not ours to use (permissions, device cgroup) */
	case EPERM:
	case EOPNOTSUPP: /* module without synchronous SEND */
		return 1;
	}
	return 0;
}

/*
 * Open and set up the shared device fd.  Returns 0 with the state decided,
 * or -1 with errno for a transient failure (EMFILE, ENOMEM, EINTR...), which
 * is retried on the next call.
 */
static int dev_init_locked(void)
{
	struct stablesend_setup su = { .eventfd = -1 };
	__u64 max;
	int fd, err;

	fd = open(ss_device_path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		goto fail;
	if (ioctl(fd, STABLESEND_IOC_SETUP, &su) < 0)
		goto fail_close;
	if (!(su.features & STABLESEND_FEAT_SEND)) {
		errno = EOPNOTSUPP;
		goto fail_close;
	}

	max = su.mem_limit / SS_LIMIT_SHARE;
	if (max < SS_MIN_SEND)
		max = su.mem_limit;	/* a small limit: use all of it */
	if (!max || max > SS_MAX_RW_COUNT)
		max = SS_MAX_RW_COUNT;
	dev_max_len = max;
	dev_fd = fd;
	__atomic_store_n(&dev_state, DEV_READY, __ATOMIC_RELEASE);
	return 0;

fail_close:
	err = errno;
	close(fd);
	errno = err;
fail:
	if (!dev_missing(errno))
		return -1;
	dev_err = errno;
	__atomic_store_n(&dev_state, DEV_ABSENT, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Returns 1 with *fd set to use the module, 0 to use the copy path, or -1
 * with errno set when the call must fail.
 */
static int dev_get(int *fd)
{
	int state = __atomic_load_n(&dev_state, __ATOMIC_ACQUIRE);
	int err = 0;

	if (state == DEV_UNKNOWN) {
		pthread_mutex_lock(&dev_lock);
		state = __atomic_load_n(&dev_state, __ATOMIC_RELAXED);
		if (state == DEV_UNKNOWN && dev_init_locked() < 0)
			err = errno;	/* transient: try again next time */
		pthread_mutex_unlock(&dev_lock);
		state = __atomic_load_n(&dev_state, __ATOMIC_ACQUIRE);
	}

	if (state == DEV_READY) {
		*fd = dev_fd;
		return 1;
	}
	if (require_module()) {
		if (err)
			errno = err;
		else if (dev_err == EACCES || dev_err == EPERM)
			errno = dev_err;
		else
			errno = ENODEV;
		return -1;
	}
	return 0;
}

/*
 * Validate like do_sendfile() does, in the same order, so that the copy
 * path fails with the same errno.  On success *pos is the starting offset.
 */
static int copy_check(int out_fd, int in_fd, const off_t *offset,
		      size_t *count, off_t *pos, int *out_sock)
{
	struct stat ist, ost;
	int ifl, ofl;

	ifl = fcntl(in_fd, F_GETFL);
	if (ifl < 0)
		return -1;
	/* O_PATH and write-only fds have no FMODE_READ. */
	if ((ifl & O_PATH) || (ifl & O_ACCMODE) == O_WRONLY)
		goto ebadf;
	if (fstat(in_fd, &ist) < 0)
		return -1;
	/* Pipes and sockets lack FMODE_PREAD. */
	if (offset && (S_ISFIFO(ist.st_mode) || S_ISSOCK(ist.st_mode))) {
		errno = ESPIPE;
		return -1;
	}
	/* rw_verify_area() */
	if ((ssize_t)*count < 0 || (offset && (*offset < 0 ||
	    (off_t)((unsigned long long)*offset + *count) < 0)))
		goto einval;
	if (*count > SS_MAX_RW_COUNT)
		*count = SS_MAX_RW_COUNT;

	ofl = fcntl(out_fd, F_GETFL);
	if (ofl < 0)
		return -1;
	if ((ofl & O_PATH) || (ofl & O_ACCMODE) == O_RDONLY)
		goto ebadf;
	if (fstat(out_fd, &ost) < 0)
		return -1;
	/* do_splice_direct() refuses O_APPEND; splice to a pipe does not. */
	if (!S_ISFIFO(ost.st_mode) && (ofl & O_APPEND))
		goto einval;
	/* splice_direct_to_actor() wants a seekable input. */
	if (!S_ISREG(ist.st_mode) && !S_ISBLK(ist.st_mode))
		goto einval;

	if (offset) {
		*pos = *offset;
	} else {
		*pos = lseek(in_fd, 0, SEEK_CUR);
		if (*pos < 0)
			return -1;
	}
	*out_sock = S_ISSOCK(ost.st_mode);
	/*
	 * sendfile(2) into a pipe moves at most what fits in the pipe at
	 * once (splice_file_to_pipe()); do not write more than that either.
	 */
	if (S_ISFIFO(ost.st_mode)) {
		int psz = fcntl(out_fd, F_GETPIPE_SZ);

		if (psz > 0 && *count > (size_t)psz)
			*count = psz;
	}
	return 0;

ebadf:
	errno = EBADF;
	return -1;
einval:
	errno = EINVAL;
	return -1;
}

/* 0 if sendfile(2) would accept these arguments, else -1 with its errno. */
static int sendfile_valid(int out_fd, int in_fd, const off_t *offset,
			  size_t count)
{
	off_t pos;
	int sock;

	return copy_check(out_fd, in_fd, offset, &count, &pos, &sock);
}

/* Fail with the errno sendfile(2) would give, or err if it would not fail. */
static ssize_t fail_like_sendfile(int out_fd, int in_fd, const off_t *offset,
				  size_t count, int err)
{
	if (sendfile_valid(out_fd, in_fd, offset, count) == 0)
		errno = err;
	return -1;
}

/*
 * Write all of buf; a failure after some bytes went out ends the call early,
 * like a signal or a full non-blocking socket ends sendfile(2).  Returns the
 * bytes written, or -1 with errno if none were.
 */
static ssize_t write_all(int fd, const char *buf, size_t len, int sock)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n;

		if (sock)
			n = send(fd, buf + done, len - done, MSG_NOSIGNAL);
		else
			n = write(fd, buf + done, len - done);
		if (n < 0)
			return done ? (ssize_t)done : -1;
		if (n == 0)
			break;
		done += n;
	}
	return done;
}

/* pread(2) into a bounce buffer, then send(2) or write(2) it. */
static ssize_t copy_sendfile(int out_fd, int in_fd, off_t *offset,
			     size_t count)
{
	size_t done = 0, chunk;
	off_t pos;
	int sock, err = 0;
	char *buf;

	if (copy_check(out_fd, in_fd, offset, &count, &pos, &sock) < 0)
		return -1;
	if (!count)
		return 0;

	chunk = count < SS_COPY_CHUNK ? count : SS_COPY_CHUNK;
	buf = malloc(chunk);
	if (!buf)
		return -1;

	while (done < count) {
		size_t want = count - done < chunk ? count - done : chunk;
		ssize_t n, w;

		n = pread(in_fd, buf, want, pos + done);
		if (n <= 0) {
			if (n < 0)
				err = errno;
			break;
		}
		w = write_all(out_fd, buf, n, sock);
		if (w < 0) {
			err = errno;
			break;
		}
		done += w;
		if (w < n)
			break;
	}
	free(buf);

	if (!done) {
		if (!err)
			return 0;
		errno = err;
		return -1;
	}
	last_path = STABLESEND_PATH_COPY;
	/* lseek() cannot fail on a regular file it has just read. */
	if (offset)
		*offset = pos + done;
	else
		lseek(in_fd, pos + done, SEEK_SET);
	return done;
}

/* One synchronous STABLESEND_IOC_SEND of at most dev_max_len bytes. */
static ssize_t module_sendfile(int dev, int out_fd, int in_fd, off_t *offset,
			       size_t count)
{
	struct stablesend_req req = {
		.file_fd = in_fd,
		.sock_fd = out_fd,
	};
	size_t len = count;
	off_t pos;
	int fl, ret;

	pos = offset ? *offset : lseek(in_fd, 0, SEEK_CUR);
	if (pos < 0)
		return fail_like_sendfile(out_fd, in_fd, offset, count,
					  offset ? EINVAL : errno);
	/* rw_verify_area(), before len is capped below */
	if ((ssize_t)count < 0 || (off_t)((unsigned long long)pos + count) < 0)
		return fail_like_sendfile(out_fd, in_fd, offset, count, EINVAL);
	if (len > dev_max_len)
		len = dev_max_len;

	fl = fcntl(out_fd, F_GETFL);
	if (fl < 0)
		return fail_like_sendfile(out_fd, in_fd, offset, count, errno);
	/* sendfile(2) refuses O_APPEND outputs but for pipes */
	if ((fl & O_APPEND) && sendfile_valid(out_fd, in_fd, offset, count) < 0)
		return -1;
	/*
	 * SEND on a non-blocking socket sends what the socket takes now (or
	 * fails with EAGAIN) and drops the rest of its snapshot: copy no more
	 * than a send buffer, the most it can take at once.
	 */
	if (fl & O_NONBLOCK) {
		socklen_t sl = sizeof(int);
		int sndbuf;

		if (!getsockopt(out_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl) &&
		    sndbuf > 0 && (size_t)sndbuf < len)
			len = sndbuf;
	}

	req.offset = pos;
	for (;;) {
		req.len = len;
		ret = ioctl(dev, STABLESEND_IOC_SEND, &req);
		if (ret >= 0 || errno != EMSGSIZE || len <= SS_MIN_SEND)
			break;
		/* Limit smaller than we thought (shared, or alignment). */
		len /= 2;
	}
	if (ret < 0) {
		switch (errno) {
		case ENOTSOCK:		/* a file or pipe: sendfile takes those */
		case EOPNOTSUPP:	/* UDP, SCTP, AF_UNIX datagram... */
		case ENOTCONN:		/* let send(2) pick its errno (EPIPE) */
			if (!require_module())
				return copy_sendfile(out_fd, in_fd, offset,
						     count);
			return -1;
		case ENODATA:		/* at or past EOF: 0, if valid */
			return sendfile_valid(out_fd, in_fd, offset, count);
		case EBADF:
		case EINVAL:
			/* The module checks in another order: sendfile's errno. */
			return fail_like_sendfile(out_fd, in_fd, offset, count,
						  errno);
		}
		return -1;
	}

	last_path = STABLESEND_PATH_MODULE;
	if (offset)
		*offset = pos + ret;
	else
		lseek(in_fd, pos + ret, SEEK_SET);
	return ret;
}

ssize_t stablesend_sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	int dev;

	switch (dev_get(&dev)) {
	case 1:
		if (!count)	/* validate only */
			return copy_sendfile(out_fd, in_fd, offset, 0);
		return module_sendfile(dev, out_fd, in_fd, offset, count);
	case 0:
		return copy_sendfile(out_fd, in_fd, offset, count);
	default:
		return -1;
	}
}

int stablesend_sendfile_path(void)
{
	return last_path;
}
