/* Context parallelism (par/cp.h: the ring, all-gather, Ulysses) against the serial
 * reference and the formulas of docs/formulas.md:
 *   - the layout: rank r holds chunks r and 2cp - 1 - r (or chunk r, contiguous), every
 *     position once;
 *   - the verify table: each comm type with tp, sp, dp with ZeRO 1 and 3, pp (1F1B and
 *     ZB-H1), selective and full recomputation, and the contiguous ring;
 *   - the volumes each comm type moves per layer, from the collectives' statistics of
 *     context parallelism's tag, against the formulas;
 *   - the balanced ring gives every rank the same compute, the contiguous one does not;
 *   - a dropped ring step, gather or all-to-all fails verify; runs are bitwise
 *     deterministic.
 *
 *   PEMU_TEST_FILTER=a2a build/tests/test_cp      table cases containing it
 *
 * Cases are named layout/comm type: "cp2/tp2/sp/p2p", "cp4/dp2/zero1/all_gather". */
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
#include "par/cp.h"
#include "presets.h"
#include "run/run.h"
#include "trace.h"
#include "verify.h"

static struct data corpus;

static const char *const comm_names[] = {"p2p", "all_gather", "a2a"};

/* tiny (2 layers, h 64, 4 heads, s 32) on a dp x cp x tp x pp mesh, micro-batch 2. */
static void make_cfg(struct run_cfg *cfg, int dp, int cp, int tp, int pp, enum par_cp_comm comm)
{
	test_make_cfg(cfg, "tiny", dp, tp, pp, &corpus);
	mesh_init(&cfg->mesh, tp, cp, 1, dp, pp);
	cfg->cp_comm = comm;
	cfg->flash = 1;
	if (pp > 1)
		cfg->model.num_layers = 4;
}

/* ------------------------------------------------------------------------------------ */
/* The layout                                                                           */

static void test_positions(void **state)
{
	(void)state;
	for (int cp = 1; cp <= 8; cp *= 2)
		for (int contiguous = 0; contiguous < 2; contiguous++) {
			int s = 64, T = s / cp, ch = s / (2 * cp), seen[64] = {0};

			for (int r = 0; r < cp; r++)
				for (int i = 0; i < T; i++) {
					int p = par_cp_position(s, cp, r, i, contiguous);
					int want = contiguous ? r * T + i
						   : i < ch   ? r * ch + i
							      : (2 * cp - 1 - r) * ch + i - ch;

					assert_int_equal(p, want);
					seen[p]++;
				}
			for (int p = 0; p < s; p++)
				assert_int_equal(seen[p], 1);
		}
	/* without cp every position is its own, whatever the sequence (odd ones too: 7 once
	 * took position 6 to 3, through halves of 3) */
	for (int s = 1; s <= 33; s++)
		for (int i = 0; i < s; i++) {
			assert_int_equal(par_cp_position(s, 1, 0, i, 0), i);
			assert_int_equal(par_cp_position(s, 1, 0, i, 1), i);
		}
}

/* ------------------------------------------------------------------------------------ */
/* The verify table                                                                     */

static const struct layout {
	const char *name;
	int dp, cp, tp, pp, sp, zero;
	enum par_recompute recompute;
	enum sched_kind schedule;
	int contiguous;
	int seq; /* the sequence (0: tiny's 32), micro-batch 1 if set */
} layouts[] = {
	{"cp2", 1, 2, 1, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp4", 1, 4, 1, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp2/tp2", 1, 2, 2, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp2/tp2/sp", 1, 2, 2, 1, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp4/tp2/sp", 1, 4, 2, 1, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp2/dp2/zero1", 2, 2, 1, 1, 0, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp2/dp2/zero3", 2, 2, 1, 1, 0, 3, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp2/selective", 1, 2, 1, 1, 0, 0, PAR_RECOMPUTE_SELECTIVE, SCHED_1F1B, 0, 0},
	{"cp2/tp2/full", 1, 2, 2, 1, 0, 0, PAR_RECOMPUTE_FULL, SCHED_1F1B, 0, 0},
	{"cp2/pp2", 1, 2, 1, 2, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp2/tp2/pp2/zb-h1", 1, 2, 2, 2, 0, 0, PAR_RECOMPUTE_NONE, SCHED_ZBH1, 0, 0},
	{"cp4/contiguous", 1, 4, 1, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 1, 0},
	{"cp2/dp2/tp2/contiguous", 2, 2, 2, 1, 0, 0, PAR_RECOMPUTE_FULL, SCHED_1F1B, 1, 0},
	/* chunks of 96 rows: more than a block of FLASH_ROWS queries, not a multiple */
	{"cp4/s768", 1, 4, 1, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 768},
};

static int selected(const char *name)
{
	const char *f = getenv("PEMU_TEST_FILTER");

	return !f || !*f || test_name_selected(name, f);
}

static void test_verify_table(void **state)
{
	int ran = 0, failed = 0, skipped = 0;

	(void)state;
	for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++)
		for (int k = 0; k < 3; k++) {
			const struct layout *lo = &layouts[l];
			struct run_cfg cfg;
			struct verify_result r;
			char name[64], worst[64], err[256];

			snprintf(name, sizeof name, "%s/%s", lo->name, comm_names[k]);
			if (!selected(name) || (lo->contiguous && k != PAR_CP_P2P)) {
				skipped++;
				continue;
			}
			make_cfg(&cfg, lo->dp, lo->cp, lo->tp, lo->pp, (enum par_cp_comm)k);
			cfg.sp = lo->sp;
			cfg.zero = lo->zero;
			cfg.recompute = lo->recompute;
			cfg.schedule = lo->schedule;
			cfg.cp_contiguous = lo->contiguous;
			if (lo->seq) {
				cfg.model.seq_len = lo->seq;
				cfg.mbs = 1;
			}
			if (run_check(&cfg, cfg.mesh.world, err, sizeof err)) {
				/* Ulysses needs the rank's heads to divide by cp: the one rule */
				assert_int_equal(k, PAR_CP_A2A);
				assert_non_null(strstr(err, "does not divide"));
				printf("--   %-30s refused: %s\n", name, err);
				skipped++;
				continue;
			}
			r = test_verify(&cfg, NULL, 0);
			ran++;
			failed += !r.passed;
			gpt_tensor_name(&cfg.model, r.param_tensor, worst, sizeof worst);
			printf("%-4s %-30s loss %.2e  grad %.2e  param %.2e (%s)\n",
			       r.passed ? "ok" : "FAIL", name, r.loss_err, r.grad_err, r.param_err,
			       worst);
		}
	printf("cp verify table: %d cases ran, %d failed, %d skipped\n", ran, failed, skipped);
	if (!ran)
		fail_msg("PEMU_TEST_FILTER selects no case");
	assert_int_equal(failed, 0);
}

/* ------------------------------------------------------------------------------------ */
/* Volumes                                                                              */

/* Context parallelism's calls and bytes of op on device 0 of cfg's dry-run (bf16). */
static struct coll_stats cp_stats(struct run_cfg cfg, const char *op)
{
	struct run_out o;
	struct emu_cluster *c = test_dry(&cfg, &o, 0);
	struct coll_stats st;

	assert_int_equal(coll_stats_tag_get(emu_cluster_dev(c, 0), PAR_TRAFFIC_CP, op, &st), 0);
	run_free(&o);
	emu_cluster_free(c);
	return st;
}

/* Per layer and micro-batch, with |KV| = 2 b (s / cp) h / t elements at 2 bytes:
 *   p2p         3 (cp - 1) sends of |KV|: K, V forward (cp - 1), K, V and the dK, dV
 *               partial backward (2 (cp - 1))
 *   all_gather  2 all-gathers (forward, backward) of cp |KV| each, 1 reduce-scatter of
 *               cp |KV|
 *   a2a         5 all-to-alls, each moving the rank's rows of 3 h / t columns (q, k, v
 *               forward and their gradients backward) or h / t (out forward, and out and
 *               d out backward): 9 b (s / cp) h / t elements in all. */
static void test_volumes(void **state)
{
	const int b = 2, s = 256, h = 256, L = 2, tp = 2, mb = 2;

	(void)state;
	for (int cp = 2; cp <= 4; cp *= 2) {
		struct run_cfg cfg;
		uint64_t kv = 2ull * b * (s / cp) * h / tp * 2, n = (uint64_t)L * mb;
		struct coll_stats st;

		make_cfg(&cfg, 1, cp, tp, 1, PAR_CP_P2P);
		cfg.model.seq_len = s;
		cfg.model.hidden = h;
		cfg.model.ffn = 4 * h;
		cfg.model.num_layers = L;
		cfg.mbs = b;
		cfg.gbs = b * mb;
		cfg.steps = 1;
		st = cp_stats(cfg, "send");
		assert_int_equal(st.calls, n * 3 * (cp - 1));
		assert_int_equal(st.bytes, n * 3 * (cp - 1) * kv);
		assert_int_equal(cp_stats(cfg, "recv").bytes, n * 3 * (cp - 1) * kv);
		cfg.cp_comm = PAR_CP_ALL_GATHER;
		st = cp_stats(cfg, "all-gather");
		assert_int_equal(st.calls, n * 2);
		assert_int_equal(st.bytes, n * 2 * cp * kv);
		st = cp_stats(cfg, "reduce-scatter");
		assert_int_equal(st.calls, n);
		assert_int_equal(st.bytes, n * cp * kv);
		assert_int_equal(cp_stats(cfg, "send").calls, 0);
		cfg.cp_comm = PAR_CP_A2A;
		cfg.model.heads = 8; /* 4 a tensor-parallel rank: cp divides them */
		st = cp_stats(cfg, "all-to-all");
		assert_int_equal(st.calls, n * 5);
		assert_int_equal(st.bytes, n * 9 * kv / 2);
	}
}

/* ------------------------------------------------------------------------------------ */
/* Balance                                                                              */

/* The time device id spends in the memory-efficient attention's kernels. */
static int64_t attention_ns(const struct emu_cluster *c, int id)
{
	int64_t t = 0;

	for (size_t k = 0; k < trace_count(c, id); k++) {
		struct trace_op e;

		trace_op_get(c, id, k, &e);
		if (!strncmp(e.name, "attention.flash", 15))
			t += e.t1 - e.t0;
	}
	return t;
}

/* Every rank of the balanced ring computes as much attention (2 chunk pairs a step); in
 * the contiguous layout rank r computes its diagonal and the r blocks before it, so the
 * last rank computes about 2 cp - 1 times what the first does. The merges of the blocks'
 * outputs are not equal (a step whose block both query chunks see merges both) and are
 * not counted. Dry-run of a 4k sequence on cp 4. */
static void test_balance(void **state)
{
	int64_t t[2][4];

	(void)state;
	for (int contiguous = 0; contiguous < 2; contiguous++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;

		make_cfg(&cfg, 1, 4, 1, 1, PAR_CP_P2P);
		cfg.model = model_preset("gpt2-124m")->cfg;
		cfg.model.seq_len = 4096;
		cfg.flash = 1;
		cfg.mbs = 1;
		cfg.gbs = 1;
		cfg.steps = 1;
		cfg.cp_contiguous = contiguous;
		c = test_dry(&cfg, &o, 1);
		for (int r = 0; r < 4; r++)
			t[contiguous][r] = attention_ns(c, r);
		run_free(&o);
		emu_cluster_free(c);
	}
	printf("attention per rank: balanced %lld %lld %lld %lld ns; contiguous %lld %lld %lld "
	       "%lld ns\n",
	       (long long)t[0][0], (long long)t[0][1], (long long)t[0][2], (long long)t[0][3],
	       (long long)t[1][0], (long long)t[1][1], (long long)t[1][2], (long long)t[1][3]);
	for (int r = 1; r < 4; r++) {
		assert_true(t[0][r] == t[0][0]);
		assert_true(t[1][r] > t[1][r - 1]);
	}
	assert_true(t[1][3] > 4 * t[1][0]);
}

/* ------------------------------------------------------------------------------------ */
/* Broken and repeated                                                                  */

/* A dropped step of the ring (its first KV send), a dropped gather, a dropped
 * all-to-all: each fails verify; the unbroken runs pass. */
static void test_broken_fails(void **state)
{
	static const char *const op[] = {"send", "all-gather", "all-to-all"};

	(void)state;
	for (int k = 0; k < 3; k++) {
		struct run_cfg cfg;
		struct verify_result v;

		make_cfg(&cfg, 1, 2, 1, 1, (enum par_cp_comm)k);
		v = test_verify(&cfg, op[k], 0);
		assert_false(v.passed);
		assert_true(v.grad_err > 1e-3);
		v = test_verify(&cfg, NULL, 0);
		assert_true(v.passed);
	}
}

/* The same configuration on 1 and 2 host threads gives bitwise the same losses,
 * parameters and virtual times, for each comm type. */
static void test_deterministic(void **state)
{
	(void)state;
	for (int k = 0; k < 3; k++) {
		struct run_cfg cfg;

		make_cfg(&cfg, 2, 2, 2, 1, (enum par_cp_comm)k);
		cfg.sp = 1;
		test_same_on_threads(&cfg);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_positions),    cmocka_unit_test(test_verify_table),
		cmocka_unit_test(test_volumes),      cmocka_unit_test(test_balance),
		cmocka_unit_test(test_broken_fails), cmocka_unit_test(test_deterministic),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
