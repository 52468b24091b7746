// SPDX-License-Identifier: GPL-2.0
/*
 * The library's asynchronous API against the real module: the host test
 * tests/host/async-module.c, which skips on a host without the module,
 * built here against libstablesend.a and run where the module is loaded.
 * A skip here is a failure: the module is there.
 * test-timeout: 300
 */
#define _GNU_SOURCE
#define main async_module_main
#include "../host/async-module.c"
#undef main

int main(void)
{
	int rc = async_module_main();

	if (rc == T_SKIP) {
		printf("FAIL: tests/host/async-module skipped although the module is loaded\n");
		return T_FAIL;
	}
	return rc;
}
