/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by badinput, faults and sockets: the payload pattern, and a
 * STABLESEND_IOC_SEND that cannot hang a test (a SIGALRM watchdog ends the
 * wait; a started request then returns what was sent).
 */
#ifndef STABLESEND_TEST_WATCHDOG_H
#define STABLESEND_TEST_WATCHDOG_H

#include "common.h"
#include <pthread.h>
#include <signal.h>

static inline unsigned char pat(uint64_t pos, unsigned int seed)
{
	return (unsigned char)(pos * 131 + (pos >> 12) * 7 + seed * 29 + 1);
}

static inline void on_alarm(int sig)
{
	(void)sig;
}

/*
 * Block SIGALRM in this thread and every thread it creates from now on;
 * send_wd() takes it in the calling thread only.
 */
static inline void alarm_setup(void)
{
	struct sigaction sa = { .sa_handler = on_alarm };	/* no SA_RESTART */
	sigset_t set;

	sigaction(SIGALRM, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/*
 * STABLESEND_IOC_SEND that cannot hang the test: after @secs a signal ends
 * the wait (a started request then returns what was sent).  *@stalled
 * tells whether that happened.
 */
static inline long send_wd(int dev, struct stablesend_req *r, unsigned int secs,
		    int *stalled)
{
	struct timespec zero = { 0 };
	sigset_t set;
	double t0 = now_s();
	long ret;
	int err;

	sigemptyset(&set);
	sigaddset(&set, SIGALRM);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	alarm(secs);
	ret = ss_send(dev, r);
	err = errno;
	alarm(0);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	sigtimedwait(&set, NULL, &zero);	/* a late one, pending */
	*stalled = now_s() - t0 >= secs - 0.5;
	errno = err;
	return ret;
}

#endif
