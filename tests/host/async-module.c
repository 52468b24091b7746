// SPDX-License-Identifier: MIT
/*
 * The asynchronous API against the real module (skipped without
 * /dev/stablesend): submit a batch larger than STABLESEND_SUBMIT_MAX with
 * headers and trailers, reap every SENT completion, check the receiver's
 * bytes and order, cancel, counters, an eventfd and a non-blocking context.
 */
#include <poll.h>
#include <sys/eventfd.h>

#include <stablesend.h>

#include "common.h"

#define NREQ	1500		/* two SUBMIT ioctls */
#define CHUNK	1000

int main(void)
{
	static struct stablesend_req reqs[NREQ];
	static char heads[NREQ][16];
	struct stablesend_cqe cqes[64];
	struct stablesend_counters c;
	unsigned int seen = 0, i;
	struct stablesend *ss;
	int fd, fds[2], efd, ret;
	unsigned long long total = 0, pos = 0;
	uint64_t ev = 0;
	struct sink s;

	if (access(STABLESEND_DEVICE, F_OK)) {
		printf("no %s: skipped\n", STABLESEND_DEVICE);
		return T_SKIP;
	}
	efd = eventfd(0, EFD_CLOEXEC);
	if (efd < 0)
		DIE("eventfd");
	ss = stablesend_open(efd, 0);
	if (!ss)
		DIE("stablesend_open");
	CHECK(stablesend_features(ss) & STABLESEND_FEAT_SUBMIT, "no SUBMIT");
	CHECK(stablesend_abi_version(ss) == STABLESEND_ABI_VERSION, "ABI %u",
	      stablesend_abi_version(ss));

	fd = tmpfile_fd(NREQ * CHUNK, 5);
	stream_pair(AF_UNIX, fds);
	sink_start(&s, fds[1]);
	for (i = 0; i < NREQ; i++) {
		stablesend_prep_req(&reqs[i], fd, fds[0], i * CHUNK, CHUNK, i);
		snprintf(heads[i], sizeof(heads[i]), "<%u>", i);
		stablesend_prep_hdtr(&reqs[i], heads[i], strlen(heads[i]),
				     "|", 1);
		total += strlen(heads[i]) + CHUNK + 1;
	}
	for (i = 0; i < NREQ; ) {
		ret = stablesend_submit(ss, reqs + i, NREQ - i);
		CHECK(ret > 0, "submit at %u: %s", i, strerror(-ret));
		if (ret <= 0)
			break;
		i += ret;
	}

	while (seen < NREQ) {
		int n = stablesend_reap(ss, cqes, 64, 10000), j;

		CHECK(n > 0, "reap after %u: %d", seen, n);
		if (n <= 0)
			break;
		for (j = 0; j < n; j++) {
			unsigned int u = cqes[j].user_data;

			CHECK(cqes[j].flags & STABLESEND_CQE_SENT, "flags %x",
			      cqes[j].flags);
			CHECK(u < NREQ && cqes[j].res ==
			      (long long)(strlen(heads[u]) + CHUNK + 1),
			      "cqe %u res %lld", u, (long long)cqes[j].res);
			seen++;
		}
	}
	/* A count lands just after its record: collect them for up to 5 s. */
	for (i = 0; i < 50 && ev < NREQ; i++) {
		struct pollfd p = { .fd = efd, .events = POLLIN };
		uint64_t more;

		if (poll(&p, 1, 100) == 1 &&
		    read(efd, &more, sizeof(more)) == sizeof(more))
			ev += more;
	}
	CHECK(ev == NREQ, "eventfd count %llu", (unsigned long long)ev);
	CHECK_NEG(stablesend_cancel(ss, 123456), ENOENT);
	CHECK(stablesend_counters(ss, &c) == 0 && c.submitted == NREQ &&
	      c.completed == NREQ && !c.failed && c.bytes_sent == total,
	      "counters: submitted %llu completed %llu failed %llu bytes %llu",
	      (unsigned long long)c.submitted,
	      (unsigned long long)c.completed, (unsigned long long)c.failed,
	      (unsigned long long)c.bytes_sent);
	CHECK_RET(stablesend_reap(ss, cqes, 64, 0), 0);

	close(fds[0]);
	sink_finish(&s);
	CHECK(s.len == total, "received %zu of %llu", s.len, total);
	for (i = 0; i < NREQ && pos + 16 + CHUNK < s.len; i++) {
		size_t hl = strlen(heads[i]), j;

		if (memcmp(s.buf + pos, heads[i], hl) ||
		    s.buf[pos + hl + CHUNK] != '|') {
			CHECK(0, "framing of request %u", i);
			break;
		}
		for (j = 0; j < CHUNK; j++)
			if (s.buf[pos + hl + j] != pat(i * CHUNK + j, 5))
				break;
		CHECK(j == CHUNK, "request %u: byte %zu", i, j);
		pos += hl + CHUNK + 1;
	}
	free(s.buf);
	stablesend_close(ss);

	/* Non-blocking context: nothing queued, reap does not wait. */
	ss = stablesend_open_limit(-1, STABLESEND_OPEN_NONBLOCK, 1 << 20);
	CHECK(ss && stablesend_mem_limit(ss) == 1 << 20, "open_limit");
	if (ss) {
		struct pollfd p = { .fd = stablesend_fd(ss), .events = POLLIN };

		CHECK(poll(&p, 1, 0) == 0, "nothing to read");
		CHECK_RET(stablesend_reap(ss, cqes, 64, 0), 0);
		stablesend_close(ss);
	}
	close(fd);
	close(efd);
	return t_result();
}
