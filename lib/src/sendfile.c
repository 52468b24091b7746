// SPDX-License-Identifier: MIT
/*
 * stablesend_sendfile(): sendfile(2) with pread(2) semantics for the data;
 * stablesend_sendfile_hdtr(): the same with a header and a trailer.
 *
 * With the module, each call is one synchronous STABLESEND_IOC_SEND on a
 * process-wide device fd, opened on first use.  Without it, the range is
 * pread() into a buffer and written out: the copy is taken during the call,
 * so this path is stable too.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
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
static __u64 dev_features;	/* STABLESEND_FEAT_* of the device */

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
	dev_features = su.features;
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

/* What copy_check() learnt about the descriptors. */
struct ss_fds {
	off_t pos;		/* the starting offset */
	off_t in_size;		/* st_size of in_fd */
	int in_reg;		/* in_fd is a regular file */
	int out_sock;		/* out_fd is a socket */
	int out_nonblock;	/* out_fd has O_NONBLOCK */
	int in_direct;		/* in_fd has O_DIRECT */
};

/*
 * Validate like do_sendfile() does, in the same order, so that the copy
 * path fails with the same errno.  On success *count may be lowered and
 * f->pos is the starting offset.
 */
static int copy_check(int out_fd, int in_fd, const off_t *offset,
		      size_t *count, struct ss_fds *f)
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
		f->pos = *offset;
	} else {
		f->pos = lseek(in_fd, 0, SEEK_CUR);
		if (f->pos < 0)
			return -1;
	}
	f->in_size = ist.st_size;
	f->in_reg = S_ISREG(ist.st_mode);
	f->out_sock = S_ISSOCK(ost.st_mode);
	f->out_nonblock = !!(ofl & O_NONBLOCK);
	f->in_direct = !!(ifl & O_DIRECT);
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
	struct ss_fds f;

	return copy_check(out_fd, in_fd, offset, &count, &f);
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
 * bytes written, or -1 with errno if none were.  more: MSG_MORE, for a
 * socket, when the caller has more to send right after.
 */
static ssize_t write_all(int fd, const char *buf, size_t len, int sock,
			 int more)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n;

		if (sock)
			n = send(fd, buf + done, len - done,
				 MSG_NOSIGNAL | (more ? MSG_MORE : 0));
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
	struct ss_fds f;
	int err = 0;
	char *buf;

	if (copy_check(out_fd, in_fd, offset, &count, &f) < 0)
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

		n = pread(in_fd, buf, want, f.pos + done);
		if (n <= 0) {
			if (n < 0)
				err = errno;
			break;
		}
		w = write_all(out_fd, buf, n, f.out_sock, 0);
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
		*offset = f.pos + done;
	else
		lseek(in_fd, f.pos + done, SEEK_SET);
	return done;
}

/**
 * ss_stable_socket - is @fd a socket whose calls must be stable
 *
 * A TCP (IPv4 or IPv6) or AF_UNIX stream socket, not SCTP or MPTCP.  The
 * preload asks it when the module refused a socket (EOPNOTSUPP: say, a
 * TCP upper-layer protocol other than kTLS; the copy path takes it then),
 * and without the module.  ENOTSOCK or EBADF: no, sendfile(2) decides
 * what that means.  errno may change.
 */
int ss_stable_socket(int fd)
{
	socklen_t sl = sizeof(int);
	int v;

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &sl) || v != SOCK_STREAM)
		return 0;
	sl = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &sl))
		return 0;
	if (v == AF_UNIX)
		return 1;
	if (v != AF_INET && v != AF_INET6)
		return 0;
	sl = sizeof(int);
	return !getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &sl) &&
	       v == IPPROTO_TCP;
}

/*
 * STABLESEND_REQ_NOWAIT for a SEND when the call can go another way: on
 * a non-blocking socket the module then never waits for snapshot memory
 * (which other sockets' stalled peers may hold for good, where sendfile(2)
 * would have sent at once), but fails with ENOSPC, and the call sends a
 * copy, as stable.
 */
static __u32 nowait_flag(void)
{
	return (dev_features & STABLESEND_FEAT_NOWAIT) && !require_module() ?
	       STABLESEND_REQ_NOWAIT : 0;
}

/* For the preload: an input that is not a regular file is sendfile(2)'s. */
static int not_regular(int in_fd)
{
	struct stat st;

	return fstat(in_fd, &st) || !S_ISREG(st.st_mode);
}

/*
 * For a module without STABLESEND_FEAT_SEND_SOCKFLAGS, what it does not
 * look at: O_APPEND, and a non-blocking socket's send buffer.  Returns 1
 * to go on (with *@len cut to the send buffer), or 0 with *@ret what the
 * call returns.
 */
static int check_out_flags(int out_fd, int in_fd, off_t *offset, size_t count,
			   int preload, size_t *len, ssize_t *ret)
{
	int fl = fcntl(out_fd, F_GETFL);

	*ret = -1;
	if (fl < 0 && preload) {
		*ret = SS_DECLINED;
		return 0;
	}
	if (fl < 0) {
		*ret = fail_like_sendfile(out_fd, in_fd, offset, count, errno);
		return 0;
	}
	/* sendfile(2) refuses O_APPEND outputs but for pipes */
	if ((fl & O_APPEND) && preload) {
		*ret = SS_DECLINED;
		return 0;
	}
	if ((fl & O_APPEND) && sendfile_valid(out_fd, in_fd, offset, count) < 0)
		return 0;
	/*
	 * SEND on a non-blocking socket sends what the socket takes now (or
	 * fails with EAGAIN) and drops the rest of its snapshot: copy no more
	 * than a send buffer, about the most it can take at once.
	 */
	if (fl & O_NONBLOCK) {
		socklen_t sl = sizeof(int);
		int sndbuf;

		if (!getsockopt(out_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl) &&
		    sndbuf > 0 && (size_t)sndbuf < *len)
			*len = sndbuf;
	}
	return 1;
}

/*
 * What a call returns when its first SEND failed with errno: SS_DECLINED
 * for the preload's calls that are sendfile(2)'s, a copy where the module
 * does not take the output (or the input), else sendfile's errno.
 */
static ssize_t module_failed(int out_fd, int in_fd, off_t *offset,
			     size_t count, int preload)
{
	int err = errno;

	if (preload) {
		switch (err) {
		case ENOTSOCK:		/* a file or pipe */
			return SS_DECLINED;
		case EOPNOTSUPP:	/* UDP, SCTP, AF_UNIX datagram... */
			if (!ss_stable_socket(out_fd))
				return SS_DECLINED;
			break;
		case EINVAL:		/* a block or character device... */
			if (not_regular(in_fd))
				return SS_DECLINED;
			break;
		}
		/* EBADF stays ours: the device fd itself may be gone. */
		errno = err;
	}
	switch (err) {
	case ENOTSOCK:		/* a file or pipe: sendfile takes those */
	case EOPNOTSUPP:	/* UDP, SCTP, AF_UNIX datagram... */
	case ENOTCONN:		/* let send(2) pick its errno (EPIPE) */
		if (!require_module())
			return copy_sendfile(out_fd, in_fd, offset, count);
		return -1;
	case ENODATA:		/* at or past EOF: 0, if valid */
		return sendfile_valid(out_fd, in_fd, offset, count);
	case EINVAL:
		/*
		 * A block device: sendfile(2) takes it, the module does not;
		 * the copy fails with sendfile's errno for other inputs.
		 */
		if (!preload && !require_module() && not_regular(in_fd))
			return copy_sendfile(out_fd, in_fd, offset, count);
		/* fall through */
	case EBADF:
		/* The module checks in another order: sendfile's errno. */
		return fail_like_sendfile(out_fd, in_fd, offset, count, err);
	}
	return -1;
}

/*
 * After a SEND that went out, whether to make another for the rest.
 * sendfile(2) returns short on a non-blocking socket only once the socket
 * is full, and an edge-triggered poller (nginx) waits for the room a full
 * socket announces; the module also stops at dev_max_len and, with
 * STABLESEND_REQ_NOWAIT, at the memory free now.  So a non-blocking
 * socket is sent to until it refuses (EAGAIN) or the file ends.  A
 * blocking one returned short for a timeout or a signal, or at
 * dev_max_len, where the caller loops.  *@nonblock caches the answer for
 * the call (-1: not asked yet).
 */
static int send_more(int out_fd, int *nonblock)
{
	int fl;

	if (*nonblock < 0) {
		fl = fcntl(out_fd, F_GETFL);
		*nonblock = fl >= 0 && (fl & O_NONBLOCK);
	}
	return *nonblock;
}

/* An input the copy path cannot read: O_DIRECT wants aligned buffers. */
static int in_direct(int in_fd)
{
	int fl = fcntl(in_fd, F_GETFL);

	return fl >= 0 && (fl & O_DIRECT);
}

/*
 * SENDs of at most dev_max_len bytes each (one, but on a non-blocking
 * socket: see send_more()).  With @preload, a call that is not a regular
 * file (nor an O_DIRECT one, which sendfile(2) copies already) to a socket
 * the module takes returns SS_DECLINED instead: the caller hands it to
 * sendfile(2), which decides what it means.  Only what the module refuses
 * costs extra system calls.
 */
static ssize_t module_sendfile(int dev, int out_fd, int in_fd, off_t *offset,
			       size_t count, int preload)
{
	struct stablesend_req req = {
		.file_fd = in_fd,
		.sock_fd = out_fd,
	};
	size_t len, done = 0;
	int fl, nonblock = -1;
	ssize_t n = 0, r;
	off_t pos, off;

	if (preload) {
		fl = fcntl(in_fd, F_GETFL);
		if (fl < 0 || (fl & O_DIRECT))
			return SS_DECLINED;
	}
	pos = offset ? *offset : lseek(in_fd, 0, SEEK_CUR);
	/* A pipe or socket input: sendfile's errno (ESPIPE, EINVAL...). */
	if (pos < 0 && preload && not_regular(in_fd))
		return SS_DECLINED;
	if (pos < 0)
		return fail_like_sendfile(out_fd, in_fd, offset, count,
					  offset ? EINVAL : errno);
	/* rw_verify_area(), before len is capped below */
	if ((ssize_t)count < 0 || (off_t)((unsigned long long)pos + count) < 0)
		return fail_like_sendfile(out_fd, in_fd, offset, count, EINVAL);
	if (count > SS_MAX_RW_COUNT)
		count = SS_MAX_RW_COUNT;
	len = count < dev_max_len ? count : dev_max_len;

	/* A module with SEND_SOCKFLAGS looks at the socket's flags itself. */
	if (!(dev_features & STABLESEND_FEAT_SEND_SOCKFLAGS) &&
	    !check_out_flags(out_fd, in_fd, offset, count, preload, &len, &r))
		return r;
	req.flags = nowait_flag();
	while (done < count) {
		req.offset = pos + done;
		req.len = count - done < len ? count - done : len;
		n = ioctl(dev, STABLESEND_IOC_SEND, &req);
		if (n > 0) {
			done += n;
			last_path = STABLESEND_PATH_MODULE;
			if (done < count && !send_more(out_fd, &nonblock))
				break;
			continue;
		}
		if (n == 0)
			break;
		if (errno == ENOSPC && (req.flags & STABLESEND_REQ_NOWAIT)) {
			/* No memory free now: the rest as a copy, at once. */
			if (!preload && in_direct(in_fd)) {
				/* The copy could not read it: wait, as before. */
				req.flags &= ~STABLESEND_REQ_NOWAIT;
				continue;
			}
			off = pos + done;
			n = copy_sendfile(out_fd, in_fd, &off, count - done);
			if (n < 0 && !done)
				return -1;
			if (n > 0)
				done += n;
			break;
		}
		/* Limit smaller than we thought (shared, or alignment). */
		if (errno == EMSGSIZE && len > SS_MIN_SEND) {
			len /= 2;
			continue;
		}
		break;
	}
	if (!done && n < 0)
		return module_failed(out_fd, in_fd, offset, count, preload);

	if (offset)
		*offset = pos + done;
	else if (done)
		lseek(in_fd, pos + done, SEEK_SET);
	return done;
}

ssize_t stablesend_sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	int dev;

	switch (dev_get(&dev)) {
	case 1:
		if (!count)	/* validate only */
			return copy_sendfile(out_fd, in_fd, offset, 0);
		return module_sendfile(dev, out_fd, in_fd, offset, count, 0);
	case 0:
		return copy_sendfile(out_fd, in_fd, offset, count);
	default:
		return -1;
	}
}

/**
 * ss_sendfile_preload - libstablesend-preload's sendfile(2), module first
 *
 * With the module, one SEND straight away: the module itself tells the
 * calls it does not take (not a regular file, not a TCP or AF_UNIX stream
 * socket), and those return SS_DECLINED for the caller's sendfile(2).
 * Without it, SS_UNDECIDED: the caller sorts the call out itself.
 * Otherwise what stablesend_sendfile() returns.
 */
ssize_t ss_sendfile_preload(int out_fd, int in_fd, off_t *offset, size_t count)
{
	int dev;

	if (!count || dev_get(&dev) != 1)
		return SS_UNDECIDED;
	return module_sendfile(dev, out_fd, in_fd, offset, count, 1);
}

int stablesend_sendfile_path(void)
{
	return last_path;
}

/*
 * For libstablesend-preload's log line: the path a stable call takes in
 * this process, deciding it now if no call has.  Returns
 * STABLESEND_PATH_MODULE, STABLESEND_PATH_COPY with *why the open or
 * SETUP error (0: the module lacks SEND), or -1 with *why the errno calls
 * fail with (STABLESEND_REQUIRE_MODULE=1 and no module).
 */
int ss_sendfile_probe(int *why)
{
	int fd, ret = dev_get(&fd);

	*why = 0;
	if (ret < 0) {
		*why = errno;
		return -1;
	}
	if (ret)
		return STABLESEND_PATH_MODULE;
	/* EOPNOTSUPP is ours: the module lacks SEND. */
	if (__atomic_load_n(&dev_state, __ATOMIC_ACQUIRE) == DEV_ABSENT &&
	    dev_err != EOPNOTSUPP)
		*why = dev_err;
	return STABLESEND_PATH_COPY;
}

/* Header and trailer of stablesend_sendfile_hdtr(). */
struct ss_hdtr {
	const char *head, *tail;
	size_t head_len, tail_len;
	unsigned int flags;
};

/* Bytes of the range the file holds, by its size at copy_check() time. */
static size_t file_part(const struct ss_fds *f, size_t count)
{
	if (!f->in_reg)
		return count;
	if (f->pos >= f->in_size)
		return 0;
	if ((unsigned long long)(f->in_size - f->pos) < count)
		return f->in_size - f->pos;
	return count;
}

/*
 * The copy path of stablesend_sendfile_hdtr(): header, file bytes through
 * a bounce buffer, trailer, each written whole before the next starts; a
 * short write ends the call.  The trailer goes only after all of the file
 * range (tail_ok: the range was not cut) or its end of file.  *fsent gets
 * the file bytes sent.  Returns all bytes sent, or -1 with errno if none.
 */
static ssize_t copy_hdtr(int out_fd, int in_fd, const struct ss_fds *f,
			 size_t count, int tail_ok, const struct ss_hdtr *h,
			 size_t *fsent)
{
	int more = !!(h->flags & STABLESEND_REQ_MORE), sock = f->out_sock;
	size_t done = 0, fdone = 0, flen, chunk;
	char *buf = NULL;
	ssize_t w;
	int err = 0;

	/* What the file should give, to know which write is the last. */
	flen = file_part(f, count);

	if (h->head_len) {
		w = write_all(out_fd, h->head, h->head_len, sock,
			      more || flen || (tail_ok && h->tail_len));
		if (w < 0)
			goto fail;
		done = w;
		if ((size_t)w < h->head_len)
			goto out;
	}

	chunk = count < SS_COPY_CHUNK ? count : SS_COPY_CHUNK;
	if (chunk) {
		buf = malloc(chunk);
		if (!buf)
			goto fail;
	}
	while (fdone < count) {
		size_t want = count - fdone < chunk ? count - fdone : chunk;
		ssize_t n = pread(in_fd, buf, want, f->pos + fdone);

		if (n < 0)
			goto fail;
		if (n == 0) {
			tail_ok = 1;	/* end of file */
			break;
		}
		w = write_all(out_fd, buf, n, sock, more || fdone + n < flen ||
			      (h->tail_len && (tail_ok || fdone + n < count)));
		if (w < 0)
			goto fail;
		fdone += w;
		done += w;
		if (w < n)
			goto out;
	}

	if (tail_ok && h->tail_len) {
		w = write_all(out_fd, h->tail, h->tail_len, sock, more);
		if (w < 0)
			goto fail;
		done += w;
	}
	goto out;

fail:
	err = errno;
out:
	free(buf);
	*fsent = fdone;
	if (!done) {
		errno = err;
		return -1;
	}
	return done;
}

/*
 * At most @want, but no more than the file at @in_fd holds from @pos now
 * (its size as fstat(2) tells, which a failure leaves unchecked).
 */
static size_t file_bytes_left(int in_fd, off_t pos, size_t want)
{
	struct stat st;

	if (fstat(in_fd, &st) || st.st_size - pos >= (off_t)want)
		return want;
	return st.st_size > pos ? st.st_size - pos : 0;
}

/* STABLESEND_REQ_NOWAIT where copy_hdtr() can take what it refuses. */
static __u32 hdtr_nowait(const struct ss_fds *f)
{
	return f->in_direct ? 0 : nowait_flag();
}

/*
 * One SEND carrying header, file range and trailer.  The file part is
 * sized from f->in_size so that the split of the result between file and
 * trailer bytes is known; a range cut to fit the budget or *@fmax leaves
 * the trailer for a later call.  EMSGSIZE halves the file part, and
 * *@fmax keeps what fitted for the call's later SENDs.  Returns the bytes
 * sent with *fsent the file bytes among them, or -1 with errno.
 */
static ssize_t module_hdtr(int dev, int out_fd, int in_fd,
			   const struct ss_fds *f, size_t count, int tail_ok,
			   const struct ss_hdtr *h, size_t *fmax, size_t *fsent)
{
	size_t budget = dev_max_len, hd = h->head_len + h->tail_len, flen;
	struct stablesend_req req;
	int ret;

	/* As module_sendfile(): no more than the socket can take at once. */
	if (f->out_nonblock) {
		socklen_t sl = sizeof(int);
		int sndbuf;

		if (!getsockopt(out_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl) &&
		    sndbuf > 0 && (size_t)sndbuf < budget)
			budget = sndbuf;
	}
	flen = file_part(f, count);
	if (flen < count)
		tail_ok = 1;	/* the range ends at end of file */
	if (flen > (budget > hd + SS_MIN_SEND ? budget - hd : SS_MIN_SEND)) {
		flen = budget > hd + SS_MIN_SEND ? budget - hd : SS_MIN_SEND;
		tail_ok = 0;
	}
	if (flen > *fmax) {
		flen = *fmax;
		tail_ok = 0;
	}

	for (;;) {
		stablesend_prep_req(&req, in_fd, out_fd, f->pos, flen, 0);
		stablesend_prep_hdtr(&req, h->head, h->head_len,
				     tail_ok ? h->tail : NULL,
				     tail_ok ? h->tail_len : 0);
		req.flags = h->flags | hdtr_nowait(f);
		if (!flen && !req.head_len && !req.tail_len) {
			*fsent = 0;	/* nothing left to send: a file shrank */
			return 0;
		}
		ret = ioctl(dev, STABLESEND_IOC_SEND, &req);
		if (ret >= 0)
			break;
		if (errno == ENODATA && flen) {
			/* The file shrank below pos: header and trailer only. */
			flen = 0;
			tail_ok = 1;
		} else if (errno == EMSGSIZE && flen > SS_MIN_SEND) {
			flen /= 2;
			*fmax = flen;
			tail_ok = 0;
		} else {
			return -1;
		}
	}
	if ((size_t)ret <= h->head_len)
		*fsent = 0;
	else if ((size_t)ret - h->head_len < flen)
		*fsent = ret - h->head_len;
	else
		*fsent = flen;
	/*
	 * Short of everything with a trailer asked for: a full socket, or a
	 * file that shrank, its trailer right after fewer file bytes.
	 */
	if (req.tail_len && (size_t)ret < h->head_len + flen + req.tail_len)
		*fsent = file_bytes_left(in_fd, f->pos, *fsent);
	return ret;
}

/*
 * The module path of stablesend_sendfile_hdtr(): a SEND of header, file
 * range and trailer, and on a non-blocking socket more for the rest, as
 * send_more() says for stablesend_sendfile(): a short count must mean a
 * full socket, and the module stops short at the memory free now
 * (STABLESEND_REQ_NOWAIT) or at dev_max_len.  So a non-blocking socket is
 * sent to until it refuses, a trailer byte went or all is sent; what the
 * module has no memory for (ENOSPC) goes as a copy.  Returns the bytes
 * sent with *@fsent the file bytes among them, or -1 with errno if none.
 */
static ssize_t send_hdtr(int dev, int out_fd, int in_fd,
			 const struct ss_fds *f, size_t count, int tail_ok,
			 const struct ss_hdtr *h, size_t *fsent)
{
	struct ss_hdtr rest = *h;
	struct ss_fds at = *f;
	size_t done = 0, fs, fmax = SIZE_MAX;
	ssize_t m;

	*fsent = 0;
	for (;;) {
		at.pos = f->pos + *fsent;
		m = module_hdtr(dev, out_fd, in_fd, &at, count - *fsent,
				tail_ok, &rest, &fmax, &fs);
		if (m < 0 && errno == ENOSPC && hdtr_nowait(f)) {
			m = copy_hdtr(out_fd, in_fd, &at, count - *fsent,
				      tail_ok, &rest, &fs);
			if (m > 0) {
				last_path = STABLESEND_PATH_COPY;
				done += m;
				*fsent += fs;
			}
			break;	/* it wrote until the socket was full */
		}
		if (m < 0)
			break;
		last_path = STABLESEND_PATH_MODULE;
		if (!m)
			break;
		done += m;
		*fsent += fs;
		/* Short in the header (a full socket), or the trailer went. */
		if (!f->out_nonblock || (size_t)m < rest.head_len ||
		    (size_t)m > rest.head_len + fs)
			break;
		/* A cut range leaves its trailer to the caller's next call. */
		if (*fsent == count && !(tail_ok && h->tail_len))
			break;
		rest.head = NULL;
		rest.head_len = 0;
	}
	return done || m >= 0 ? (ssize_t)done : -1;
}

ssize_t stablesend_sendfile_hdtr(int out_fd, int in_fd, off_t *offset,
				 size_t count, const void *head,
				 size_t head_len, const void *tail,
				 size_t tail_len, unsigned int flags)
{
	struct ss_hdtr h = {
		.head = head, .head_len = head_len,
		.tail = tail, .tail_len = tail_len,
		.flags = flags,
	};
	size_t want = count, fsent = 0;
	struct ss_fds f;
	ssize_t n = -1;
	int dev, err;

	if (flags & ~STABLESEND_REQ_MORE) {
		errno = EINVAL;
		return -1;
	}
	if (!head_len && !tail_len && !flags)
		return stablesend_sendfile(out_fd, in_fd, offset, count);
	if (head_len > STABLESEND_HDTR_MAX || tail_len > STABLESEND_HDTR_MAX) {
		errno = EINVAL;
		return -1;
	}
	if ((head_len && !head) || (tail_len && !tail)) {
		errno = EFAULT;
		return -1;
	}
	if (copy_check(out_fd, in_fd, offset, &count, &f) < 0)
		return -1;
	/* The whole result fits in a ssize_t on 32 bits too. */
	if (count > SS_MAX_RW_COUNT - 2 * STABLESEND_HDTR_MAX)
		count = SS_MAX_RW_COUNT - 2 * STABLESEND_HDTR_MAX;
	if (!count && !head_len && !tail_len)
		return 0;	/* STABLESEND_REQ_MORE alone, nothing to send */

	switch (dev_get(&dev)) {
	case -1:
		return -1;
	case 1:
		if (!(dev_features & STABLESEND_FEAT_HDTR)) {
			if (require_module()) {
				errno = EOPNOTSUPP;
				return -1;
			}
			break;
		}
		/* The module takes regular files to sockets only. */
		if ((!f.in_reg || !f.out_sock) && !require_module())
			break;
		n = send_hdtr(dev, out_fd, in_fd, &f, count, count == want, &h,
			      &fsent);
		if (n >= 0)
			goto done;
		err = errno;
		if (require_module())
			return -1;
		switch (err) {
		case ENOTSOCK:
		case EOPNOTSUPP:
		case ENOTCONN:
		case EMSGSIZE:	/* even the header and trailer do not fit */
			break;
		default:
			return -1;
		}
	}
	n = copy_hdtr(out_fd, in_fd, &f, count, count == want, &h, &fsent);
	if (n < 0)
		return -1;
	last_path = STABLESEND_PATH_COPY;
done:
	if (fsent) {
		if (offset)
			*offset = f.pos + fsent;
		else
			lseek(in_fd, f.pos + fsent, SEEK_SET);
	}
	return n;
}
