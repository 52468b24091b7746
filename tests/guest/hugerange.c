// SPDX-License-Identifier: GPL-2.0
/*
 * A request larger than the open's memory limit fails with EMSGSIZE at
 * once, before anything sized by the request is allocated: a 32 GiB and a
 * 500 GiB range of a sparse file, 50 times each, leave VmallocUsed and
 * the slab counters where they were and take no time to refuse.  (The
 * module used to allocate the bvec array for the whole range first: 130
 * MiB of vmalloc for 32 GiB, and ENOMEM instead of EMSGSIZE for 500 GiB.)
 * compat32: yes
 */
#include "common.h"
#include <pthread.h>

/* A /proc/meminfo field, in KiB. */
static long long meminfo(const char *field)
{
	char line[256];
	long long v = -1;
	size_t n = strlen(field);
	FILE *f = fopen("/proc/meminfo", "r");

	REQUIRE(f, "/proc/meminfo");
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':')
			v = atoll(line + n + 1);
	fclose(f);
	return v;
}

/* Peaks of VmallocUsed and Slab while the requests are refused. */
static volatile int sampling;
static long long vm_max, sl_max;

static void *sampler(void *arg)
{
	(void)arg;
	while (__atomic_load_n(&sampling, __ATOMIC_ACQUIRE)) {
		long long vm = meminfo("VmallocUsed"), sl = meminfo("Slab");

		vm_max = vm > vm_max ? vm : vm_max;
		sl_max = sl > sl_max ? sl : sl_max;
	}
	return NULL;
}

int main(void)
{
	static const unsigned long long sizes[] = { 32ULL << 30, 500ULL << 30 };
	int dev = ss_dev(), file, c, s, i, k;
	char name[] = "/tmp/stablesend-huge-XXXXXX";

	file = mkstemp(name);
	REQUIRE(file >= 0, "mkstemp");
	unlink(name);
	REQUIRE(ftruncate(file, 600LL << 30) == 0, "ftruncate 600 GiB");
	REQUIRE(ss_setup(dev, -1, 16 << 20) == 0, "SETUP 16 MiB");
	tcp_pair(AF_INET, &c, &s);

	for (k = 0; k < 2; k++) {
		long long vm0 = meminfo("VmallocUsed"), sl0 = meminfo("Slab");
		double t0 = now_s(), took;
		int bad = 0, err = 0;
		pthread_t t;

		vm_max = vm0;
		sl_max = sl0;
		__atomic_store_n(&sampling, 1, __ATOMIC_RELEASE);
		REQUIRE(pthread_create(&t, NULL, sampler, NULL) == 0, "sampler");
		for (i = 0; i < 50; i++) {
			struct stablesend_req r = ss_req(file, c, 0, sizes[k], i);
			int ret = i & 1 ? ss_submit(dev, &r, 1) : (int)ss_send(dev, &r);

			if (ret != -1 || errno != EMSGSIZE) {
				bad++;
				err = ret == -1 ? errno : 0;
			}
		}
		__atomic_store_n(&sampling, 0, __ATOMIC_RELEASE);
		pthread_join(t, NULL);
		took = now_s() - t0;
		printf("%llu GiB: 50 requests refused in %.3f s; VmallocUsed %lld -> max %lld KiB, Slab %lld -> max %lld KiB\n",
		       sizes[k] >> 30, took, vm0, vm_max, sl0, sl_max);
		CHECK(!bad, "%llu GiB: %d of 50 requests did not fail with EMSGSIZE (last errno %d)",
		      sizes[k] >> 30, bad, err);
		/* Each probe would show a whole-range array (130 MiB for 32 GiB). */
		CHECK(vm_max - vm0 < 4096, "%llu GiB: VmallocUsed rose by %lld KiB",
		      sizes[k] >> 30, vm_max - vm0);
		CHECK(sl_max - sl0 < 4096, "%llu GiB: Slab rose by %lld KiB",
		      sizes[k] >> 30, sl_max - sl0);
	}
	close(c);
	close(s);
	close(dev);
	close(file);
	return test_result();
}
