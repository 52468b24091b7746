// SPDX-License-Identifier: MIT
/*
 * One asynchronous context: an open of /dev/stablesend, set up once, then
 * submissions, completions, cancellation and counters.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

const char *ss_device_path = STABLESEND_DEVICE;

/* A read(2) of completions never asks for more records than this. */
#define SS_REAP_MAX	4096U

struct stablesend *stablesend_open_limit(int eventfd, unsigned int flags,
					 uint64_t mem_limit)
{
	struct stablesend *ss;
	int oflags = O_RDWR | O_CLOEXEC;
	int err;

	if (flags & ~STABLESEND_OPEN_FLAGS) {
		errno = EINVAL;
		return NULL;
	}
	if (eventfd < -1) {
		errno = EBADF;
		return NULL;
	}
	if (flags & STABLESEND_OPEN_NONBLOCK)
		oflags |= O_NONBLOCK;

	ss = calloc(1, sizeof(*ss));
	if (!ss)
		return NULL;
	ss->flags = flags;
	ss->fd = open(ss_device_path, oflags);
	if (ss->fd < 0)
		goto err_free;

	ss->setup.eventfd = eventfd;
	ss->setup.mem_limit = mem_limit;
	if (ioctl(ss->fd, STABLESEND_IOC_SETUP, &ss->setup) < 0)
		goto err_close;
	return ss;

err_close:
	err = errno;
	close(ss->fd);
	errno = err;
err_free:
	err = errno;
	free(ss);
	errno = err;
	return NULL;
}

struct stablesend *stablesend_open(int eventfd, unsigned int flags)
{
	return stablesend_open_limit(eventfd, flags, 0);
}

void stablesend_close(struct stablesend *ss)
{
	if (!ss)
		return;
	close(ss->fd);
	free(ss);
}

int stablesend_fd(struct stablesend *ss)
{
	return ss ? ss->fd : -EINVAL;
}

__u64 stablesend_features(struct stablesend *ss)
{
	return ss ? ss->setup.features : 0;
}

__u64 stablesend_mem_limit(struct stablesend *ss)
{
	return ss ? ss->setup.mem_limit : 0;
}

unsigned int stablesend_abi_version(struct stablesend *ss)
{
	return ss ? ss->setup.abi_version : 0;
}

int stablesend_submit(struct stablesend *ss,
		      const struct stablesend_req *reqs, unsigned int n)
{
	unsigned int done = 0;

	if (!ss)
		return -EINVAL;
	if (!n)
		return 0;
	if (!reqs)
		return -EFAULT;
	if (n > INT_MAX)
		n = INT_MAX;

	while (done < n) {
		struct stablesend_submit s = {
			.reqs = (__u64)(uintptr_t)(reqs + done),
			.nr = n - done < STABLESEND_SUBMIT_MAX ?
			      n - done : STABLESEND_SUBMIT_MAX,
			.entry_size = sizeof(*reqs),
		};
		int ret = ioctl(ss->fd, STABLESEND_IOC_SUBMIT, &s);

		if (ret < 0) {
			/* Later requests failed: report what went in. */
			if (done)
				break;
			return -errno;
		}
		if ((unsigned int)ret > s.nr)
			return -EPROTO;
		done += ret;
		if ((unsigned int)ret < s.nr)
			break;
	}
	return done;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

int stablesend_reap(struct stablesend *ss, struct stablesend_cqe *cqes,
		    unsigned int max, int timeout_ms)
{
	long long deadline = 0;
	int wait = timeout_ms < 0 ? -1 : timeout_ms;

	if (!ss || !cqes || !max)
		return -EINVAL;
	if (max > SS_REAP_MAX)
		max = SS_REAP_MAX;
	if (wait > 0)
		deadline = now_ms() + wait;

	for (;;) {
		struct pollfd pfd = { .fd = ss->fd, .events = POLLIN };
		ssize_t n;
		int ret;

		ret = poll(&pfd, 1, wait);
		if (ret < 0)
			return -errno;
		if (ret == 0)
			return 0;
		if (pfd.revents & POLLNVAL)
			return -EBADF;

		n = read(ss->fd, cqes, max * sizeof(*cqes));
		if (n > 0) {
			if (n % sizeof(*cqes))
				return -EPROTO;
			return n / sizeof(*cqes);
		}
		if (n == 0)
			return -EPROTO;
		if (errno != EAGAIN)
			return -errno;

		/* Another thread took them (non-blocking context): wait on. */
		if (wait > 0) {
			long long left = deadline - now_ms();

			if (left <= 0)
				return 0;
			wait = left;
		} else if (wait == 0) {
			return 0;
		}
	}
}

int stablesend_cancel(struct stablesend *ss, __u64 user_data)
{
	int ret;

	if (!ss)
		return -EINVAL;
	ret = ioctl(ss->fd, STABLESEND_IOC_CANCEL, &user_data);
	return ret < 0 ? -errno : ret;
}

int stablesend_counters(struct stablesend *ss, struct stablesend_counters *c)
{
	if (!ss || !c)
		return -EINVAL;
	if (ioctl(ss->fd, STABLESEND_IOC_COUNTERS, c) < 0)
		return -errno;
	return 0;
}
