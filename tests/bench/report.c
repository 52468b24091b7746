// SPDX-License-Identifier: GPL-2.0
/*
 * bench --report: medians, ratios and the targets of issue 4 from the CSV
 * that the guest runs printed; gnuplot data and script for the chart.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NM 8
static const char *const meth[NM] = {
	"pread+send", "sendfile", "splice", "pread+zerocopy", "io_uring-zc",
	"stablesend-sync", "stablesend-async", "stablesend-uring",
};
enum { PREAD, SENDFILE, SPLICE, ZC, URING, SS_SYNC, SS_ASYNC, SS_URING };
#define NT 3
static const char *const trans[NT] = { "tcp-lo", "tcp-veth", "unix" };
#define NS 4
static const unsigned long long szv[NS] = { 4096, 65536, 1048576, 8388608 };
static const char *const szn[NS] = { "4KiB", "64KiB", "1MiB", "8MiB" };

struct rec {
	char kernel[96], transport[16], method[24];
	unsigned long long size;
	double thr, sys, snd, peak;	/* NAN when empty */
};

static struct rec *recs;
static int nrec, cap;

static double fld(const char *s)
{
	return *s ? strtod(s, NULL) : NAN;
}

static void load(const char *path)
{
	char line[512];
	FILE *f = fopen(path, "r");

	if (!f) {
		perror(path);
		exit(1);
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *v[9];
		int n = 0;

		if (!strncmp(line, "@csv ", 5))
			p += 5;
		if (!strncmp(p, "kernel,", 7))
			continue;
		p[strcspn(p, "\r\n")] = 0;
		while (n < 9) {
			v[n++] = p;
			p = strchr(p, ',');
			if (!p)
				break;
			*p++ = 0;
		}
		if (n != 9)
			continue;
		if (nrec == cap) {
			cap = cap ? 2 * cap : 256;
			recs = realloc(recs, cap * sizeof(*recs));
		}
		snprintf(recs[nrec].kernel, sizeof(recs[nrec].kernel), "%s", v[0]);
		snprintf(recs[nrec].transport, sizeof(recs[nrec].transport), "%s", v[1]);
		snprintf(recs[nrec].method, sizeof(recs[nrec].method), "%s", v[3]);
		recs[nrec].size = strtoull(v[2], NULL, 10);
		recs[nrec].thr = fld(v[5]);
		recs[nrec].sys = fld(v[6]);
		recs[nrec].snd = fld(v[7]);
		recs[nrec].peak = fld(v[8]);
		nrec++;
	}
	fclose(f);
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

enum { THR, SYS, SND, PEAK };

struct stat {
	int n;
	double med, min, max;
};

static struct stat get(const char *k, const char *t, unsigned long long size,
		       const char *m, int what)
{
	double v[64];
	struct stat s = { 0, NAN, NAN, NAN };
	int i;

	for (i = 0; i < nrec && s.n < 64; i++) {
		const struct rec *r = &recs[i];
		double x;

		if (strcmp(r->kernel, k) || strcmp(r->transport, t) ||
		    strcmp(r->method, m) || (size && r->size != size))
			continue;
		x = what == THR ? r->thr : what == SYS ? r->sys :
		    what == SND ? r->snd : r->peak;
		if (!isnan(x))
			v[s.n++] = x;
	}
	if (!s.n)
		return s;
	qsort(v, s.n, sizeof(v[0]), cmpd);
	s.med = s.n & 1 ? v[s.n / 2] : (v[s.n / 2 - 1] + v[s.n / 2]) / 2;
	s.min = v[0];
	s.max = v[s.n - 1];
	return s;
}

static double med(const char *k, const char *t, int si, int m, int what)
{
	return get(k, t, szv[si], meth[m], what).med;
}

static int has_transport(const char *k, const char *t)
{
	int i;

	for (i = 0; i < nrec; i++)
		if (!strcmp(recs[i].kernel, k) && !strcmp(recs[i].transport, t))
			return 1;
	return 0;
}

static int runs_of(const char *k, const char *t)
{
	int m, si, best = 0;

	for (m = 0; m < NM; m++)
		for (si = 0; si < NS; si++) {
			int n = get(k, t, szv[si], meth[m], THR).n;

			if (n > best)
				best = n;
		}
	return best;
}

static void cellf(char *buf, size_t n, const char *fmt, double a, double b)
{
	if (isnan(a))
		snprintf(buf, n, "n/a");
	else
		snprintf(buf, n, fmt, a, b);
}

/* CPU per byte by method and size, with its ratio to pread+send's. */
static void cpu_rows(const char *k, const char *t, const char *title, int what)
{
	char b[64];
	int m, si;

	printf("%-18s", title);
	for (si = 0; si < NS; si++)
		printf("%18s", szn[si]);
	printf("\n");
	for (m = 0; m < NM; m++) {
		printf("%-18s", meth[m]);
		for (si = 0; si < NS; si++) {
			double x = med(k, t, si, m, what);

			cellf(b, sizeof(b), "%.3f (%.2f)", x,
			      x / med(k, t, si, PREAD, what));
			printf("%18s", b);
		}
		printf("\n");
	}
}

static void table(const char *k, const char *t)
{
	char b[64];
	int m, si;

	printf("\n--- %s  %s  (median of %d run(s))\n", k, t, runs_of(k, t));
	printf("%-18s", "MB/s median (min)");
	for (si = 0; si < NS; si++)
		printf("%18s", szn[si]);
	printf("\n");
	for (m = 0; m < NM; m++) {
		printf("%-18s", meth[m]);
		for (si = 0; si < NS; si++) {
			struct stat s = get(k, t, szv[si], meth[m], THR);

			cellf(b, sizeof(b), "%.1f (%.1f)", s.med / 1e6, s.min / 1e6);
			printf("%18s", b);
		}
		printf("\n");
	}
	printf("%-18s", "x pread / x sendf");
	for (si = 0; si < NS; si++)
		printf("%18s", szn[si]);
	printf("\n");
	for (m = 0; m < NM; m++) {
		printf("%-18s", meth[m]);
		for (si = 0; si < NS; si++) {
			double x = med(k, t, si, m, THR);

			cellf(b, sizeof(b), "%.2f / %.2f",
			      x / med(k, t, si, PREAD, THR),
			      x / med(k, t, si, SENDFILE, THR));
			printf("%18s", b);
		}
		printf("\n");
	}
	cpu_rows(k, t, "sender ns/B (x pr)", SND);
	cpu_rows(k, t, "system ns/B (x pr)", SYS);
	printf("%-18s", "CPUs busy");
	for (si = 0; si < NS; si++)
		printf("%18s", szn[si]);
	printf("\n");
	for (m = 0; m < NM; m++) {
		printf("%-18s", meth[m]);
		for (si = 0; si < NS; si++) {
			double x = med(k, t, si, m, SYS) * med(k, t, si, m, THR) / 1e9;

			cellf(b, sizeof(b), "%.2f", x, 0);
			printf("%18s", b);
		}
		printf("\n");
	}
	printf("%-18s", "peak in flight KiB");
	for (si = 0; si < NS; si++)
		printf("%18s", szn[si]);
	printf("\n");
	for (m = 0; m < NM; m++) {
		printf("%-18s", meth[m]);
		for (si = 0; si < NS; si++) {
			double x = get(k, t, szv[si], meth[m], PEAK).max;

			cellf(b, sizeof(b), "%.0f", x / 1024, 0);
			printf("%18s", b);
		}
		printf("\n");
	}
}

static int npass, nmiss, nna;

/*
 * The serial one-copy bound of a "vs sendfile" throughput target: a sender
 * doing sendfile's work plus one copy of every byte, one after the other,
 * takes 1/S + 1/M per byte (S = sendfile's median throughput, M = the
 * kernel's memcpy from the same run), i.e. 1 / (1 + S/M) of sendfile's
 * throughput; more only where the copy overlaps other work (the other
 * CPU).  NAN when a figure is missing.
 */
static double copy_bound(const char *k, const char *t, int si)
{
	double s = med(k, t, si, SENDFILE, THR);
	double m = get(k, "-", 0, "memcpy", THR).med;

	return 1 / (1 + s / m);
}

/* One target: ratio of medians OP bound; cb: one-copy bound or NAN. */
static void target_cb(const char *k, const char *t, int si, const char *what,
		      double ratio, int ge, double bound, double cb)
{
	const char *v;

	if (isnan(ratio)) {
		v = "n/a";
		nna++;
	} else if (ge ? ratio >= bound : ratio <= bound) {
		v = "PASS";
		npass++;
	} else {
		v = "MISS";
		nmiss++;
	}
	printf("  %-20s %s @%s %s: ", k, what, szn[si], t);
	if (isnan(ratio))
		printf("n/a");
	else
		printf("%.2fx", ratio);
	printf(" (target %s %.2fx) %s", ge ? ">=" : "<=", bound, v);
	if (!isnan(cb))
		printf(" (one-copy bound %.2f)", cb);
	printf("\n");
}

static void target(const char *k, const char *t, int si, const char *what,
		   double ratio, int ge, double bound)
{
	target_cb(k, t, si, what, ratio, ge, bound, NAN);
}

static void targets(const char *k)
{
	int ti, si;
	struct stat lim = get(k, "-", 0, "mem_limit", PEAK);

	for (ti = 0; ti < 2; ti++) {
		const char *t = trans[ti];

		if (!has_transport(k, t))
			continue;
		for (si = 1; si < NS; si++)
			target(k, t, si, "stablesend-async vs pread+send throughput",
			       med(k, t, si, SS_ASYNC, THR) / med(k, t, si, PREAD, THR),
			       1, si == 3 ? 1.05 : 1.2);
		for (si = 1; si < NS; si++)
			target_cb(k, t, si, "stablesend-async vs sendfile throughput",
				  med(k, t, si, SS_ASYNC, THR) / med(k, t, si, SENDFILE, THR),
				  1, 0.8, copy_bound(k, t, si));
		for (si = 1; si < NS; si++)
			target(k, t, si, "stablesend-async vs pread+send sender CPU/B",
			       med(k, t, si, SS_ASYNC, SND) / med(k, t, si, PREAD, SND),
			       0, 0.8);
		target(k, t, 0, "stablesend-async (batched) vs pread+send throughput",
		       med(k, t, 0, SS_ASYNC, THR) / med(k, t, 0, PREAD, THR), 1, 1.0);
		for (si = 0; si < NS; si++)
			target(k, t, si, "stablesend-async vs io_uring-zc throughput",
			       med(k, t, si, SS_ASYNC, THR) / med(k, t, si, URING, THR),
			       1, 1.0);
		/* Issue 16: the ring's stable send against io_uring's best and the device. */
		for (si = 1; si < NS; si++)
			target(k, t, si, "stablesend-uring vs io_uring-zc throughput",
			       med(k, t, si, SS_URING, THR) / med(k, t, si, URING, THR),
			       1, 1.0);
		for (si = 1; si < NS; si++)
			target(k, t, si, "stablesend-uring vs stablesend-async throughput",
			       med(k, t, si, SS_URING, THR) / med(k, t, si, SS_ASYNC, THR),
			       1, 1.0);
		/* Issue 13: SEND goes out inline, no worker round trip. */
		target(k, t, 0, "stablesend-sync vs pread+send throughput",
		       med(k, t, 0, SS_SYNC, THR) / med(k, t, 0, PREAD, THR), 1, 1.0);
		for (si = 1; si < NS; si++)
			target_cb(k, t, si, "stablesend-sync vs sendfile throughput",
				  med(k, t, si, SS_SYNC, THR) / med(k, t, si, SENDFILE, THR),
				  1, 0.8, copy_bound(k, t, si));
	}
	{
		int cells = 0, over = 0;
		double worst = NAN;

		for (ti = 0; ti < NT; ti++) {
			const char *t = trans[ti];
			int m;

			if (!has_transport(k, t))
				continue;
			for (m = SS_SYNC; m <= SS_URING; m++)
				for (si = 0; si < NS; si++) {
					struct stat p = get(k, t, szv[si], meth[m], PEAK);

					if (isnan(p.max) || isnan(lim.max))
						continue;
					cells++;
					if (isnan(worst) || p.max > worst)
						worst = p.max;
					if (p.max > lim.max) {
						over++;
						printf("  %-20s %s peak in flight @%s %s: %.0f KiB (limit %.0f KiB) MISS\n",
						       k, meth[m], szn[si], t, p.max / 1024,
						       lim.max / 1024);
					}
				}
		}
		if (!cells) {
			nna++;
			printf("  %-20s stablesend peak in flight: n/a\n", k);
		} else {
			printf("  %-20s stablesend peak in flight <= limit in %d of %d cells: highest %.0f KiB (limit %.0f KiB) %s\n",
			       k, cells - over, cells, worst / 1024, lim.max / 1024,
			       over ? "MISS" : "PASS");
			if (over)
				nmiss++;
			else
				npass++;
		}
	}
}

static void plot(const char *dir, const char *k, int idx)
{
	char path[1024];
	FILE *f;
	int ti, si, m, nt = 0, col, first;

	snprintf(path, sizeof(path), "%s/plot-%s.dat", dir, k);
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		return;
	}
	fprintf(f, "# size_bytes, then MB/s per method, then sender ns/B per method (%s)\n", k);
	for (ti = 0; ti < NT; ti++) {
		if (!has_transport(k, trans[ti]))
			continue;
		fprintf(f, "# %s\n", trans[ti]);
		for (si = 0; si < NS; si++) {
			fprintf(f, "%llu", szv[si]);
			for (m = 0; m < NM; m++) {
				double x = med(k, trans[ti], si, m, THR);

				fprintf(f, isnan(x) ? " ?" : " %.3f", x / 1e6);
			}
			for (m = 0; m < NM; m++) {
				double x = med(k, trans[ti], si, m, SND);

				fprintf(f, isnan(x) ? " ?" : " %.4f", x);
			}
			fprintf(f, "\n");
		}
		fprintf(f, "\n\n");
		nt++;
	}
	fclose(f);

	snprintf(path, sizeof(path), "%s/plot-%s.gp", dir, k);
	f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "set terminal png size %d,1000 font ',9' noenhanced\n", nt > 1 ? 560 * nt : 760);
	fprintf(f, "set output '%s/bench-%s.png'\n", dir, k);
	fprintf(f, "set datafile missing '?'\nset logscale x 2\nset grid\n");
	fprintf(f, "set xtics ('4K' 4096, '64K' 65536, '1M' 1048576, '8M' 8388608)\n");
	fprintf(f, "set key below horizontal maxcols 4 font ',8' samplen 2\nset xrange [3000:12000000]\n");
	fprintf(f, "set multiplot layout 2,%d title '%s: median of runs (QEMU TCG: compare ratios, not absolute speeds)'\n",
		nt ? nt : 1, k);
	for (col = 0; col < 2; col++) {
		int b = 0;

		for (ti = 0; ti < NT; ti++) {
			if (!has_transport(k, trans[ti]))
				continue;
			fprintf(f, "set title '%s: %s'\n", trans[ti],
				col ? "sender CPU ns per byte (log)" : "throughput MB/s");
			fprintf(f, "set ylabel '%s'\n", col ? "ns/B" : "MB/s");
			fprintf(f, col ? "set logscale y\nset yrange [*:*]\n"
				       : "unset logscale y\nset yrange [0:*]\n");
			fprintf(f, "plot ");
			for (m = 0, first = 1; m < NM; m++) {
				int any = 0;

				for (si = 0; si < NS; si++)
					any |= !isnan(med(k, trans[ti], si, m, THR));
				if (!any)	/* n/a on this transport */
					continue;
				fprintf(f, "%s'%s/plot-%s.dat' index %d using 1:%d with linespoints lt %d lw 2 title '%s'",
					first ? "" : ", ", dir, k, b, 2 + m + col * NM, m + 1,
					meth[m]);
				first = 0;
			}
			fprintf(f, "\n");
			b++;
		}
	}
	fprintf(f, "unset multiplot\n");
	fclose(f);
	(void)idx;
}

static void write_summary(const char *path, char (*kernels)[96], int nk)
{
	FILE *f = fopen(path, "w");
	int i, ti, si, m;

	if (!f) {
		perror(path);
		return;
	}
	fprintf(f, "kernel,transport,size,method,runs,throughput_Bps_median,throughput_Bps_min,sys_cpu_ns_per_byte_median,sys_cpu_ns_per_byte_min,sender_cpu_ns_per_byte_median,sender_cpu_ns_per_byte_min,peak_inflight_bytes_max\n");
	for (i = 0; i < nk; i++)
		for (ti = 0; ti < NT; ti++)
			for (si = 0; si < NS; si++)
				for (m = 0; m < NM; m++) {
					const char *k = kernels[i], *t = trans[ti];
					struct stat th = get(k, t, szv[si], meth[m], THR);
					struct stat sy = get(k, t, szv[si], meth[m], SYS);
					struct stat sn = get(k, t, szv[si], meth[m], SND);
					struct stat pk = get(k, t, szv[si], meth[m], PEAK);

					if (!th.n)
						continue;
					fprintf(f, "%s,%s,%llu,%s,%d,%.0f,%.0f,%.4f,%.4f,%.4f,%.4f,",
						k, t, szv[si], meth[m], th.n, th.med, th.min,
						sy.med, sy.min, sn.med, sn.min);
					if (pk.n)
						fprintf(f, "%.0f", pk.max);
					fprintf(f, "\n");
				}
	fclose(f);
}

int report(int argc, char **argv)
{
	const char *plotdir = NULL, *summary = NULL;
	char kernels[8][96];
	int nk = 0, i, j, ti;

	for (i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--plot") && i + 1 < argc)
			plotdir = argv[++i];
		else if (!strcmp(argv[i], "--summary") && i + 1 < argc)
			summary = argv[++i];
		else
			load(argv[i]);
	}
	for (i = 0; i < nrec; i++) {
		for (j = 0; j < nk; j++)
			if (!strcmp(kernels[j], recs[i].kernel))
				break;
		if (j == nk && nk < 8)
			snprintf(kernels[nk++], sizeof(kernels[0]), "%s", recs[i].kernel);
	}
	if (!nk) {
		fprintf(stderr, "report: no data\n");
		return 1;
	}
	printf("Figures under QEMU TCG are software-emulated: compare ratios within one\n"
	       "kernel's run, not absolute speeds.  x pread = ratio to pread+send,\n"
	       "x sendf = ratio to sendfile, x pr = ratio to pread+send's CPU per byte.\n");
	for (i = 0; i < nk; i++) {
		struct stat mc = get(kernels[i], "-", 0, "memcpy", THR);
		struct stat lim = get(kernels[i], "-", 0, "mem_limit", PEAK);

		printf("\n===== kernel %s: memcpy %.1f MB/s (one-copy ceiling), stablesend limit %.0f KiB\n",
		       kernels[i], mc.med / 1e6, lim.max / 1024);
		for (ti = 0; ti < NT; ti++)
			if (has_transport(kernels[i], trans[ti]))
				table(kernels[i], trans[ti]);
		if (plotdir)
			plot(plotdir, kernels[i], i);
	}
	if (summary)
		write_summary(summary, kernels, nk);
	printf("\n===== key ratios: stablesend-async / peer (throughput; CPU: sender ns/B), medians\n");
	printf("%-21s %-9s %-23s %-23s %-23s %-23s\n", "kernel", "transport",
	       "x pread+send 4K/64K/1M/8M", "x sendfile", "x io_uring-zc",
	       "CPU x pread+send");
	for (i = 0; i < nk; i++)
		for (ti = 0; ti < NT; ti++) {
			const char *k = kernels[i], *t = trans[ti];
			int si, w, peer;

			if (!has_transport(k, t))
				continue;
			printf("%-21s %-9s", k, t);
			for (w = 0; w < 4; w++) {
				char buf[64] = "";
				size_t o = 0;

				peer = w == 0 || w == 3 ? PREAD : w == 1 ? SENDFILE : URING;
				for (si = 0; si < NS; si++) {
					int what = w == 3 ? SND : THR;
					double r = med(k, t, si, SS_ASYNC, what) /
						   med(k, t, si, peer, what);

					o += snprintf(buf + o, sizeof(buf) - o, isnan(r) ? "%s-" : "%s%.2f",
						      si ? "/" : "", r);
				}
				printf(" %-23s", buf);
			}
			printf("\n");
		}
	printf("\n===== targets (issues 4 and 13; ratios of medians within one run)\n");
	printf("one-copy bound (x sendfile targets) = 1 / (1 + S/M), S = sendfile's median\n"
	       "MB/s in that cell, M = that kernel's memcpy: a sender that copies every byte\n"
	       "once and does sendfile's work, nothing overlapped, takes 1/S + 1/M per byte.\n"
	       "Under the bound: cost beyond the copy (room left); at it: the copy's cost;\n"
	       "above it: the copy overlapped other work (other CPU, receiver).  The verdict\n"
	       "compares with the target alone.\n");
	for (i = 0; i < nk; i++)
		targets(kernels[i]);
	printf("\ntargets: %d PASS, %d MISS, %d n/a\n", npass, nmiss, nna);
	for (i = 0; i < nk; i++) {
		/* sanity of the peers, as the acceptance asks */
		for (ti = 0; ti < NT; ti++) {
			int si;

			if (!has_transport(kernels[i], trans[ti]))
				continue;
			for (si = 1; si < NS; si++) {
				double r = med(kernels[i], trans[ti], si, SENDFILE, THR) /
					   med(kernels[i], trans[ti], si, PREAD, THR);

				if (!isnan(r) && r < 1.0)
					printf("note: %s %s @%s: sendfile is %.2fx pread+send (expected > 1)\n",
					       kernels[i], trans[ti], szn[si], r);
			}
		}
	}
	return 0;
}
