/* Injected faults (pemu's --inject-fault; emu/cluster.h's emu_dev_die and slowdowns):
 *   - fail:DEV@STEP: the device dies as the step begins; the run fails (nothing hangs)
 *     with a report naming it and what every blocked peer waits for, the same report on
 *     one host thread and on several; a pipeline's peers too;
 *   - slow:DEV:X: the device's kernels last exactly X times as long, its peers wait for
 *     it (the step grows), and the numbers do not change;
 *   - link:NODE:X: a collective over a group with a member on the node lasts X times as
 *     long, one within another node does not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "coll.h"
#include "common.h"
#include "run/run.h"
#include "verify.h"

static struct data corpus;

/* cfg on a fresh cluster of its world (workers host threads), into o; the run's code. */
static int run_on(struct run_cfg *cfg, int workers, const struct emu_slow *slow, int nslow,
		  struct run_out *o, char *report, size_t n)
{
	struct emu_config ec;
	struct emu_cluster *c;
	char err[256];
	int rc;

	if (run_check(cfg, cfg->mesh.world, err, sizeof err))
		fail_msg("config refused: %s", err);
	emu_config_default(&ec, "dgx-a100");
	ec.ndev = cfg->mesh.world;
	ec.workers = workers;
	ec.nslow = nslow;
	for (int i = 0; i < nslow; i++)
		ec.slow[i] = slow[i];
	c = emu_cluster_new(&ec);
	run_alloc(o, cfg, 0);
	rc = run_parallel(c, cfg, o);
	snprintf(report, n, "%s", emu_cluster_report(c));
	emu_cluster_free(c);
	return rc;
}

static void test_fail(void **state)
{
	char rep[2][4096];

	(void)state;
	for (int w = 0; w < 2; w++) {
		struct run_cfg cfg;
		struct run_out o;

		test_make_cfg(&cfg, "tiny", 2, 2, 1, &corpus); /* devices 0-3: tp fastest */
		cfg.steps = 4;
		cfg.nfail = 1;
		cfg.fail[0].dev = 2;
		cfg.fail[0].step = 3;
		assert_int_equal(run_on(&cfg, w ? 2 : 1, NULL, 0, &o, rep[w], sizeof rep[w]),
				 EMU_EDEVICE);
		/* the steps before it ran */
		assert_true(o.loss[1] > 0);
		run_free(&o);
	}
	printf("%s\n", rep[0]);
	assert_non_null(strstr(rep[0], "device 2 died: failed as step 3 began "
				       "(--inject-fault fail:2@3)"));
	/* its tp peer waits on it; its dp peer waits on the other tp rank, blocked */
	assert_non_null(strstr(rep[0], "device 3: all-reduce"));
	assert_non_null(strstr(rep[0], "waits for device 2 (dead)"));
	assert_non_null(strstr(rep[0], "device 0: all-reduce"));
	assert_string_equal(rep[0], rep[1]); /* whatever the host threads */

	{ /* a pipeline: the next stage waits for its activations */
		struct run_cfg cfg;
		struct run_out o;

		test_make_cfg(&cfg, "tiny", 1, 1, 2, &corpus);
		cfg.model.num_layers = 4;
		cfg.steps = 2;
		cfg.nfail = 1;
		cfg.fail[0].dev = 0;
		cfg.fail[0].step = 2;
		assert_int_equal(run_on(&cfg, 1, NULL, 0, &o, rep[0], sizeof rep[0]), EMU_EDEVICE);
		printf("%s\n", rep[0]);
		assert_non_null(strstr(rep[0], "device 0 died"));
		assert_non_null(strstr(rep[0], "device 1: recv"));
		run_free(&o);
	}
}

static void test_slow(void **state)
{
	struct run_cfg cfg;
	struct run_out o[2];
	struct emu_slow slow = {1, -1, 3};
	char rep[256];

	(void)state;
	for (int k = 0; k < 2; k++) {
		test_make_cfg(&cfg, "tiny", 4, 1, 1, &corpus);
		cfg.steps = 2;
		assert_int_equal(run_on(&cfg, 1, &slow, k, &o[k], rep, sizeof rep), 0);
	}
	/* device 1's kernels three times as long (o.compute_ns is device 0's: unchanged),
	 * and device 0 waits for it at the gradients' all-reduce */
	printf("step %lld ns, slowed %lld ns\n", (long long)o[0].step_ns[1],
	       (long long)o[1].step_ns[1]);
	assert_int_equal(o[1].compute_ns[1], o[0].compute_ns[1]);
	assert_true(o[1].step_ns[1] > o[0].step_ns[1] + o[0].compute_ns[1]);
	for (int s = 0; s < 2; s++)
		assert_true(o[0].loss[s] == o[1].loss[s]);
	run_free(&o[0]);
	run_free(&o[1]);
}

/* An all-reduce over devices 0-3 (2 nodes of 2) and one over devices 0-1 (node 0). */
static int two_groups(struct emu_dev *d, void *arg)
{
	int64_t *t = arg, t0;
	int rc, devs[2] = {0, 1};

	t0 = emu_stream_time(d, EMU_STREAM_COMM);
	if ((rc = coll_all_reduce(d, emu_world(d), NULL, NULL, 1 << 20, COLL_SUM)))
		return rc;
	if (emu_dev_id(d) == 0)
		t[0] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	if (emu_dev_id(d) < 2) {
		t0 = emu_stream_time(d, EMU_STREAM_COMM);
		if ((rc = coll_all_reduce(d, emu_group_get(d, devs, 2), NULL, NULL, 1 << 20,
					  COLL_SUM)))
			return rc;
		if (emu_dev_id(d) == 0)
			t[1] = emu_stream_time(d, EMU_STREAM_COMM) - t0;
	}
	return 0;
}

static void test_link(void **state)
{
	int64_t t[2][2];

	(void)state;
	for (int k = 0; k < 2; k++) {
		struct emu_config ec;
		struct emu_cluster *c;

		emu_config_default(&ec, "dgx-a100");
		ec.topo.nodes = 2;
		ec.topo.gpus_per_node = 2;
		ec.ndev = 4;
		ec.dry_run = 1;
		ec.nslow = k;
		ec.slow[0] = (struct emu_slow){-1, 1, 4};
		c = emu_cluster_new(&ec);
		assert_int_equal(emu_cluster_run(c, two_groups, t[k]), 0);
		emu_cluster_free(c);
	}
	printf("across nodes %lld -> %lld ns, in node 0 %lld -> %lld ns\n", (long long)t[0][0],
	       (long long)t[1][0], (long long)t[0][1], (long long)t[1][1]);
	assert_int_equal(t[1][0], 4 * t[0][0]);
	assert_int_equal(t[1][1], t[0][1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_fail), cmocka_unit_test(test_slow),
					   cmocka_unit_test(test_link)};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
