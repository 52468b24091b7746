/* SPDX-License-Identifier: MIT */
/*
 * Private to libstablesend.  Everything not named stablesend_* is local to
 * the shared library (libstablesend.map); internal symbols that must be
 * shared between files use the ss_ prefix.
 */
#ifndef STABLESEND_INTERNAL_H
#define STABLESEND_INTERNAL_H

#include <sys/types.h>

#include "stablesend.h"

/*
 * The kernel caps one read/write/sendfile at INT_MAX rounded down to a
 * page (MAX_RW_COUNT); so do we, which also keeps every result in the int
 * an ioctl() returns.
 */
#define SS_MAX_RW_COUNT		0x7ffff000UL

/*
 * Device path.  A variable rather than the macro only so that tests linked
 * with libstablesend.a can point it elsewhere; the shared library does not
 * export it.
 */
extern const char *ss_device_path;

/* sendfile.c: the path stable calls take here (libstablesend-preload). */
int ss_sendfile_probe(int *why);

/* sendfile.c: libstablesend-preload's call, module first. */
#define SS_DECLINED	(-2)	/* not ours: hand it to sendfile(2) */
#define SS_UNDECIDED	(-3)	/* no module: the caller decides */
ssize_t ss_sendfile_preload(int out_fd, int in_fd, off_t *offset,
			    size_t count);
int ss_stable_socket(int fd);

struct stablesend {
	int fd;
	unsigned int flags;
	struct stablesend_setup setup;
};

#endif /* STABLESEND_INTERNAL_H */
