// SPDX-License-Identifier: GPL-2.0
/*
 * An abort stops a huge request promptly, not only between requests.  A
 * 256 MiB request (a sparse file; the open's limit SETUP to 256 MiB, so the
 * whole of it is snapshotted before it starts) goes to a fast reader over
 * TCP loopback, and over kTLS (TLS_TX on the sender only: encrypting makes
 * the sender slower than the reader, so the socket never fills and the
 * sender never has to wait; the reader counts the plaintext of the
 * complete records it got):
 * - async: 100 ms after the reader got the first bytes, the device fd is
 *   closed; the reader must stop getting data within 1 s of the close and
 *   get less than 256 MiB;
 * - sync: SIGUSR1 (a handler, no SA_RESTART) 100 ms after the first bytes
 *   reached the reader; SEND must return within 1 s of the signal with a
 *   partial count, exactly what the reader gets.
 * The exec model (issue 13) checks abort, close and signals between chunks
 * of at most 1 MiB.
 *
 * test-timeout: 300
 */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#define BIG		(256ULL << 20)
#define QUIET_S		1.0	/* reader idle this long: the sender stopped */

/* TLS 1.2 AES-GCM-128 record: 5 bytes header, 8 explicit nonce, 16 tag. */
#define TLS_HDR		5
#define TLS_OVERHEAD	(8 + 16)

struct rx {
	int fd, tls;
	/* Payload bytes got: plaintext of complete records under kTLS. */
	volatile unsigned long long got;
	volatile double first, last;	/* times of the first and last data */
	volatile int stop;
	unsigned char hdr[TLS_HDR];
	unsigned int hdr_got;
	size_t rec_left, rec_len;
};

/* Walk the TLS records in @n bytes of @b. */
static void rx_tls(struct rx *rx, const unsigned char *b, size_t n)
{
	while (n) {
		size_t k;

		if (rx->hdr_got < TLS_HDR) {
			rx->hdr[rx->hdr_got++] = *b++;
			n--;
			if (rx->hdr_got == TLS_HDR) {
				rx->rec_len = rx->hdr[3] << 8 | rx->hdr[4];
				rx->rec_left = rx->rec_len;
			}
			continue;
		}
		k = n < rx->rec_left ? n : rx->rec_left;
		rx->rec_left -= k;
		b += k;
		n -= k;
		if (!rx->rec_left) {
			if (rx->rec_len > TLS_OVERHEAD)
				rx->got += rx->rec_len - TLS_OVERHEAD;
			rx->hdr_got = 0;
		}
	}
}

static void *rx_fn(void *p)
{
	static unsigned char buf[1 << 20];
	struct rx *rx = p;

	while (!rx->stop) {
		struct pollfd pfd = { .fd = rx->fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, 100) <= 0)
			continue;
		r = read(rx->fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (!rx->first)
			rx->first = now_s();
		if (rx->tls)
			rx_tls(rx, buf, r);
		else
			rx->got += r;
		rx->last = now_s();
	}
	return NULL;
}

static void pair(int tls, int *snd, struct rx *rx)
{
	tcp_pair(AF_INET, snd, &rx->fd);
	rx->tls = tls;
	/* kTLS missing (no tls.ko or gcm(aes)) is a failure, as in sockets. */
	if (tls)
		REQUIRE(ktls_setup(*snd, TLS_TX) == 0, "kTLS TX");
}

/*
 * Wait until the reader got nothing for QUIET_S since @t_ref or its last
 * data, whichever is later (at most @max_s): its total.
 */
static unsigned long long rx_quiet(struct rx *rx, double t_ref, double max_s)
{
	double end = now_s() + max_s;

	while (now_s() < end && rx->got < BIG &&
	       now_s() - (rx->got && rx->last > t_ref ? rx->last : t_ref) < QUIET_S)
		usleep(20000);
	return rx->got;
}

/* Wait up to @max_s for the reader's first bytes: whether they came. */
static int rx_started(struct rx *rx, double max_s)
{
	double end = now_s() + max_s;

	while (!rx->got && now_s() < end)
		usleep(1000);
	return rx->got > 0;
}

static int big_file(void)
{
	char name[] = "/tmp/abort-chunks-XXXXXX";
	int fd = mkstemp(name);

	REQUIRE(fd >= 0, "mkstemp");
	unlink(name);
	/* Sparse: holes read as zeros and take no memory in tmpfs. */
	REQUIRE(ftruncate(fd, BIG) == 0, "ftruncate 256 MiB");
	return fd;
}

static int big_dev(void)
{
	int dev = ss_dev();

	if (ss_setup(dev, -1, BIG)) {
		printf("SETUP mem_limit 256 MiB: %s (max_limit below it?)\n",
		       strerror(errno));
		exit(SKIP);
	}
	return dev;
}

static void async_close(int file, int tls)
{
	const char *how = tls ? "ktls" : "tcp";
	struct stablesend_req r;
	unsigned long long got;
	struct rx rx = { 0 };
	double t_close;
	pthread_t th;
	int dev, snd, ret;

	dev = big_dev();
	pair(tls, &snd, &rx);
	REQUIRE(pthread_create(&th, NULL, rx_fn, &rx) == 0, "pthread_create");
	r = ss_req(file, snd, 0, BIG, 1);
	ret = ss_submit(dev, &r, 1);
	REQUIRE(ret == 1, "SUBMIT 256 MiB returned %d", ret);
	/*
	 * Close once the request is under way: closed before its first byte,
	 * it is cancelled whole, which proves nothing about chunks.
	 */
	CHECK(rx_started(&rx, 30), "%s async: no data 30 s after SUBMIT", how);
	usleep(100000);
	t_close = now_s();
	got = rx.got;
	close(dev);
	printf("%s async: %llu bytes (%.1f MiB) had arrived when the device fd was closed\n",
	       how, got, got / 1048576.0);
	got = rx_quiet(&rx, t_close, 120);
	printf("%s async: reader got %llu bytes (%.1f MiB), the last %.3f s after the close\n",
	       how, got, got / 1048576.0, rx.got ? rx.last - t_close : 0.0);
	if (rx.got && rx.last > rx.first)
		printf("%s async: %.1f MiB/s while it flowed\n",
		       how, got / 1048576.0 / (rx.last - rx.first));
	CHECK(got < BIG, "%s async: all 256 MiB arrived although the device fd was closed", how);
	CHECK(!got || rx.last - t_close < 1.0,
	      "%s async: the reader still got data %.3f s after the device fd was closed",
	      how, rx.last - t_close);
	rx.stop = 1;
	pthread_join(th, NULL);
	close(snd);
	close(rx.fd);
}

static pthread_t main_th;
static volatile double t_sig;

static void on_usr1(int sig)
{
	(void)sig;
}

static void *killer_fn(void *p)
{
	struct rx *rx = p;

	rx_started(rx, 60);
	usleep(100000);
	t_sig = now_s();
	pthread_kill(main_th, SIGUSR1);
	return NULL;
}

static void sync_signal(int file, int tls)
{
	const char *how = tls ? "ktls" : "tcp";
	struct sigaction sa = { .sa_handler = on_usr1 };	/* no SA_RESTART */
	struct stablesend_req r;
	unsigned long long got;
	struct rx rx = { 0 };
	pthread_t th, kth;
	double t_ret;
	int dev, snd;
	long ret;

	sigaction(SIGUSR1, &sa, NULL);
	dev = big_dev();
	pair(tls, &snd, &rx);
	main_th = pthread_self();
	REQUIRE(pthread_create(&th, NULL, rx_fn, &rx) == 0, "pthread_create");
	REQUIRE(pthread_create(&kth, NULL, killer_fn, &rx) == 0, "pthread_create");
	r = ss_req(file, snd, 0, BIG, 2);
	ret = ss_send(dev, &r);
	t_ret = now_s();
	pthread_join(kth, NULL);
	got = rx_quiet(&rx, t_ret, 120);
	printf("%s sync: SEND returned %ld (%s) %.3f s after SIGUSR1; reader got %llu bytes (%.1f MiB)\n",
	       how, ret, ret < 0 ? strerror(errno) : "count", t_ret - t_sig, got,
	       got / 1048576.0);
	if (rx.got && rx.last > rx.first)
		printf("%s sync: %.1f MiB/s while it flowed\n",
		       how, got / 1048576.0 / (rx.last - rx.first));
	CHECK(t_ret - t_sig < 1.0, "%s sync: SEND returned %.3f s after the signal",
	      how, t_ret - t_sig);
	CHECK(ret > 0 && (unsigned long long)ret < BIG,
	      "%s sync: SEND returned %ld, expected a partial count", how, ret);
	CHECK(ret < 0 || (unsigned long long)ret == got,
	      "%s sync: SEND returned %ld but the reader got %llu", how, ret, got);
	rx.stop = 1;
	pthread_join(th, NULL);
	close(snd);
	close(rx.fd);
	close(dev);
}

static void on_alarm(int sig)
{
	static const char msg[] = "abort-chunks: no progress for 150 s, giving up\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

int main(void)
{
	long long ctx0 = ss_contexts_baseline();
	int file, tls;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, on_alarm);
	file = big_file();

	for (tls = 0; tls < 2; tls++) {
		const char *how = tls ? "ktls" : "tcp";

		alarm(150);
		async_close(file, tls);
		CHECK(ss_drained(30), "%s async: still %lld requests, %lld bytes in flight 30 s after the close",
		      how, ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));

		alarm(150);
		sync_signal(file, tls);
		CHECK(ss_drained(30), "%s sync: still %lld requests, %lld bytes in flight",
		      how, ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
		alarm(0);
	}
	CHECK(ss_stat_wait("contexts", ctx0, 10) == ctx0,
	      "contexts %lld, expected %lld", ss_stat("contexts"), ctx0);
	close(file);
	return test_result();
}
