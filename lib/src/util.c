// SPDX-License-Identifier: MIT
#include "internal.h"

#ifndef SS_VERSION
#error "SS_VERSION must come from the Makefile (PACKAGE_VERSION in dkms.conf)"
#endif

const char *stablesend_version(void)
{
	return SS_VERSION;
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
};

const char *stablesend_feature_name(__u64 feature)
{
	unsigned int i;

	for (i = 0; i < sizeof(features) / sizeof(features[0]); i++)
		if (features[i].bit == feature)
			return features[i].name;
	return NULL;
}
