// SPDX-License-Identifier: GPL-2.0
/*
 * stablesend_sendfile() in an event loop, as nginx uses sendfile(2) (issue
 * 13): one server thread serves two clients over non-blocking TCP sockets
 * with poll() and stablesend_sendfile() (each writable socket gets calls
 * until EAGAIN or a short count).  Client A asks for a 16 MiB file and never
 * reads; client B, 300 ms later, asks for a 1 MiB file and must get all of
 * it, intact, soon: within 1 s on a real machine; the test fails only when
 * B is not fully served 5 s after its request (TCG).  A stalled client
 * must not freeze the loop.  When it does, the test says where the server
 * thread was, then closes A to let it go.  Once the server process is gone
 * the module holds none of its pages.
 */
#include "common.h"
#include <pthread.h>
#include <sys/wait.h>
#include <stablesend.h>

#define A_LEN		(16 << 20)
#define B_LEN		(1 << 20)
#define B_LIMIT		5.0	/* s */

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 3 + (i >> 10) + 7);
}

struct client {
	int fd;			/* the server's end, non-blocking */
	size_t len;		/* what it asks for */
	off_t off;		/* sent so far */
	int asked, done;
	double asked_at;
};

struct server {
	struct client cl[2];
	int file;
	int stop;		/* these three: __atomic */
	int in_call;		/* inside stablesend_sendfile() */
	long long call_since;	/* ms */
	int calls, eagain, errors, path;
};

/* One call per POLLOUT: a short count means the socket is full, as for nginx. */
static void serve(struct server *sv, struct client *c)
{
	ssize_t n;

	__atomic_store_n(&sv->call_since, (long long)(now_s() * 1000), __ATOMIC_RELAXED);
	__atomic_store_n(&sv->in_call, 1, __ATOMIC_RELEASE);
	n = stablesend_sendfile(c->fd, sv->file, &c->off, c->len - c->off);
	__atomic_store_n(&sv->in_call, 0, __ATOMIC_RELEASE);
	sv->calls++;
	if (n < 0) {
		sv->eagain += errno == EAGAIN;
		if (errno != EAGAIN && errno != EINTR) {
			sv->errors++;
			c->done = 1;	/* the client went away */
		}
		return;
	}
	if (n > 0)
		sv->path = stablesend_sendfile_path();
	if ((size_t)c->off == c->len) {
		c->done = 1;
		shutdown(c->fd, SHUT_WR);
	}
}

static void *server(void *arg)
{
	struct server *sv = arg;

	while (!__atomic_load_n(&sv->stop, __ATOMIC_ACQUIRE) && !(sv->cl[0].done && sv->cl[1].done)) {
		struct pollfd p[2];
		int i;

		for (i = 0; i < 2; i++) {
			p[i].fd = sv->cl[i].done ? -1 : sv->cl[i].fd;
			p[i].events = sv->cl[i].asked ? POLLOUT : POLLIN;
			p[i].revents = 0;
		}
		if (poll(p, 2, 100) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (i = 0; i < 2; i++) {
			struct client *c = &sv->cl[i];
			char b;

			if (!c->asked && (p[i].revents & POLLIN)) {
				if (recv(c->fd, &b, 1, 0) == 1) {
					c->asked = 1;
					c->asked_at = now_s();
				}
				continue;
			}
			if (c->asked && (p[i].revents & (POLLOUT | POLLERR | POLLHUP)))
				serve(sv, c);
		}
	}
	return NULL;
}

static int run_server(void)
{
	struct server sv = { 0 };
	int ca, cb, file, fl, i;
	unsigned char *buf = malloc(B_LEN + 1);
	double t0, took = -1;
	size_t got = 0, j;
	pthread_t t;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(buf, "malloc");
	file = file_with_pattern(A_LEN, pat);
	sv.file = file;
	tcp_pair(AF_INET, &ca, &sv.cl[0].fd);
	tcp_pair(AF_INET, &cb, &sv.cl[1].fd);
	sv.cl[0].len = A_LEN;
	sv.cl[1].len = B_LEN;
	for (i = 0; i < 2; i++) {
		fl = fcntl(sv.cl[i].fd, F_GETFL);
		REQUIRE(fcntl(sv.cl[i].fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	}
	pthread_create(&t, NULL, server, &sv);

	/* A asks and never reads. */
	REQUIRE(write(ca, "A", 1) == 1, "request A");
	usleep(300000);

	/* B asks and reads everything. */
	REQUIRE(write(cb, "B", 1) == 1, "request B");
	t0 = now_s();
	while (now_s() - t0 < B_LIMIT) {
		struct pollfd p = { .fd = cb, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 50) != 1)
			continue;
		n = recv(cb, buf + got, B_LEN + 1 - got, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			break;		/* EOF: served */
		got += n;
	}
	if (got == B_LEN)
		took = now_s() - t0;
	CHECK(got == B_LEN && took >= 0,
	      "client B got %zu of %d bytes in %.1f s while client A stalls (A: %lld of %d bytes sent); server thread %s",
	      got, B_LEN, now_s() - t0, (long long)sv.cl[0].off, A_LEN,
	      __atomic_load_n(&sv.in_call, __ATOMIC_ACQUIRE) ? "inside stablesend_sendfile()" : "not in a call");
	if (__atomic_load_n(&sv.in_call, __ATOMIC_ACQUIRE))
		fprintf(stderr, "the server thread has been inside one stablesend_sendfile() for %.1f s\n",
			now_s() - __atomic_load_n(&sv.call_since, __ATOMIC_RELAXED) / 1000.0);
	j = pattern_mismatch(buf, got, 0, pat);
	CHECK(j == got, "client B: byte %zu differs from the file", j);
	printf("client B: %zu bytes %s%.3f s after its request; client A: %lld bytes sent; server: %d calls, %d EAGAIN, path %s\n",
	       got, took >= 0 ? "in " : "not finished after ", took >= 0 ? took : now_s() - t0,
	       (long long)sv.cl[0].off, sv.calls, sv.eagain,
	       sv.path == STABLESEND_PATH_MODULE ? "module" : "not the module");
	/* Only meaningful once a call moved data. */
	CHECK(!sv.path || sv.path == STABLESEND_PATH_MODULE,
	      "stablesend_sendfile() path %d, want the module", sv.path);

	/* Let a stuck server go: A disappears (reset: its data is unread). */
	__atomic_store_n(&sv.stop, 1, __ATOMIC_RELEASE);
	close(ca);
	pthread_join(t, NULL);
	close(cb);
	close(sv.cl[0].fd);
	close(sv.cl[1].fd);
	close(file);
	free(buf);
	return test_result();
}

/*
 * The library keeps its device fd open for the process: the module owes
 * its pages back once the process (its last fd) is gone.
 */
int main(void)
{
	int st;
	pid_t pid = fork();

	REQUIRE(pid >= 0, "fork");
	if (!pid)
		_exit(run_server());
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the server process: status 0x%x", st);
	CHECK(ss_drained(10), "requests_in_flight %lld bytes_in_flight %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	return test_result();
}
