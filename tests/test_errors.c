/* The outcomes the emulator exists to report (docs/architecture.md, Errors): a device OOM,
 * collective mismatches and deadlocks each come back from emu_cluster_run as an error whose report
 * names what it must, with every device's memory released and within a second of wall
 * time (found when no device can progress, not by a timeout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "coll.h"
#include "common.h"
#include "mem.h"
#include "util.h"

#define assert_report_has(c, s)                                                                    \
	do {                                                                                       \
		if (!strstr(emu_cluster_report(c), (s)))                                           \
			fail_msg("report lacks \"%s\":\n%s", (s), emu_cluster_report(c));          \
	} while (0)

/* Runs fn on c and checks it fails with err within a second, every device's memory
 * released. */
static void run_expect(struct emu_cluster *c, emu_dev_fn fn, void *arg, int err)
{
	int64_t t0 = emu_wall_ns();
	int rc = emu_cluster_run(c, fn, arg);
	int64_t wall = emu_wall_ns() - t0;

	if (rc != err)
		fail_msg("run returned %d (%s), want %d (%s); report:\n%s", rc, emu_err_name(rc),
			 err, emu_err_name(err), emu_cluster_report(c));
	assert_true(wall < 1000000000);
	for (int i = 0; i < emu_cluster_config(c)->ndev; i++)
		assert_int_equal(mem_cur_total(emu_cluster_dev(c, i)), 0);
}

/* ------------------------------------------------------------------------------------ */

/* Every device holds parameters and an activation, then waits in an all-reduce; device
 * 3 asks for more than its cap on the way. */
static int oom_device(struct emu_dev *d, void *arg)
{
	struct mem_block *p, *a, *big;
	float x[4] = {0};

	(void)arg;
	p = mem_alloc(d, MEM_PARAM, 1000, "layer0.weight");
	a = mem_alloc(d, MEM_ACT, 500, "layer0.out");
	if (!p || !a)
		return EMU_EOOM;
	if (emu_dev_id(d) == 3) {
		big = mem_alloc(d, MEM_ACT, 1 << 20, "attn.scores");
		if (!big)
			return EMU_EOOM;
	}
	return coll_all_reduce(d, emu_world(d), x, x, 4, COLL_SUM);
}

static void test_oom(void **state)
{
	struct emu_config cfg;
	struct emu_cluster *c;

	(void)state;
	emu_config_default(&cfg, "dgx-a100");
	cfg.mem_cap = 4096;
	c = emu_cluster_new(&cfg);
	run_expect(c, oom_device, NULL, EMU_EOOM);
	assert_report_has(c, "device 3");
	assert_report_has(c, "'attn.scores'");
	assert_report_has(c, "1048576 bytes");
	assert_report_has(c, "act");
	assert_report_has(c, "cap 4096 bytes");
	assert_report_has(c, "in use 1500 bytes");
	assert_report_has(c, "param=1000 B");
	assert_report_has(c, "act=500 B");
	/* The peak shows what was held when it failed; the OOM allocation is not counted. */
	assert_int_equal(mem_peak_total(emu_cluster_dev(c, 3)), 1500);
	emu_cluster_free(c);
}

/* Two devices run out at once: the report is the lowest device's, on every run. */
static int oom_two_device(struct emu_dev *d, void *arg)
{
	(void)arg;
	if (emu_dev_id(d) == 5 || emu_dev_id(d) == 2)
		return mem_alloc(d, MEM_GRAD, 1 << 30, "grads") ? 0 : EMU_EOOM;
	return emu_barrier(d);
}

static void test_oom_deterministic_report(void **state)
{
	struct emu_config cfg;
	struct emu_cluster *c;

	(void)state;
	emu_config_default(&cfg, "dgx-a100");
	cfg.mem_cap = 1 << 20;
	c = emu_cluster_new(&cfg);
	for (int i = 0; i < 5; i++) {
		run_expect(c, oom_two_device, NULL, EMU_EOOM);
		assert_report_has(c, "device 2: out of memory allocating 'grads'");
	}
	emu_cluster_free(c);
}

/* In dry-run nothing is allocated, but the cap and the report are the same. */
static int dry_oom_device(struct emu_dev *d, void *arg)
{
	struct mem_block *b = mem_alloc(d, MEM_OPTIM, 3ULL << 40, "adam.m");

	(void)arg;
	if (!b)
		return EMU_EOOM;
	return 0;
}

static void test_oom_dry_run(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-h100", 1, 2, 1, 0);

	(void)state;
	run_expect(c, dry_oom_device, NULL, EMU_EOOM);
	assert_report_has(c, "device 0: out of memory allocating 'adam.m' (3298534883328 bytes");
	assert_report_has(c, "optim");
	emu_cluster_free(c);
}

/* ------------------------------------------------------------------------------------ */

/* Device 1 calls all-gather where the others call all-reduce. */
static int mismatch_op_device(struct emu_dev *d, void *arg)
{
	float x[1000] = {0}, y[4000];

	(void)arg;
	if (emu_dev_id(d) == 1)
		return coll_all_gather(d, emu_world(d), x, y, 250);
	return coll_all_reduce(d, emu_world(d), x, x, 1000, COLL_SUM);
}

static void test_mismatch_op(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 0);

	(void)state;
	run_expect(c, mismatch_op_device, NULL, EMU_EMISMATCH);
	assert_report_has(c, "collective mismatch");
	assert_report_has(c, "device 0: all-reduce(count=1000, sum) on group {0..3}");
	assert_report_has(c, "device 1: all-gather(count=250) on group {0..3}");
	assert_report_has(c, "device 3: all-reduce(count=1000, sum)");
	emu_cluster_free(c);
}

/* Counts and roots that disagree. */
static int mismatch_count_device(struct emu_dev *d, void *arg)
{
	float x[64] = {0};
	int root = *(int *)arg;

	if (root >= 0)
		return coll_broadcast(d, emu_world(d), x, 64, emu_dev_id(d) == 2 ? root : 0);
	return coll_all_reduce(d, emu_world(d), x, x, emu_dev_id(d) == 2 ? 63 : 64, COLL_SUM);
}

static void test_mismatch_count_and_root(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 3, 0, 0);
	int root = -1;

	(void)state;
	run_expect(c, mismatch_count_device, &root, EMU_EMISMATCH);
	assert_report_has(c, "device 2: all-reduce(count=63, sum)");
	assert_report_has(c, "device 0: all-reduce(count=64, sum)");
	root = 1;
	run_expect(c, mismatch_count_device, &root, EMU_EMISMATCH);
	assert_report_has(c, "device 2: broadcast(count=64, root=1)");
	assert_report_has(c, "device 1: broadcast(count=64, root=0)");
	emu_cluster_free(c);
}

/* Devices 0 and 1 form the group {0,1}; device 1 thinks it is {0,1,2}. */
static int mismatch_group_device(struct emu_dev *d, void *arg)
{
	static const int two[] = {0, 1}, three[] = {0, 1, 2};
	float x[8] = {0};
	int id = emu_dev_id(d);
	struct emu_group *g;

	(void)arg;
	g = id == 0 ? emu_group_get(d, two, 2) : emu_group_get(d, three, 3);
	if (!g)
		return EMU_EINVAL;
	return coll_all_reduce(d, g, x, x, 8, COLL_SUM);
}

static void test_mismatch_group(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 3, 0, 0);

	(void)state;
	run_expect(c, mismatch_group_device, NULL, EMU_EMISMATCH);
	assert_report_has(c, "different groups");
	assert_report_has(c, "device 0: all-reduce(count=8, sum) on group {0,1}");
	assert_report_has(c, "device 1: all-reduce(count=8, sum) on group {0..2}");
	emu_cluster_free(c);
}

/* A send whose receiver expects a different count. */
static int mismatch_p2p_device(struct emu_dev *d, void *arg)
{
	float x[16] = {0};

	(void)arg;
	if (emu_dev_id(d) == 0)
		return coll_send(d, 1, x, 16);
	return coll_recv(d, 0, x, 8);
}

static void test_mismatch_p2p(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 2, 0, 0);

	(void)state;
	run_expect(c, mismatch_p2p_device, NULL, EMU_EMISMATCH);
	assert_report_has(c, "device 0: send(count=16) to device 1");
	assert_report_has(c, "device 1: recv(count=8) from device 0");
	emu_cluster_free(c);
}

/* ------------------------------------------------------------------------------------ */

/* Each device receives from the next one first: a cycle of waits. */
static int cycle_device(struct emu_dev *d, void *arg)
{
	int n = emu_dev_count(d), id = emu_dev_id(d), rc;
	struct mem_block *b = mem_alloc(d, MEM_COMM, 64, "buf");

	(void)arg;
	if (!b)
		return EMU_EOOM;
	rc = coll_recv(d, (id + 1) % n, b->data, 16);
	if (!rc)
		rc = coll_send(d, (id + n - 1) % n, b->data, 16);
	return rc;
}

static void test_deadlock_cycle(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 0);

	(void)state;
	run_expect(c, cycle_device, NULL, EMU_EDEADLOCK);
	assert_report_has(c, "deadlock");
	assert_report_has(c, "4 blocked");
	for (int i = 0; i < 4; i++) {
		char line[128];

		snprintf(line, sizeof line,
			 "device %d: recv(count=16) from device %d waits for device %d (blocked in "
			 "recv)",
			 i, (i + 1) % 4, (i + 1) % 4);
		assert_report_has(c, line);
	}
	emu_cluster_free(c);
}

/* Device 2 returns without joining the all-reduce the others wait in. */
static int missing_device(struct emu_dev *d, void *arg)
{
	float x[4] = {0};

	(void)arg;
	if (emu_dev_id(d) == 2)
		return 0;
	return coll_all_reduce(d, emu_world(d), x, x, 4, COLL_SUM);
}

static void test_deadlock_missing_member(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 0);

	(void)state;
	run_expect(c, missing_device, NULL, EMU_EDEADLOCK);
	assert_report_has(c, "3 blocked, 1 returned");
	assert_report_has(
		c,
		"device 0: all-reduce(count=4, sum) on group {0..3} waits for device 2 (returned)");
	assert_report_has(
		c,
		"device 3: all-reduce(count=4, sum) on group {0..3} waits for device 2 (returned)");
	emu_cluster_free(c);
}

/* Two devices post receives to each other and wait: with posted calls that is fine (no
 * deadlock), the exchange goes through. */
static int exchange_device(struct emu_dev *d, void *arg)
{
	float mine[4], theirs[4];
	int id = emu_dev_id(d), peer = 1 - id, rc;
	struct coll_req *r, *s;

	(void)arg;
	for (int i = 0; i < 4; i++)
		mine[i] = (float)(id * 10 + i);
	if ((rc = coll_irecv(d, peer, theirs, 4, &r)) || (rc = coll_isend(d, peer, mine, 4, &s)))
		return rc;
	if ((rc = coll_wait(d, r)) || (rc = coll_wait(d, s)))
		return rc;
	for (int i = 0; i < 4; i++)
		if (theirs[i] != (float)(peer * 10 + i))
			return emu_dev_fail(d, "got %g at %d", (double)theirs[i], i);
	return 0;
}

static void test_posted_exchange_is_no_deadlock(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 2, 0, 0);

	(void)state;
	assert_int_equal(emu_cluster_run(c, exchange_device, NULL), 0);
	emu_cluster_free(c);
}

/* A device that fails on its own stops the others that wait for it. */
static int fail_device(struct emu_dev *d, void *arg)
{
	float x[4] = {0};

	(void)arg;
	if (emu_dev_id(d) == 1)
		return emu_dev_fail(d, "loss is NaN at step %d", 7);
	return coll_all_reduce(d, emu_world(d), x, x, 4, COLL_SUM);
}

static void test_device_failure(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 8, 0, 0);

	(void)state;
	run_expect(c, fail_device, NULL, EMU_EDEVICE);
	assert_report_has(c, "device 1: loss is NaN at step 7");
	emu_cluster_free(c);
}

/* Devices 3 and 5 fail on their own, the one *arg names with a kind of its own
 * (emu_dev_fail_as), the other without; none fails if *arg is negative. */
static int fail_named_device(struct emu_dev *d, void *arg)
{
	int named = *(int *)arg, id = emu_dev_id(d);
	float x[4] = {0};

	if (id == named)
		return emu_dev_fail_as(d, "training diverged", "the loss is inf at step %d", 3);
	if (named >= 0 && (id == 3 || id == 5))
		return emu_dev_fail(d, "failed at step %d", 3);
	return coll_all_reduce(d, emu_world(d), x, x, 4, COLL_SUM);
}

/* A failure's kind is the lowest failing device's, whichever thread failed first, and
 * emu_err_name of the error where it gave none; a run that passes is "ok". */
static void test_failure_kind(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 8, 0, 0);
	int named = 3, none = -1;

	(void)state;
	for (int rep = 0; rep < 20; rep++) {
		named = 3;
		run_expect(c, fail_named_device, &named, EMU_EDEVICE);
		assert_string_equal(emu_cluster_err_kind(c), "training diverged");
		assert_report_has(c, "device 3: the loss is inf at step 3");
		named = 5;
		run_expect(c, fail_named_device, &named, EMU_EDEVICE);
		assert_string_equal(emu_cluster_err_kind(c), "device failure");
		assert_report_has(c, "device 3: failed at step 3");
	}
	assert_int_equal(emu_cluster_run(c, fail_named_device, &none), 0);
	assert_string_equal(emu_cluster_err_kind(c), "ok");
	emu_cluster_free(c);
}

/* Bad arguments from device code are reports too, not crashes. */
static int bad_arg_device(struct emu_dev *d, void *arg)
{
	int which = *(int *)arg;
	static const int dup[] = {0, 0}, outside[] = {0, 99}, other[] = {1};
	float x[4];

	if (emu_dev_id(d) != 0)
		return 0;
	switch (which) {
	case 0:
		return emu_group_get(d, dup, 2) ? 0 : EMU_EINVAL;
	case 1:
		return emu_group_get(d, outside, 2) ? 0 : EMU_EINVAL;
	case 2:
		return emu_group_get(d, other, 1) ? 0 : EMU_EINVAL;
	case 3:
		return coll_send(d, 0, x, 4);
	case 4:
		return coll_send(d, 7, x, 4);
	default:
		return coll_all_reduce(d, emu_world(d), NULL, NULL, 4, COLL_SUM);
	}
}

static void test_bad_arguments(void **state)
{
	static const char *const want[] = {
		"listed twice",          "device 99 is not in the cluster", "not in",
		"cannot send to itself", "peer 7 is not in the cluster",    "NULL buffer"};
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 2, 0, 0);

	(void)state;
	for (int i = 0; i < 6; i++) {
		run_expect(c, bad_arg_device, &i, EMU_EINVAL);
		assert_report_has(c, want[i]);
	}
	emu_cluster_free(c);
}

/* ------------------------------------------------------------------------------------ */

/* The fault plan: every device leaves out its second all-reduce (posted, here) and only
 * that one. out[dev][k] is the k-th all-reduce's result, t[dev] the virtual time. */
struct fault_job {
	float out[4][3];
	int64_t t[4];
};

static int fault_device(struct emu_dev *d, void *arg)
{
	struct fault_job *j = arg;
	int id = emu_dev_id(d), rc;

	for (int k = 0; k < 3; k++) {
		struct coll_req *req;
		float x = (float)(id + 1);

		if ((rc = coll_iall_reduce(d, emu_world(d), &x, &x, 1, COLL_SUM, &req)) ||
		    (rc = coll_wait(d, req)))
			return rc;
		j->out[id][k] = x;
	}
	j->t[id] = emu_now(d);
	return 0;
}

static void test_fault_plan(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 0);
	struct fault_job j, clean;

	(void)state;
	assert_int_equal(emu_cluster_set_fault(c, "all-reduse", 1), -1);
	assert_int_equal(emu_cluster_set_fault(c, "all-reduce", -1), -1);
	assert_int_equal(emu_cluster_set_fault(c, "recv", 0), -1); /* a send's other end */
	assert_int_equal(emu_cluster_set_fault(c, NULL, 0), 0);
	assert_int_equal(emu_cluster_run(c, fault_device, &clean), 0);
	assert_int_equal(emu_cluster_set_fault(c, "all-reduce", 1), 0);
	assert_int_equal(emu_cluster_run(c, fault_device, &j), 0);
	for (int d = 0; d < 4; d++) {
		assert_true(j.out[d][0] == 10.0f && j.out[d][2] == 10.0f);
		assert_true(j.out[d][1] == (float)(d + 1)); /* left out: nothing moved */
		assert_true(clean.out[d][1] == 10.0f);
		/* and it took no time: two all-reduces' worth instead of three */
		assert_int_equal(j.t[d] * 3, clean.t[d] * 2);
	}
	/* counted afresh each run */
	assert_int_equal(emu_cluster_run(c, fault_device, &j), 0);
	assert_true(j.out[0][1] == 1.0f && j.out[0][2] == 10.0f);
	emu_cluster_free(c);
}

/* The send fault: device 0 sends 3 messages to device 1; with the plan on "send" 1 the
 * second arrives empty (the receive buffer keeps its -1) in the same time. */
struct lost_job {
	float got[3];
	int64_t t;
};

static int lost_device(struct emu_dev *d, void *arg)
{
	struct lost_job *j = arg;
	int rc;

	for (int k = 0; k < 3; k++) {
		float x = (float)(k + 1);

		if (emu_dev_id(d) == 0 && (rc = coll_send(d, 1, &x, 1)))
			return rc;
		if (emu_dev_id(d) == 1) {
			j->got[k] = -1.0f;
			if ((rc = coll_recv(d, 0, &j->got[k], 1)))
				return rc;
			j->t = emu_now(d);
		}
	}
	return 0;
}

static void test_fault_lost_send(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 2, 0, 0);
	struct lost_job j, clean;

	(void)state;
	assert_int_equal(emu_cluster_run(c, lost_device, &clean), 0);
	assert_int_equal(emu_cluster_set_fault(c, "send", 1), 0);
	assert_int_equal(emu_cluster_run(c, lost_device, &j), 0);
	assert_true(clean.got[1] == 2.0f);
	assert_true(j.got[0] == 1.0f && j.got[1] == -1.0f && j.got[2] == 3.0f);
	assert_int_equal(j.t, clean.t);
	emu_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oom),
		cmocka_unit_test(test_oom_deterministic_report),
		cmocka_unit_test(test_oom_dry_run),
		cmocka_unit_test(test_mismatch_op),
		cmocka_unit_test(test_mismatch_count_and_root),
		cmocka_unit_test(test_mismatch_group),
		cmocka_unit_test(test_mismatch_p2p),
		cmocka_unit_test(test_deadlock_cycle),
		cmocka_unit_test(test_deadlock_missing_member),
		cmocka_unit_test(test_posted_exchange_is_no_deadlock),
		cmocka_unit_test(test_device_failure),
		cmocka_unit_test(test_failure_kind),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_fault_plan),
		cmocka_unit_test(test_fault_lost_send),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
