// SPDX-License-Identifier: GPL-2.0
/*
 * bench --report: medians, ratios and the targets of issues 4, 13, 16 and
 * 19 from the CSV that the guest runs (and the host's calibration run)
 * printed; gnuplot data and script for the charts.
 *
 * A "run" below is one kernel in one view: "KERNEL, N CPU(s)".  The
 * 2-CPU view is the methods as their users run them; the 1-CPU view puts
 * every thread and all kernel work on one CPU, so a method's throughput
 * there is its efficiency, with no help from parallelism.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NM 9
static const char *const meth[NM] = {
	"pread+send", "sendfile", "splice", "pread+zerocopy", "io_uring",
	"samba-path", "stablesend-sync", "stablesend-async", "stablesend-uring",
};
enum { PREAD, SENDFILE, SPLICE, ZC, URING, SAMBA, SS_SYNC, SS_ASYNC, SS_URING };
/* The stable peers: their bytes are the file's at the call. */
static const int stable_peers[] = { PREAD, ZC, URING, SAMBA };
#define NT 3
static const char *const trans[NT] = { "tcp-lo", "tcp-veth", "unix" };
#define NS 4
static const unsigned long long szv[NS] = { 4096, 65536, 1048576, 8388608 };
static const char *const szn[NS] = { "4KiB", "64KiB", "1MiB", "8MiB" };

struct rec {
	char run[128];		/* "KERNEL, N CPU(s)" */
	char kernel[96], transport[16], method[24], variant[40];
	int cpus, host, depth, runno;
	unsigned long long size;
	double thr, sent, sys, snd, peak, checked;	/* NAN when empty */
};

static struct rec *recs;
static int nrec, cap;

static double fld(const char *s)
{
	return *s ? strtod(s, NULL) : NAN;
}

#define NF 14

static void load(const char *path)
{
	char line[1024];
	FILE *f = fopen(path, "r");

	if (!f) {
		perror(path);
		exit(1);
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *v[NF];
		struct rec *r;
		int n = 0;

		if (!strncmp(line, "@csv ", 5))
			p += 5;
		if (!strncmp(p, "kernel,", 7))
			continue;
		p[strcspn(p, "\r\n")] = 0;
		while (n < NF) {
			v[n++] = p;
			p = strchr(p, ',');
			if (!p)
				break;
			*p++ = 0;
		}
		if (n != NF)
			continue;
		if (nrec == cap) {
			cap = cap ? 2 * cap : 256;
			recs = realloc(recs, cap * sizeof(*recs));
			if (!recs)
				exit(1);
		}
		r = &recs[nrec++];
		snprintf(r->kernel, sizeof(r->kernel), "%s", v[0]);
		r->cpus = atoi(v[1]);
		r->host = !strncmp(v[0], "host:", 5);
		snprintf(r->run, sizeof(r->run), "%s, %d CPU%s", v[0], r->cpus,
			 r->cpus == 1 ? "" : "s");
		snprintf(r->transport, sizeof(r->transport), "%s", v[2]);
		r->size = strtoull(v[3], NULL, 10);
		snprintf(r->method, sizeof(r->method), "%s", v[4]);
		snprintf(r->variant, sizeof(r->variant), "%s", v[5]);
		r->depth = atoi(v[6]);
		r->runno = atoi(v[7]);
		r->thr = fld(v[8]);
		r->sent = fld(v[9]);
		r->sys = fld(v[10]);
		r->snd = fld(v[11]);
		r->peak = fld(v[12]);
		r->checked = fld(v[13]);
	}
	fclose(f);
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

enum { THR, SENT, SYS, SND, PEAK };

struct stat {
	int n;
	double med, min, max;
};

/* Is @r of method @m in run @k, transport @t and (unless 0) size @size? */
static int rec_in(const struct rec *r, const char *k, const char *t,
		  unsigned long long size, const char *m)
{
	return !strcmp(r->run, k) && !strcmp(r->transport, t) &&
	       !strcmp(r->method, m) && (!size || r->size == size);
}

/* @r's figure @what (THR, SENT, SYS, SND or PEAK). */
static double rec_fig(const struct rec *r, int what)
{
	return what == THR ? r->thr : what == SENT ? r->sent :
	       what == SYS ? r->sys : what == SND ? r->snd : r->peak;
}

static const struct rec *first_rec(const char *k, const char *t,
				   unsigned long long size, const char *m)
{
	int i;

	for (i = 0; i < nrec; i++)
		if (rec_in(&recs[i], k, t, size, m))
			return &recs[i];
	return NULL;
}

static struct stat get(const char *k, const char *t, unsigned long long size,
		       const char *m, int what)
{
	double v[64];
	struct stat s = { 0, NAN, NAN, NAN };
	int i;

	for (i = 0; i < nrec && s.n < 64; i++) {
		const struct rec *r = &recs[i];
		double x;

		if (!rec_in(r, k, t, size, m))
			continue;
		x = rec_fig(r, what);
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

/* The variants a method ran in a cell, "a" or "a|b" when runs differed. */
static void variants(const char *k, const char *t, int si, int m, char *buf,
		     size_t n)
{
	int i;

	buf[0] = 0;
	for (i = 0; i < nrec; i++) {
		const struct rec *r = &recs[i];

		if (!rec_in(r, k, t, szv[si], meth[m]) ||
		    !r->variant[0] || strstr(buf, r->variant))
			continue;
		snprintf(buf + strlen(buf), n - strlen(buf), "%s%s",
			 buf[0] ? "|" : "", r->variant);
	}
}

/* The best stable peer of a cell by median throughput: its index, or -1. */
static int best_stable(const char *k, const char *t, int si)
{
	int i, best = -1;
	double bt = 0;

	for (i = 0; i < (int)(sizeof(stable_peers) / sizeof(stable_peers[0])); i++) {
		double x = med(k, t, si, stable_peers[i], THR);

		if (!isnan(x) && x > bt) {
			bt = x;
			best = stable_peers[i];
		}
	}
	return best;
}

static int has_transport(const char *k, const char *t)
{
	int i;

	for (i = 0; i < nrec; i++)
		if (!strcmp(recs[i].run, k) && !strcmp(recs[i].transport, t))
			return 1;
	return 0;
}

static int has_method(const char *k, const char *t, int m)
{
	int si;

	for (si = 0; si < NS; si++)
		if (!isnan(med(k, t, si, m, THR)))
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
	if (isnan(a) || isnan(b))
		snprintf(buf, n, "n/a");
	else
		snprintf(buf, n, fmt, a, b);
}

static void header(const char *title)
{
	int si;

	printf("%-20s", title);
	for (si = 0; si < NS; si++)
		printf("%19s", szn[si]);
	printf("\n");
}

/* CPU per byte by method and size, with its ratio to sendfile's. */
static void cpu_rows(const char *k, const char *t, const char *title, int what)
{
	char b[64];
	int m, si;

	header(title);
	for (m = 0; m < NM; m++) {
		if (!has_method(k, t, m))
			continue;
		printf("%-20s", meth[m]);
		for (si = 0; si < NS; si++) {
			double x = med(k, t, si, m, what);

			cellf(b, sizeof(b), "%.3f (%.2f)", x,
			      x / med(k, t, si, SENDFILE, what));
			printf("%19s", b);
		}
		printf("\n");
	}
}

static void table(const char *k, const char *t)
{
	char b[128];
	int m, si;

	printf("\n--- %s  %s  (median of %d run(s))\n", k, t, runs_of(k, t));
	header("MB/s median (min)");
	for (m = 0; m < NM; m++) {
		if (!has_method(k, t, m))
			continue;
		printf("%-20s", meth[m]);
		for (si = 0; si < NS; si++) {
			struct stat s = get(k, t, szv[si], meth[m], THR);

			cellf(b, sizeof(b), "%.1f (%.1f)", s.med / 1e6, s.min / 1e6);
			printf("%19s", b);
		}
		printf("\n");
		if (isnan(med(k, t, 1, m, SENT)) && isnan(med(k, t, 0, m, SENT)))
			continue;
		printf("%-20s", "  ... at SENT");
		for (si = 0; si < NS; si++) {
			cellf(b, sizeof(b), "%.1f", med(k, t, si, m, SENT) / 1e6, 0);
			printf("%19s", b);
		}
		printf("\n");
	}
	header("x sendf / x stable");
	for (m = 0; m < NM; m++) {
		if (!has_method(k, t, m))
			continue;
		printf("%-20s", meth[m]);
		for (si = 0; si < NS; si++) {
			double x = med(k, t, si, m, THR);
			int bs = best_stable(k, t, si);

			cellf(b, sizeof(b), "%.2f / %.2f",
			      x / med(k, t, si, SENDFILE, THR),
			      bs < 0 ? NAN : x / med(k, t, si, bs, THR));
			printf("%19s", b);
		}
		printf("\n");
	}
	printf("%-20s", "best stable peer");
	for (si = 0; si < NS; si++) {
		int bs = best_stable(k, t, si);

		printf("%19s", bs < 0 ? "n/a" : meth[bs]);
	}
	printf("\n");
	cpu_rows(k, t, "sender ns/B (x sf)", SND);
	cpu_rows(k, t, "system ns/B (x sf)", SYS);
	header("CPUs busy");
	for (m = 0; m < NM; m++) {
		if (!has_method(k, t, m))
			continue;
		printf("%-20s", meth[m]);
		for (si = 0; si < NS; si++) {
			double x = med(k, t, si, m, SYS) * med(k, t, si, m, THR) / 1e9;

			cellf(b, sizeof(b), "%.2f", x, 0);
			printf("%19s", b);
		}
		printf("\n");
	}
	header("peak in flight KiB");
	for (m = 0; m < NM; m++) {
		if (!has_method(k, t, m))
			continue;
		printf("%-20s", meth[m]);
		for (si = 0; si < NS; si++) {
			double x = get(k, t, szv[si], meth[m], PEAK).max;

			cellf(b, sizeof(b), "%.0f", x / 1024, 0);
			printf("%19s", b);
		}
		printf("\n");
	}
	for (m = 0; m < NM; m++) {
		int any = 0;

		for (si = 0; si < NS; si++) {
			variants(k, t, si, m, b, sizeof(b));
			if (!b[0])
				continue;
			if (!any++)
				printf("variant %-16s", meth[m]);
			printf(" %s: %s;", szn[si], b);
		}
		if (any)
			printf("\n");
	}
}

static int npass, nmiss, nna, nall_pass, nall_miss;

/*
 * A method's figure in run @runno of a cell (NAN if none).  In each run
 * the bench measures every method of a cell back to back (bench.c's main
 * loop), so figures of one run number saw the same state of the emulator
 * as nearly as the bench can arrange.
 */
static double run_fig(const char *k, const char *t, int si, int m, int what,
		      int runno)
{
	int i;

	for (i = 0; i < nrec; i++)
		if (recs[i].runno == runno && rec_in(&recs[i], k, t, szv[si], meth[m]))
			return rec_fig(&recs[i], what);
	return NAN;
}

/*
 * The serial one-copy bound of a "vs sendfile" throughput target: a sender
 * doing sendfile's work plus one copy of every byte at the module's copy
 * speed (or the kernel's, read(2) of a cached file, without the module),
 * one after the other, takes 1/S + 1/M
 * per byte (S = sendfile's median throughput, M = that copy speed), i.e.
 * 1 / (1 + S/M) of sendfile's throughput; more only where the copy
 * overlaps other work (the other CPU).  NAN when a figure is missing.
 */
static double copy_bound(const char *k, const char *t, int si)
{
	double s = med(k, t, si, SENDFILE, THR);
	double m = get(k, "-", 0, "module-copy", THR).med;

	if (isnan(m))
		m = get(k, "-", 0, "kernel-copy", THR).med;

	return 1 / (1 + s / m);
}

/*
 * One target: method @a's figure @f (THR or SND) over @b's, ratio of
 * medians OP bound; cb: one-copy bound or NAN.  Beside it, the ratio in
 * each run (the two methods' figures of the same run number) and how many
 * of those meet the target: a verdict that not every run shares is within
 * the run-to-run noise.
 */
static void target_cb(const char *k, const char *t, int si, const char *what,
		      int a, int b, int f, int ge, double bound, double cb)
{
	double ratio = b < 0 ? NAN : med(k, t, si, a, f) / med(k, t, si, b, f);
	double lo = INFINITY, hi = -INFINITY;
	int i, nruns = 0, nmet = 0;
	const char *v;

	/* Each run of @a's in the cell, against @b's of the same run number. */
	for (i = 0; b >= 0 && i < nrec; i++) {
		const struct rec *r = &recs[i];
		double x;

		if (!rec_in(r, k, t, szv[si], meth[a]))
			continue;
		x = rec_fig(r, f) / run_fig(k, t, si, b, f, r->runno);
		if (isnan(x))
			continue;
		nruns++;
		nmet += ge ? x >= bound : x <= bound;
		lo = fmin(lo, x);
		hi = fmax(hi, x);
	}
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
	printf("  %-34s %s @%s %s: ", k, what, szn[si], t);
	if (isnan(ratio))
		printf("n/a");
	else
		printf("%.2fx", ratio);
	printf(" (target %s %.2fx) %s", ge ? ">=" : "<=", bound, v);
	if (nruns) {
		printf(" (runs %.2f-%.2f, %d of %d met)", lo, hi, nmet, nruns);
		nall_pass += nmet == nruns;
		nall_miss += !nmet;
	}
	if (!isnan(cb))
		printf(" (one-copy bound %.2f)", cb);
	printf("\n");
}

static void target(const char *k, const char *t, int si, const char *what,
		   int a, int b, int f, int ge, double bound)
{
	target_cb(k, t, si, what, a, b, f, ge, bound, NAN);
}

static void targets(const char *k, int cpus)
{
	char what[160];
	int ti, si;

	for (ti = 0; ti < 2; ti++) {
		const char *t = trans[ti];

		if (!has_transport(k, t))
			continue;
		if (cpus == 1) {
			/* Issue 19: efficiency, with no second CPU to help. */
			for (si = 1; si < NS; si++)
				target_cb(k, t, si, "stablesend-async vs sendfile throughput",
					  SS_ASYNC, SENDFILE, THR, 1, 0.8,
					  copy_bound(k, t, si));
			continue;
		}
		/* Issue 19: against the best stable peer of each cell. */
		for (si = 1; si < NS; si++) {
			int bs = best_stable(k, t, si);

			snprintf(what, sizeof(what), "stablesend-async vs best stable (%s) throughput",
				 bs < 0 ? "none" : meth[bs]);
			target(k, t, si, what, SS_ASYNC, bs, THR, 1, 1.3);
			snprintf(what, sizeof(what), "stablesend-async vs best stable (%s) sender CPU/B",
				 bs < 0 ? "none" : meth[bs]);
			target(k, t, si, what, SS_ASYNC, bs, SND, 0, 0.7);
		}
		/* Issue 16: the ring's stable send against io_uring's best and the device. */
		for (si = 1; si < NS; si++)
			target(k, t, si, "stablesend-uring vs io_uring throughput",
			       SS_URING, URING, THR, 1, 1.0);
		for (si = 1; si < NS; si++)
			target(k, t, si, "stablesend-uring vs stablesend-async throughput",
			       SS_URING, SS_ASYNC, THR, 1, 1.0);
		/* Issue 13: SEND goes out inline, no worker round trip. */
		target(k, t, 0, "stablesend-sync vs pread+send throughput",
		       SS_SYNC, PREAD, THR, 1, 1.0);
		for (si = 1; si < NS; si++)
			target_cb(k, t, si, "stablesend-sync vs sendfile throughput",
				  SS_SYNC, SENDFILE, THR, 1, 0.8,
				  copy_bound(k, t, si));
	}
}

/* CPUs a method kept busy in a cell (system ns/B x throughput). */
static double busy(const char *k, const char *t, int si, int m)
{
	return med(k, t, si, m, SYS) * med(k, t, si, m, THR) / 1e9;
}

/*
 * The emulator's distortion of each peer: its throughput relative to
 * sendfile in the guest (2 CPUs, TCP loopback) over the same ratio on the
 * host's real CPU.  1.00: TCG treats it as it treats sendfile; below 1:
 * TCG makes it look slower than it is, next to sendfile.  The host runs
 * another kernel on the same kind of file system (tmpfs), so the figure
 * holds the kernel difference too.  "(idle)": on the host the peer or
 * sendfile kept less than 0.9 CPUs busy (waiting on timers, not working):
 * no figure.
 */
static void distortion(char (*runs)[128], int nr)
{
	const char *host = NULL;
	int i, m, si;

	for (i = 0; i < nr; i++)
		if (!strncmp(runs[i], "host:", 5))
			host = runs[i];
	if (!host)
		return;
	printf("\n===== emulator distortion: (peer / sendfile in the guest) / (the same on the host's CPU, %s), tcp-lo\n",
	       host);
	printf("%-34s %-16s", "guest", "peer");
	for (si = 0; si < NS; si++)
		printf("%10s", szn[si]);
	printf("\n");
	for (i = 0; i < nr; i++) {
		const char *k = runs[i];

		if (k == host || strstr(k, " 1 CPU"))
			continue;
		for (m = 0; m < NM; m++) {
			if (m == SENDFILE || m >= SS_SYNC || !has_method(host, "tcp-lo", m))
				continue;
			printf("%-34s %-16s", k, meth[m]);
			for (si = 0; si < NS; si++) {
				double g = med(k, "tcp-lo", si, m, THR) /
					   med(k, "tcp-lo", si, SENDFILE, THR);
				double h = med(host, "tcp-lo", si, m, THR) /
					   med(host, "tcp-lo", si, SENDFILE, THR);

				if (isnan(g) || isnan(h))
					printf("%10s", "n/a");
				else if (busy(host, "tcp-lo", si, m) < 0.9 ||
					 busy(host, "tcp-lo", si, SENDFILE) < 0.9)
					printf("%10s", "(idle)");
				else
					printf("%10.2f", g / h);
			}
			printf("\n");
		}
	}
}

static void plot(const char *dir, const char *k, int idx)
{
	static const char *const color[NM] = {
		"#9400d3", "#009e73", "#56b4e9", "#e69f00", "#f0e442",
		"#0072b2", "#e51e10", "#000000", "#808080",
	};
	char path[1024], base[128];
	FILE *f;
	int ti, si, m, nt = 0, col, first;
	size_t j;

	/* "KERNEL, N CPUs" -> "KERNEL-Ncpu" */
	snprintf(base, sizeof(base), "%.120s", k);
	for (j = 0; base[j]; j++)
		if (base[j] == ',' || base[j] == ' ' || base[j] == ':')
			base[j] = '-';
	snprintf(path, sizeof(path), "%s/plot-%s.dat", dir, base);
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

	snprintf(path, sizeof(path), "%s/plot-%s.gp", dir, base);
	f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "set terminal png size %d,1000 font ',9' noenhanced\n", nt > 1 ? 560 * nt : 760);
	fprintf(f, "set output '%s/bench-%s.png'\n", dir, base);
	fprintf(f, "set datafile missing '?'\nset logscale x 2\nset grid\n");
	fprintf(f, "set xtics ('4K' 4096, '64K' 65536, '1M' 1048576, '8M' 8388608)\n");
	fprintf(f, "set key below horizontal maxcols 5 font ',8' samplen 2\nset xrange [3000:12000000]\n");
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
				if (!has_method(k, trans[ti], m))
					continue;
				fprintf(f, "%s'%s/plot-%s.dat' index %d using 1:%d with linespoints pt %d lc rgb '%s' lw 2 title '%s'",
					first ? "" : ", ", dir, base, b, 2 + m + col * NM, m + 1,
					color[m], meth[m]);
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

static void write_summary(const char *path, char (*runs)[128], int nr)
{
	FILE *f = fopen(path, "w");
	int i, ti, si, m;

	if (!f) {
		perror(path);
		return;
	}
	fprintf(f, "kernel,cpus,transport,size,method,variant,depth,runs,throughput_Bps_median,throughput_Bps_min,sent_throughput_Bps_median,sys_cpu_ns_per_byte_median,sys_cpu_ns_per_byte_min,sender_cpu_ns_per_byte_median,sender_cpu_ns_per_byte_min,peak_inflight_bytes_max\n");
	for (i = 0; i < nr; i++)
		for (ti = 0; ti < NT; ti++)
			for (si = 0; si < NS; si++)
				for (m = 0; m < NM; m++) {
					const char *k = runs[i], *t = trans[ti];
					struct stat th = get(k, t, szv[si], meth[m], THR);
					struct stat se = get(k, t, szv[si], meth[m], SENT);
					struct stat sy = get(k, t, szv[si], meth[m], SYS);
					struct stat sn = get(k, t, szv[si], meth[m], SND);
					struct stat pk = get(k, t, szv[si], meth[m], PEAK);
					const struct rec *r = first_rec(k, t, szv[si], meth[m]);
					char v[128];

					if (!th.n || !r)
						continue;
					variants(k, t, si, m, v, sizeof(v));
					fprintf(f, "%s,%d,%s,%llu,%s,%s,%d,%d,%.0f,%.0f,",
						r->kernel, r->cpus, t, szv[si], meth[m], v,
						r->depth, th.n, th.med, th.min);
					if (se.n)
						fprintf(f, "%.0f", se.med);
					fprintf(f, ",%.4f,%.4f,%.4f,%.4f,", sy.med, sy.min,
						sn.med, sn.min);
					if (pk.n)
						fprintf(f, "%.0f", pk.max);
					fprintf(f, "\n");
				}
	fclose(f);
}

/* A key-ratio column: method over peer (BEST_STABLE: the cell's), figure. */
#define BEST_STABLE	(-1)
static const char *const async_head[4] = {
	"x sendfile", "x splice", "x best stable", "CPU x best stable",
};
static const int async_cols[4][3] = {
	{ SS_ASYNC, SENDFILE, THR }, { SS_ASYNC, SPLICE, THR },
	{ SS_ASYNC, BEST_STABLE, THR }, { SS_ASYNC, BEST_STABLE, SND },
};
static const char *const other_head[4] = {
	"sync x sendfile", "sync x pread+send", "uring x io_uring", "uring x async",
};
static const int other_cols[4][3] = {
	{ SS_SYNC, SENDFILE, THR }, { SS_SYNC, PREAD, THR },
	{ SS_URING, URING, THR }, { SS_URING, SS_ASYNC, THR },
};

/*
 * One table of key ratios: per run and transport (where the first
 * column's method ran), four columns of medians' ratios, 4K/64K/1M/8M.
 */
static void key_ratios(char (*runs)[128], int nr, const char *title,
		       const char *const head[4], const int col[4][3])
{
	int i, ti, si, w;

	printf("\n===== key ratios: %s, medians, 4K/64K/1M/8M\n", title);
	printf("%-34s %-9s %-23s %-23s %-23s %-23s\n", "run", "transport",
	       head[0], head[1], head[2], head[3]);
	for (i = 0; i < nr; i++)
		for (ti = 0; ti < NT; ti++) {
			const char *k = runs[i], *t = trans[ti];

			if (!has_transport(k, t) || !has_method(k, t, col[0][0]))
				continue;
			printf("%-34s %-9s", k, t);
			for (w = 0; w < 4; w++) {
				char buf[64] = "";
				size_t o = 0;

				for (si = 0; si < NS; si++) {
					int m = col[w][0], what = col[w][2];
					int peer = col[w][1] == BEST_STABLE ?
						   best_stable(k, t, si) : col[w][1];
					double r = peer < 0 ? NAN :
						   med(k, t, si, m, what) /
						   med(k, t, si, peer, what);

					o += snprintf(buf + o, sizeof(buf) - o, isnan(r) ? "%s-" : "%s%.2f",
						      si ? "/" : "", r);
				}
				printf(" %-23s", buf);
			}
			printf("\n");
		}
}

int report(int argc, char **argv)
{
	const char *plotdir = NULL, *summary = NULL;
	char runs[16][128];
	int nr = 0, i, j, ti;

	for (i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--plot") && i + 1 < argc)
			plotdir = argv[++i];
		else if (!strcmp(argv[i], "--summary") && i + 1 < argc)
			summary = argv[++i];
		else
			load(argv[i]);
	}
	for (i = 0; i < nrec; i++) {
		for (j = 0; j < nr; j++)
			if (!strcmp(runs[j], recs[i].run))
				break;
		if (j == nr && nr < 16)
			snprintf(runs[nr++], sizeof(runs[0]), "%s", recs[i].run);
	}
	if (!nr) {
		fprintf(stderr, "report: no data\n");
		return 1;
	}
	printf("Figures under QEMU TCG are software-emulated: compare ratios within one\n"
	       "run, not absolute speeds.  x sendf = ratio to sendfile, x stable = ratio to\n"
	       "the best stable peer of the cell (pread+send, pread+zerocopy, io_uring,\n"
	       "samba-path), x sf = ratio to sendfile's CPU per byte.  \"at SENT\": stablesend's\n"
	       "throughput had the cell ended at the last SENT completion instead of when\n"
	       "its memory was back.  The receiver checked what it got in every cell (see\n"
	       "tests/bench/README.md).\n");
	for (i = 0; i < nr; i++) {
		const char *k = runs[i];
		struct stat kc = get(k, "-", 0, "kernel-copy", THR);
		struct stat sc = get(k, "-", 0, "module-copy", THR);
		struct stat mc = get(k, "-", 0, "memcpy", THR);
		struct stat lim = get(k, "-", 0, "mem_limit", PEAK);
		struct stat leak = get(k, "-", 0, "soak-leak", SYS);
		const struct rec *r = first_rec(k, "tcp-lo", 0, "stablesend-async");

		printf("\n===== %s: copy speeds: module %.1f MB/s, kernel read() %.1f MB/s, user memcpy %.1f MB/s",
		       k, sc.med / 1e6, kc.med / 1e6, mc.med / 1e6);
		if (!isnan(lim.max))
			printf(", stablesend default limit %.0f KiB", lim.max / 1024);
		if (r)
			printf(", depth %d", r->depth);
		if (!isnan(leak.med))
			printf("; CPU time reads up to %.2f%% low", 100 * leak.med);
		printf("\n");
		for (ti = 0; ti < NT; ti++)
			if (has_transport(k, trans[ti]))
				table(k, trans[ti]);
		if (plotdir)
			plot(plotdir, k, i);
	}
	if (summary)
		write_summary(summary, runs, nr);
	distortion(runs, nr);
	key_ratios(runs, nr, "stablesend-async / peer (throughput; CPU: sender ns/B)",
		   async_head, async_cols);
	key_ratios(runs, nr, "stablesend-sync and stablesend-uring (throughput)",
		   other_head, other_cols);
	printf("\n===== targets (issues 13, 16, 19; ratios of medians within one run)\n");
	printf("one-copy bound (x sendfile targets) = 1 / (1 + S/M), S = sendfile's median\n"
	       "MB/s in that cell, M = that run's module copy speed: a sender that copies\n"
	       "every byte once and does sendfile's work, nothing overlapped, takes 1/S + 1/M\n"
	       "per byte.  The verdict compares with the target alone.  \"runs\": the\n"
	       "ratio within each run (both methods' figures of the same run number),\n"
	       "and in how many runs it met the target.\n");
	for (i = 0; i < nr; i++)
		if (strncmp(runs[i], "host:", 5))
			targets(runs[i], strstr(runs[i], " 1 CPU") ? 1 : 2);
	printf("\ntargets by run: %d met in every run, %d in none, %d in some\n",
	       nall_pass, nall_miss, npass + nmiss - nall_pass - nall_miss);
	printf("\ntargets: %d PASS, %d MISS, %d n/a\n", npass, nmiss, nna);
	return 0;
}
