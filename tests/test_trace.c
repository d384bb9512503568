/* Determinism and the trace: the same run gives byte-identical Chrome traces, with or
 * without pacing, and the trace holds what Perfetto needs (a process per device, a thread
 * per stream, memory counters, send->recv flows, each kernel's FLOPs and bytes); the
 * ASCII timeline draws it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "clock.h"
#include "coll.h"
#include "common.h"
#include "mem.h"
#include "trace.h"
#include "util.h"

/* With *jitter set, a device sleeps a random 0-200 us (seeded from the wall clock) before
 * each step: host scheduling that differs on every run. */
static void host_jitter(const int *jitter, unsigned *seed)
{
	if (jitter && *jitter) {
		struct timespec ts = {0, (long)(rand_r(seed) % 200) * 1000};

		nanosleep(&ts, NULL);
	}
}

/* A little of everything: compute, a posted all-reduce inside the node overlapping
 * compute, a ring of sends, an all-gather over everyone, memory coming and going. */
static int workload(struct emu_dev *d, void *arg)
{
	unsigned seed = (unsigned)emu_wall_ns() ^ (unsigned)emu_dev_id(d);
	int id = emu_dev_id(d), n = emu_dev_count(d), node_devs[8], rc;
	struct mem_block *w = mem_alloc(d, MEM_PARAM, 4096 * 4, "w");
	struct mem_block *a = mem_alloc(d, MEM_ACT, 4096 * 4 * n, "gathered");
	float *x, *y, ring[64], out[64];
	struct coll_req *req, *rs, *rr;
	struct emu_group *node;

	if (!w || !a)
		return EMU_EOOM;
	x = w->data;
	y = a->data;
	for (int i = 0; i < 4096; i++)
		x[i] = test_value((uint64_t)id, (uint64_t)i);
	for (int i = 0; i < 8; i++)
		node_devs[i] = id / 8 * 8 + i;
	node = emu_group_get(d, node_devs, 8);
	if (!node)
		return EMU_EINVAL;
	for (int step = 0; step < 3; step++) {
		host_jitter(arg, &seed);
		emu_compute(d, "forward", 2e9 * (1 + id % 3), 1e6);
		/* The send reads its own copy: x belongs to the all-reduce until its wait. */
		memcpy(out, x, sizeof out);
		if ((rc = coll_iall_reduce(d, node, x, x, 4096, COLL_SUM, &req)))
			return rc;
		emu_compute(d, "backward", 4e9, 1e6);
		host_jitter(arg, &seed);
		if ((rc = coll_irecv(d, (id + n - 1) % n, ring, 64, &rr)) ||
		    (rc = coll_isend(d, (id + 1) % n, out, 64, &rs)) || (rc = coll_wait(d, rr)) ||
		    (rc = coll_wait(d, rs)) || (rc = coll_wait(d, req)))
			return rc;
		if ((rc = coll_all_gather(d, emu_world(d), x, y, 4096)))
			return rc;
		x[0] += ring[0] * 1e-3f + y[4096 * (n - 1)];
	}
	mem_free(d, a);
	return 0;
}

static char *slurp(const char *path, size_t *len)
{
	char *b = (char *)test_slurp(path, len);

	if (!b)
		fail_msg("cannot read %s", path);
	return b;
}

static char *run_and_trace(double pace, int jitter, int workers, const char *path, size_t *len)
{
	struct emu_config cfg;
	struct emu_cluster *c;

	emu_config_default(&cfg, "dgx-a100");
	cfg.topo.nodes = 2;
	cfg.ndev = 16;
	cfg.trace = 1;
	cfg.pace = pace;
	cfg.workers = workers;
	c = emu_cluster_new(&cfg);
	assert_int_equal(emu_cluster_run(c, workload, &jitter), 0);
	assert_int_equal(trace_write_json(c, path), 0);
	emu_cluster_free(c);
	return slurp(path, len);
}

static void test_identical_traces(void **state)
{
	/* The devices as contexts on 1, 2 and 3 host threads, and as an OS thread each. */
	static const int workers[] = {1, 3, -1};
	size_t n1, n2, n3, n4;
	char *a, *b, *p, *j;

	(void)state;
	a = run_and_trace(0, 0, 2, "build/test_trace_a.json", &n1);
	b = run_and_trace(0, 0, 2, "build/test_trace_b.json", &n2);
	/* Pacing and random host delays make the devices run in another order; neither may
	 * change a thing in virtual time; nor may how many host threads run them. */
	p = run_and_trace(0.5, 0, 2, "build/test_trace_p.json", &n3);
	j = run_and_trace(0, 1, 2, "build/test_trace_j.json", &n4);
	for (size_t i = 0; i < sizeof workers / sizeof *workers; i++) {
		size_t nw;
		char *w = run_and_trace(0, 1, workers[i], "build/test_trace_w.json", &nw);

		assert_int_equal(n1, nw);
		assert_memory_equal(a, w, n1);
		free(w);
	}
	assert_true(n1 > 1000);
	assert_int_equal(n1, n2);
	assert_memory_equal(a, b, n1);
	assert_int_equal(n1, n3);
	assert_memory_equal(a, p, n1);
	assert_int_equal(n1, n4);
	assert_memory_equal(a, j, n1);
	free(j);
	free(a);
	free(b);
	free(p);
}

static void test_trace_content(void **state)
{
	size_t n;
	char *t = run_and_trace(0, 0, 0, "build/test_trace_c.json", &n);

	(void)state;
	assert_non_null(strstr(t, "\"traceEvents\":["));
	assert_non_null(strstr(t, "\"name\":\"gpu 15 (node 1, local 7)\""));
	assert_non_null(strstr(t, "\"args\":{\"name\":\"compute\"}"));
	assert_non_null(strstr(t, "\"args\":{\"name\":\"comm\"}"));
	assert_non_null(strstr(t, "\"name\":\"all-reduce\",\"cat\":\"comm\",\"ph\":\"X\""));
	assert_non_null(strstr(t, "\"name\":\"forward\",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":0,"
				  "\"tid\":0,\"ts\":0.000"));
	/* a kernel's FLOPs and HBM bytes as it was charged (device 0's forward, device 1's) */
	assert_non_null(strstr(t, "\"args\":{\"flops\":2000000000,\"bytes\":1000000}"));
	assert_non_null(strstr(t, "\"args\":{\"flops\":4000000000,\"bytes\":1000000}"));
	assert_non_null(strstr(t, "\"ph\":\"C\""));
	assert_non_null(strstr(t, "\"param\":16384"));
	assert_non_null(strstr(t, "\"cat\":\"p2p\",\"ph\":\"s\""));
	assert_non_null(strstr(t, "\"cat\":\"p2p\",\"ph\":\"f\",\"bp\":\"e\""));
	assert_int_equal(t[n - 2], '}');
	free(t);
}

static void test_timeline(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 2, 16, 0, 1);
	char buf[16384] = {0};
	FILE *f = tmpfile();

	(void)state;
	assert_int_equal(emu_cluster_run(c, workload, NULL), 0);
	trace_timeline(c, f, 80, 4);
	rewind(f);
	assert_true(fread(buf, 1, sizeof buf - 1, f) > 0);
	fclose(f);
	assert_non_null(strstr(buf, "gpu0    compute |#"));
	assert_non_null(strstr(buf, "gpu3    comm    |"));
	assert_non_null(strstr(buf, "gpu1    send    |"));
	assert_non_null(strstr(buf, "... 12 more devices not drawn"));
	assert_non_null(strstr(buf, "G"));
	assert_non_null(strstr(buf, "legend:"));
	assert_null(strstr(buf, "gpu4 "));
	emu_cluster_free(c);
}

/* Pacing: the wall clock follows virtual time * pace (here 0.5 of about 4.6 ms). */
static int paced(struct emu_dev *d, void *arg)
{
	(void)arg;
	emu_compute(d, "slow", 1e12, 0); /* 1e12 / (0.7 * 312e12) s = 4.58 ms */
	return emu_barrier(d);
}

static void test_pacing(void **state)
{
	struct emu_config cfg;
	struct emu_cluster *c;
	int64_t t0, wall;

	(void)state;
	emu_config_default(&cfg, "dgx-a100");
	cfg.ndev = 2;
	cfg.cost = EMU_COST_ROOFLINE; /* paced() sums roofline durations */
	cfg.pace = 0.5;
	c = emu_cluster_new(&cfg);
	t0 = emu_wall_ns();
	assert_int_equal(emu_cluster_run(c, paced, NULL), 0);
	wall = emu_wall_ns() - t0;
	assert_true(wall >= 2290000); /* a lower bound: sleeping never ends early */
	emu_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_identical_traces),
		cmocka_unit_test(test_trace_content),
		cmocka_unit_test(test_timeline),
		cmocka_unit_test(test_pacing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
