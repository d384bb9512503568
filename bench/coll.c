/* bench/coll: what the emulator costs in wall time (virtual time is pemu coll's business).
 *
 *   1. The 8-device all-reduce of 64 MiB against a plain serial sum of the same 8 buffers,
 *      measured alternately in the same run (issue 10's target: at most 2x).
 *   2. The wall cost of one tiny (1-element) all-reduce among 8 and among 64 devices
 *      (issue 10's targets: at most 5 us and 50 us).
 * Each with the devices as contexts on a thread a core (the default) and as an OS thread
 * each (--host-threads per-gpu, as pemu ran before), side by side.
 *
 * Writes DIR/coll.csv and prints a summary. Measures; never fails on speed.
 * usage: bench/coll [DIR]   (default build/bench/out) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cluster.h"
#include "coll.h"
#include "mem.h"
#include "util.h"

#define BIG_ELEMS (16u << 20) /* 64 MiB of float */
#define BIG_DEVS  8
#define ROUNDS    7

struct big {
	int iters;
	int64_t wall_ns[ROUNDS]; /* per call, device 0 */
};

static int big_device(struct emu_dev *d, void *arg)
{
	struct big *b = arg;
	struct mem_block *s = mem_alloc(d, MEM_COMM, BIG_ELEMS * 4ULL, "send");
	struct mem_block *r = mem_alloc(d, MEM_COMM, BIG_ELEMS * 4ULL, "recv");
	float *x;
	int rc;

	if (!s || !r)
		return EMU_EOOM;
	x = s->data;
	for (size_t i = 0; i < BIG_ELEMS; i++)
		x[i] = (float)(i % 7) + (float)emu_dev_id(d);
	/* One warm-up call: the first touch of the receive pages is not the emulator's cost. */
	if ((rc = coll_all_reduce(d, emu_world(d), x, r->data, BIG_ELEMS, COLL_SUM)))
		return rc;
	for (int k = 0; k < b->iters; k++) {
		int64_t t0;

		if ((rc = emu_barrier(d)))
			return rc;
		t0 = emu_wall_ns();
		if ((rc = coll_all_reduce(d, emu_world(d), x, r->data, BIG_ELEMS, COLL_SUM)) ||
		    (rc = emu_barrier(d)))
			return rc;
		if (emu_dev_id(d) == 0)
			b->wall_ns[k] = emu_wall_ns() - t0;
	}
	return 0;
}

/* The baseline: out = b0 + b1 + ... + b7, one plain pass. */
static int64_t serial_sum(float *const *in, float *out)
{
	int64_t t0 = emu_wall_ns();

	for (size_t i = 0; i < BIG_ELEMS; i++) {
		float acc = in[0][i];

		for (int k = 1; k < BIG_DEVS; k++)
			acc += in[k][i];
		out[i] = acc;
	}
	return emu_wall_ns() - t0;
}

struct tiny {
	int iters;
	int64_t wall_ns; /* all iterations, device 0 */
};

static int tiny_device(struct emu_dev *d, void *arg)
{
	struct tiny *t = arg;
	float x = 1.0f;
	int64_t t0;
	int rc;

	for (int k = 0; k < 100; k++)
		if ((rc = coll_all_reduce(d, emu_world(d), &x, &x, 1, COLL_SUM)))
			return rc;
	if ((rc = emu_barrier(d)))
		return rc;
	t0 = emu_wall_ns();
	for (int k = 0; k < t->iters; k++)
		if ((rc = coll_all_reduce(d, emu_world(d), &x, &x, 1, COLL_SUM)))
			return rc;
	if ((rc = emu_barrier(d)))
		return rc;
	if (emu_dev_id(d) == 0)
		t->wall_ns = emu_wall_ns() - t0;
	return 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static double median_us(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_i64);
	return (double)v[n / 2] / 1e3;
}

static struct emu_cluster *cluster(int ndev, const char *preset, int workers)
{
	struct emu_config cfg;

	if (emu_config_default(&cfg, preset))
		emu_die("no preset %s", preset);
	cfg.topo.nodes = (ndev + 7) / 8;
	cfg.ndev = ndev;
	cfg.workers = workers;
	return emu_cluster_new(&cfg);
}

static const int modes[2] = {0, -1};
static const char *const mode_names[2] = {"contexts on a thread a core", "an OS thread a device"};

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "build/bench/out";
	char path[4096];
	float *in[BIG_DEVS], *out;
	int64_t serial_ns[ROUNDS], emu_ns[ROUNDS];
	double tiny_us[2];
	static const int tiny_devs[2] = {8, 64};
	struct emu_cluster *c;
	FILE *csv;

	snprintf(path, sizeof path, "%s/coll.csv", dir);
	csv = fopen(path, "w");
	if (!csv)
		emu_die("cannot write %s", path);
	fprintf(csv, "bench,devices,bytes,wall_us,baseline_us,ratio,devices_as\n");

	/* 1. Big all-reduce against the serial sum, alternately, ROUNDS times. */
	for (int k = 0; k < BIG_DEVS; k++) {
		in[k] = emu_xmalloc(BIG_ELEMS * sizeof(float));
		for (size_t i = 0; i < BIG_ELEMS; i++)
			in[k][i] = (float)(i % 7) + (float)k;
	}
	out = emu_xmalloc(BIG_ELEMS * sizeof(float));
	serial_sum(in, out); /* warm-up: touch the pages */
	for (int m = 0; m < 2; m++) {
		double e, sr;

		c = cluster(BIG_DEVS, "dgx-a100", modes[m]);
		for (int r = 0; r < ROUNDS; r++) {
			struct big b = {.iters = 1};

			serial_ns[r] = serial_sum(in, out);
			if (emu_cluster_run(c, big_device, &b))
				emu_die("all-reduce run failed:\n%s", emu_cluster_report(c));
			emu_ns[r] = b.wall_ns[0];
		}
		emu_cluster_free(c);
		e = median_us(emu_ns, ROUNDS);
		sr = median_us(serial_ns, ROUNDS);
		fprintf(csv, "all-reduce-64MiB,%d,%llu,%.1f,%.1f,%.3f,%s\n", BIG_DEVS,
			BIG_ELEMS * 4ULL, e, sr, e / sr, mode_names[m]);
		printf("all-reduce of 64 MiB on %d devices (%s): %.1f ms wall; serial sum of the "
		       "same %d buffers: %.1f ms; ratio %.2fx (target <= 2x)\n",
		       BIG_DEVS, mode_names[m], e / 1e3, BIG_DEVS, sr / 1e3, e / sr);
	}
	for (int k = 0; k < BIG_DEVS; k++)
		free(in[k]);
	free(out);

	/* 2. Tiny all-reduces. */
	for (int m = 0; m < 2; m++) {
		for (int i = 0; i < 2; i++) {
			int64_t per[ROUNDS];
			struct tiny t = {.iters = tiny_devs[i] <= 8 ? 5000 : 1000};

			c = cluster(tiny_devs[i], "dgx-a100", modes[m]);
			for (int r = 0; r < ROUNDS; r++) {
				if (emu_cluster_run(c, tiny_device, &t))
					emu_die("tiny run failed:\n%s", emu_cluster_report(c));
				per[r] = t.wall_ns / t.iters;
			}
			emu_cluster_free(c);
			tiny_us[i] = median_us(per, ROUNDS);
			fprintf(csv, "all-reduce-1-element,%d,4,%.2f,,,%s\n", tiny_devs[i],
				tiny_us[i], mode_names[m]);
		}
		printf("one 1-element all-reduce (%s): %.1f us wall among 8 devices (target <= "
		       "5), %.1f us among 64 (target <= 50)\n",
		       mode_names[m], tiny_us[0], tiny_us[1]);
	}
	fclose(csv);
	printf("wrote %s\n", path);
	return 0;
}
