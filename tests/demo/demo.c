// SPDX-License-Identifier: GPL-2.0
/*
 * The seed scenario, side by side, for people: a file holds "A" bytes, it
 * is sent, and right after the sending call returns the file is
 * overwritten with "B" bytes; only then does the receiver read.  What does
 * the receiver get?
 */
#include "../guest/common.h"
#include <sys/sendfile.h>

#define LEN (256 << 10)

static const char *verdict(const char *buf, size_t n)
{
	size_t a = 0, b = 0, i;
	static char out[128];

	for (i = 0; i < n; i++) {
		a += buf[i] == 'A';
		b += buf[i] == 'B';
	}
	snprintf(out, sizeof(out), "%6zu x 'A', %6zu x 'B'  %s", a, b,
		 b ? "CORRUPTED: later write leaked onto the wire" :
		 "stable: what the file held at the call");
	return out;
}

static void one(const char *name, int dev, int mode)
{
	char *buf = malloc(LEN);
	int file = temp_file(LEN, 'A'), c, s, p[2], v = 8 << 20;
	off_t off = 0;
	struct stablesend_req r;
	struct stablesend_cqe cqe;
	long n = -1;

	tcp_pair(AF_INET, &c, &s);
	setsockopt(c, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v));
	setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v));
	r = ss_req(file, c, 0, LEN, 1);
	switch (mode) {
	case 0:
		n = sendfile(c, file, &off, LEN);
		break;
	case 1:
		REQUIRE(pipe(p) == 0, "pipe");
		fcntl(p[1], F_SETPIPE_SZ, LEN);
		n = splice(file, &off, p[1], NULL, LEN, 0);
		if (n == LEN)
			n = splice(p[0], NULL, c, NULL, LEN, 0);
		close(p[0]);
		close(p[1]);
		break;
	case 2:
		n = ss_send(dev, &r);
		break;
	case 3:
		n = ss_submit(dev, &r, 1) == 1 ? LEN : -1;
		break;
	}
	memset(buf, 'B', LEN);
	write_full(file, buf, LEN, 0);		/* right after the call */
	if (mode == 3)
		ss_reap(dev, &cqe, 1, 5000);
	if (n != LEN || read_full(s, buf, LEN) != LEN)
		printf("  %-28s failed: %s\n", name, strerror(errno));
	else
		printf("  %-28s %s\n", name, verdict(buf, LEN));
	close(c);
	close(s);
	close(file);
	free(buf);
}

int main(void)
{
	int dev = ss_dev();

	printf("\nA %d KiB file of 'A' is sent over TCP; right after the call returns it is\n"
	       "overwritten with 'B'; then the receiver reads:\n\n", LEN >> 10);
	one("sendfile(2)", dev, 0);
	one("splice(2) through a pipe", dev, 1);
	one("stablesend (synchronous)", dev, 2);
	one("stablesend (asynchronous)", dev, 3);
	printf("\n");
	close(dev);
	return 0;
}
