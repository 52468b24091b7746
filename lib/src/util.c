// SPDX-License-Identifier: MIT
#include "internal.h"

#ifndef SS_VERSION
#error "SS_VERSION must come from the Makefile (PACKAGE_VERSION in dkms.conf)"
#endif
#if !defined(SS_VERSION_MAJOR) || !defined(SS_VERSION_MINOR) || \
	!defined(SS_VERSION_PATCH)
#error "SS_VERSION_MAJOR/MINOR/PATCH must come from the Makefile"
#endif
#if SS_VERSION_MAJOR != STABLESEND_VERSION_MAJOR || \
	SS_VERSION_MINOR != STABLESEND_VERSION_MINOR || \
	SS_VERSION_PATCH != STABLESEND_VERSION_PATCH
#error "STABLESEND_VERSION_* in stablesend.h differ from PACKAGE_VERSION in dkms.conf"
#endif

const char *stablesend_version(void)
{
	return SS_VERSION;
}

int stablesend_check_version(int major, int minor)
{
	return STABLESEND_VERSION_MAJOR > major ||
	       (STABLESEND_VERSION_MAJOR == major &&
		STABLESEND_VERSION_MINOR >= minor);
}

static const struct {
	__u64 bit;
	const char *name;
} features[] = {
	{ STABLESEND_FEAT_SUBMIT,	"submit" },
	{ STABLESEND_FEAT_SEND,		"send" },
	{ STABLESEND_FEAT_HDTR,		"hdtr" },
	{ STABLESEND_FEAT_CANCEL,	"cancel" },
	{ STABLESEND_FEAT_RELEASE,	"release" },
	{ STABLESEND_FEAT_TCP,		"tcp" },
	{ STABLESEND_FEAT_UNIX,		"unix" },
	{ STABLESEND_FEAT_KTLS,		"ktls" },
	{ STABLESEND_FEAT_SPLICE_PAGES,	"splice_pages" },
	{ STABLESEND_FEAT_URING,	"uring" },
	{ STABLESEND_FEAT_SEND_SOCKFLAGS, "send_sockflags" },
	{ STABLESEND_FEAT_NOWAIT,	"nowait" },
};

const char *stablesend_feature_name(__u64 feature)
{
	unsigned int i;

	for (i = 0; i < sizeof(features) / sizeof(features[0]); i++)
		if (features[i].bit == feature)
			return features[i].name;
	return NULL;
}
