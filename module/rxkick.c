// SPDX-License-Identifier: GPL-2.0
/*
 * Kicking network receive processing on the housekeeping CPUs.
 *
 * Since 6.1 a socket buffer freed on another CPU than the one that
 * allocated it may wait on that CPU's defer list until the CPU next runs
 * network receive processing (skb_attempt_defer_free()); the kernel only
 * interrupts the CPU once the list is half full.  Over loopback and veth it
 * is the receiving socket that frees the buffers holding our pages, so on a
 * quiet connection a request's last pages could stay there for good: no
 * RELEASED record, and no memory for the next submission.  When the reaper
 * sees no page come back for a while it calls ss_rx_kick(), which schedules
 * a NAPI context of a dummy device on every online housekeeping CPU; the
 * NET_RX softirq that runs it frees the defer list first.  Nohz_full and
 * isolated CPUs are left alone: their defer lists wait for their own next
 * receive processing, or for the kernel's interrupt at half full.
 *
 * The module parameter rx_kick=0 turns the kicks off, to see what they are
 * for (tests/guest/quiet.c).
 */
#include <linux/cpu.h>
#include <linux/moduleparam.h>
#include <linux/netdevice.h>
#include <linux/percpu.h>
#include <linux/sched/isolation.h>
#include <linux/workqueue.h>

#include "ss.h"

struct ss_rx_kick {
	struct napi_struct napi;
	struct work_struct work;
};

static struct net_device *ss_kick_dev;
static struct ss_rx_kick __percpu *ss_kicks;
/* Kicks queued and not yet run, plus one while ss_rx_kick() queues them. */
static atomic_t ss_kicks_pending = ATOMIC_INIT(0);

static int ss_rx_kick_poll(struct napi_struct *napi, int budget)
{
	napi_complete_done(napi, 0);
	return 0;
}

/* Runs on the CPU to kick: schedule its NAPI context there. */
static void ss_rx_kick_fn(struct work_struct *work)
{
	struct ss_rx_kick *k = container_of(work, struct ss_rx_kick, work);

	local_bh_disable();
	napi_schedule(&k->napi);
	/*
	 * Runs the softirq (before 6.5 it may be left to a running ksoftirqd:
	 * then the reaper looks too early, and sees the pages a tick later).
	 */
	local_bh_enable();
	if (atomic_dec_and_test(&ss_kicks_pending))
		ss_reaper_kicked();
}

static bool ss_rx_kick_on = true;
module_param_named(rx_kick, ss_rx_kick_on, bool, 0644);
MODULE_PARM_DESC(rx_kick,
		 "Kick idle CPUs' socket buffer defer lists when pages do not come back (default on)");

bool ss_rx_kick_enabled(void)
{
	return READ_ONCE(ss_rx_kick_on);
}

/*
 * Every online housekeeping CPU; counted.  Once the last of them has run,
 * the reaper looks at what they freed (ss_reaper_kicked()).
 */
void ss_rx_kick(void)
{
	const struct cpumask *wq = housekeeping_cpumask(HK_TYPE_WQ);
	const struct cpumask *dom = housekeeping_cpumask(HK_TYPE_DOMAIN);
	unsigned int cpu;

	if (!READ_ONCE(ss_rx_kick_on))
		return;
	atomic_inc(&ss_kicks_pending);
	cpus_read_lock();
	for_each_online_cpu(cpu) {
		if (!cpumask_test_cpu(cpu, wq) || !cpumask_test_cpu(cpu, dom))
			continue;
		atomic_inc(&ss_kicks_pending);
		/* Already queued: that one's run counts for us. */
		if (!queue_work_on(cpu, system_highpri_wq,
				   &per_cpu_ptr(ss_kicks, cpu)->work))
			atomic_dec(&ss_kicks_pending);
	}
	cpus_read_unlock();
	atomic64_inc(&stablesend_stats[SS_RX_KICKS]);
	if (atomic_dec_and_test(&ss_kicks_pending))
		ss_reaper_kicked();
}

int ss_rx_kick_init(void)
{
	unsigned int cpu;

	ss_kick_dev = alloc_netdev_dummy(0);
	if (!ss_kick_dev)
		return -ENOMEM;
	ss_kicks = alloc_percpu(struct ss_rx_kick);
	if (!ss_kicks) {
		stablesend_free_netdev_dummy(ss_kick_dev);
		return -ENOMEM;
	}
	for_each_possible_cpu(cpu) {
		struct ss_rx_kick *k = per_cpu_ptr(ss_kicks, cpu);

		INIT_WORK(&k->work, ss_rx_kick_fn);
		netif_napi_add(ss_kick_dev, &k->napi, ss_rx_kick_poll);
		napi_enable(&k->napi);
	}
	return 0;
}

/*
 * After the reaper has stopped, with no group left: a kick still running
 * may run it once more, which with nothing to look at queues no kick.
 * ss_exit() stops it again afterwards.
 */
void ss_rx_kick_exit(void)
{
	unsigned int cpu;

	for_each_possible_cpu(cpu) {
		struct ss_rx_kick *k = per_cpu_ptr(ss_kicks, cpu);

		cancel_work_sync(&k->work);
		napi_disable(&k->napi);
		__netif_napi_del(&k->napi);
	}
	synchronize_net();
	free_percpu(ss_kicks);
	stablesend_free_netdev_dummy(ss_kick_dev);
}
