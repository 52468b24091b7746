// SPDX-License-Identifier: GPL-2.0
/*
 * stablesend: stable, single-copy file-to-socket transmission.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/rcupdate.h>
#include <linux/workqueue.h>

#include "ss.h"

unsigned long stablesend_default_limit = 16UL << 20;
module_param_named(default_limit, stablesend_default_limit, ulong, 0644);
MODULE_PARM_DESC(default_limit,
		 "Snapshot memory per open unless SETUP asks otherwise (bytes)");

unsigned long stablesend_max_limit = 256UL << 20;
module_param_named(max_limit, stablesend_max_limit, ulong, 0644);
MODULE_PARM_DESC(max_limit, "Largest memory limit SETUP may ask for (bytes)");

atomic64_t stablesend_stats[SS_NR_STATS];
struct workqueue_struct *stablesend_wq;

static int __init ss_init(void)
{
	int err;

	ss_reaper_init();
	stablesend_wq = alloc_workqueue("stablesend", WQ_UNBOUND, 0);
	if (!stablesend_wq)
		return -ENOMEM;
	err = ss_rx_kick_init();
	if (err)
		goto fail_wq;
	err = ss_memory_init();
	if (err)
		goto fail_kick;
	/*
	 * Last: a step added after it must unwind with ss_device_exit(), as
	 * its stats kobject holds the module's (free_module() would wait).
	 */
	err = ss_device_init();
	if (err)
		goto fail_mem;
	pr_info("ABI %d loaded\n", STABLESEND_ABI_VERSION);
	return 0;

fail_mem:
	ss_memory_exit();
fail_kick:
	ss_rx_kick_exit();
fail_wq:
	destroy_workqueue(stablesend_wq);
	return err;
}

/*
 * Every context holds a module reference until its last request's pages
 * are released, so nothing is in flight here; the workqueue may still be
 * running the work item that dropped the last reference, and whoever
 * queued it (task work of a user task, a softirq) may still be returning
 * through our code: RCU and RCU Tasks grace periods wait for them, as long
 * as nothing sleeps after dropping a last reference (RCU Tasks takes a
 * task asleep for one out of our code).
 */
static void __exit ss_exit(void)
{
	ss_device_exit();
	stablesend_uring_watch_exit();
	ss_reaper_stop();
	ss_memory_exit();
	ss_rx_kick_exit();
	/* The last kick may have asked for one more pass. */
	ss_reaper_stop();
	destroy_workqueue(stablesend_wq);
	synchronize_rcu();
	synchronize_rcu_tasks();
}

module_init(ss_init);
module_exit(ss_exit);
MODULE_VERSION(STABLESEND_VERSION);
MODULE_LICENSE("GPL");
MODULE_AUTHOR("stablesend developers");
MODULE_DESCRIPTION("Stable single-copy file-to-socket transmission");
