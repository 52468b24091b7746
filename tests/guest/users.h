/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by userbound and userrecords: switch to another uid, and drop
 * CAP_SYS_RESOURCE, which lets an open go beyond the per-user bounds.
 */
#ifndef STABLESEND_TEST_USERS_H
#define STABLESEND_TEST_USERS_H

#include <grp.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

static inline void become(uid_t id)
{
	if (setgroups(0, NULL) || setgid(id) || setuid(id))
		_exit(90);
}

/* Drop CAP_SYS_RESOURCE from every set of this (root) process. */
static inline int drop_sys_resource(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d))
		return -1;
	d[CAP_SYS_RESOURCE / 32].effective &= ~(1U << (CAP_SYS_RESOURCE % 32));
	d[CAP_SYS_RESOURCE / 32].permitted &= ~(1U << (CAP_SYS_RESOURCE % 32));
	d[CAP_SYS_RESOURCE / 32].inheritable &= ~(1U << (CAP_SYS_RESOURCE % 32));
	return syscall(SYS_capset, &h, d);
}

#endif /* STABLESEND_TEST_USERS_H */
