/* Oases (Li et al. 2023, arXiv 2305.16121): overlapped tensor parallelism (par/overlap.h)
 * and its recomputation (par/recompute.h) against the serial reference and the formulas of
 * docs/formulas.md:
 *   - the verify table: the paper's ablation (Oases's recomputation alone, the overlap
 *     with full recomputation, both; and the overlap alone) on tiny and moe-tiny with tp 2
 *     and 4, sequence parallelism on and off, dp 2 with ZeRO-1, and pp 2 (1F1B);
 *   - the tensor-parallel collectives a layer issues, by recomputation and overlap;
 *   - the schedule's timing: Megatron's order is compute + communication, Oases's the sum
 *     over its segments of max(compute, the collective in flight);
 *   - a dropped sub-batch collective fails verify; the runs are bitwise deterministic.
 *
 *   PEMU_TEST_FILTER=moe-tiny/tp4 build/tests/test_oases     table cases containing it
 *
 * Cases are named preset/layout/variant: "tiny/tp2/sp/oases", "moe-tiny/tp4/pp2/ovl-full".
 * PEMU_TEST_SCALE=small runs moe-tiny's cases of the full Oases variant only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "coll.h"
#include "common.h"
#include "presets.h"
#include "run/oases_plan.h"
#include "run/run.h"
#include "trace.h"
#include "verify.h"

static struct data corpus;

static void make_cfg(struct run_cfg *cfg, const char *preset, int dp, int tp, int pp)
{
	test_make_cfg(cfg, preset, dp, tp, pp, &corpus);
}

/* ------------------------------------------------------------------------------------ */
/* The verify table                                                                     */

static const struct layout {
	const char *name;
	int dp, tp, pp, sp, zero;
} layouts[] = {
	{"tp2", 1, 2, 1, 0, 0},           {"tp4", 1, 4, 1, 0, 0},
	{"tp2/sp", 1, 2, 1, 1, 0},        {"tp4/sp", 1, 4, 1, 1, 0},
	{"dp2/tp2/zero1", 2, 2, 1, 0, 1}, {"dp2/tp2/zero1/sp", 2, 2, 1, 1, 1},
	{"tp2/pp2", 1, 2, 2, 0, 0},       {"tp4/pp2/sp", 1, 4, 2, 1, 0},
};

static const struct variant {
	const char *name;
	enum par_overlap overlap;
	enum par_recompute recompute;
} variants[] = {
	{"rc-oases", PAR_OVERLAP_NONE, PAR_RECOMPUTE_OASES},
	{"ovl-full", PAR_OVERLAP_OASES, PAR_RECOMPUTE_FULL},
	{"oases", PAR_OVERLAP_OASES, PAR_RECOMPUTE_OASES},
	{"ovl", PAR_OVERLAP_OASES, PAR_RECOMPUTE_NONE},
};

/* Whether PEMU_TEST_FILTER (unset or empty: everything) selects the case name. */
static int selected(const char *name)
{
	const char *f = getenv("PEMU_TEST_FILTER");

	return !f || !*f || test_name_selected(name, f);
}

static void test_verify_table(void **state)
{
	static const char *const presets[] = {"tiny", "moe-tiny"};
	int ran = 0, failed = 0, skipped = 0;

	(void)state;
	for (size_t p = 0; p < 2; p++)
		for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++)
			for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
				const struct layout *lo = &layouts[l];
				struct run_cfg cfg;
				struct verify_result r;
				char name[64], worst[64];

				snprintf(name, sizeof name, "%s/%s/%s", presets[p], lo->name,
					 variants[v].name);
				if (!selected(name) || (test_skip_large() && p == 1 && v != 2)) {
					skipped++;
					continue;
				}
				make_cfg(&cfg, presets[p], lo->dp, lo->tp, lo->pp);
				cfg.mbs = 4; /* sub-batches of 2, as the plain table's */
				cfg.gbs = 16;
				cfg.sp = lo->sp;
				cfg.zero = lo->zero;
				cfg.tp_overlap = variants[v].overlap;
				cfg.recompute = variants[v].recompute;
				if (lo->pp > 1)
					cfg.model.num_layers = 4;
				r = test_verify(&cfg, NULL, 0);
				ran++;
				failed += !r.passed;
				gpt_tensor_name(&cfg.model, r.param_tensor, worst, sizeof worst);
				printf("%-4s %-34s loss %.2e  grad %.2e  param %.2e (%s)\n",
				       r.passed ? "ok" : "FAIL", name, r.loss_err, r.grad_err,
				       r.param_err, worst);
				if (cfg.model.num_experts > 0 && r.routes == 0) {
					printf("FAIL %s: no routing decision compared\n", name);
					failed++;
				}
			}
	printf("oases verify table: %d cases ran, %d failed, %d skipped\n", ran, failed, skipped);
	if (!ran)
		fail_msg("PEMU_TEST_FILTER selects no case");
	assert_int_equal(failed, 0);
}

/* ------------------------------------------------------------------------------------ */
/* Collectives per layer                                                                */

/* calls and bytes of op on device 0 of cfg's dry-run with L layers. */
static void count(struct run_cfg cfg, int L, const char *op, struct coll_stats *st)
{
	struct run_out o;
	struct emu_cluster *c;

	cfg.model.num_layers = L;
	c = test_dry(&cfg, &o, 0);
	coll_stats_get(emu_cluster_dev(c, 0), op, st);
	run_free(&o);
	emu_cluster_free(c);
}

/* Per layer and micro-batch, tensor parallelism issues 2 collectives forward and 2
 * backward (all-reduces; under sequence parallelism each is an all-gather and a
 * reduce-scatter); selective recomputation none again (4), full the forward's 2 again
 * (6), Oases's none (4). Under sequence parallelism Megatron's order gathers the 2
 * LayerNorm outputs again in backward: 2 all-gathers more, but with Oases's
 * recomputation or overlap, which keep them gathered.
 * The overlap cuts each in two calls of half the size. Counted as the difference of 4
 * layers and 2, on small (dense) with tp 4 and one micro-batch of 4. */
static void test_tp_collectives(void **state)
{
	static const enum par_recompute rec[] = {PAR_RECOMPUTE_NONE, PAR_RECOMPUTE_SELECTIVE,
						 PAR_RECOMPUTE_FULL, PAR_RECOMPUTE_OASES};
	static const uint64_t per_layer[] = {4, 4, 6, 4};

	(void)state;
	for (int sp = 0; sp <= 1; sp++)
		for (int ovl = 0; ovl <= 1; ovl++)
			for (int r = 0; r < 4; r++) {
				const char *ops[2] = {sp ? "all-gather" : "all-reduce",
						      "reduce-scatter"};
				struct run_cfg cfg;
				uint64_t bsh;

				make_cfg(&cfg, "small", 1, 4, 1);
				cfg.mbs = cfg.gbs = 4;
				cfg.steps = 1;
				cfg.sp = sp;
				cfg.tp_overlap = ovl ? PAR_OVERLAP_OASES : PAR_OVERLAP_NONE;
				cfg.recompute = rec[r];
				bsh = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len *
				      (uint64_t)cfg.model.hidden;
				for (int k = 0; k < 1 + sp; k++) {
					struct coll_stats a, b;
					/* Megatron's sp gathers ln1 and ln2 again in
					 * backward; Oases keeps them gathered */
					uint64_t n =
						per_layer[r] + (sp && !k && !ovl && r != 3 ? 2 : 0);

					count(cfg, 4, ops[k], &a);
					count(cfg, 2, ops[k], &b);
					if ((a.calls - b.calls) / 2 != n << ovl ||
					    (a.bytes - b.bytes) / 2 != n * bsh * 2)
						fail_msg(
							"sp %d overlap %d recompute %d: %s %llu "
							"calls, "
							"%llu bytes a layer; want %llu, %llu",
							sp, ovl, r, ops[k],
							(unsigned long long)(a.calls - b.calls) / 2,
							(unsigned long long)(a.bytes - b.bytes) / 2,
							(unsigned long long)(n << ovl),
							(unsigned long long)(n * bsh * 2));
				}
			}
}

/* ------------------------------------------------------------------------------------ */
/* The schedule in virtual time                                                         */

/* Compute-stream time of device 0 inside [t0, t1). */
static int64_t busy(const struct emu_cluster *c, int64_t t0, int64_t t1)
{
	int64_t b = 0;

	for (size_t k = 0; k < trace_count(c, 0); k++) {
		struct trace_op e;
		int64_t lo, hi;

		trace_op_get(c, 0, k, &e);
		if (e.stream != EMU_STREAM_COMPUTE)
			continue;
		lo = e.t0 > t0 ? e.t0 : t0;
		hi = e.t1 < t1 ? e.t1 : t1;
		b += hi > lo ? hi - lo : 0;
	}
	return b;
}

/* Device 0's all-reduces, in the order they ran, into ar (at most max). */
static size_t all_reduces(const struct emu_cluster *c, struct trace_op *ar, size_t max)
{
	size_t n = 0;

	for (size_t k = 0; k < trace_count(c, 0); k++) {
		struct trace_op e;

		trace_op_get(c, 0, k, &e);
		if (strcmp(e.name, "all-reduce"))
			continue;
		assert_true(n < max);
		/* recorded as they complete: keep them sorted by start */
		size_t i = n++;
		for (; i > 0 && ar[i - 1].t0 > e.t0; i--)
			ar[i] = ar[i - 1];
		ar[i] = e;
	}
	return n;
}

/* The compute kernel of device 0 that starts at t (NULL: none), into *e. */
static const char *kernel_at(const struct emu_cluster *c, int64_t t, struct trace_op *e)
{
	for (size_t k = 0; k < trace_count(c, 0); k++) {
		trace_op_get(c, 0, k, e);
		if (e->stream == EMU_STREAM_COMPUTE && e->t0 == t)
			return e->name;
	}
	return NULL;
}

/* On small's 4 layers widened to hidden 2048 (16 heads, MLP 8192, sequence 1024), tp 2,
 * one micro-batch of 4, in dry-run. Megatron's order waits for the forward's
 * all-reduces where they are issued; in backward it posts each column-parallel layer's
 * input-gradient all-reduce (QKV's, fc's, the output layer's: 2 a layer and 1) before
 * that layer's weight-gradient GEMM, which runs under it, and waits after: the step is
 * its compute plus its all-reduces less the compute under them, to the nanosecond; with
 * --no-async-tensor-model-parallel-allreduce (Megatron-LM before 2022) it waits for
 * every one, and nothing runs under them. Oases's posts them all: between two posted
 * all-reduces the
 * compute stream runs the segment in hand, then waits for the collective in flight, so
 * the second starts at max(first start + the segment's compute, first end): the layer
 * time is the sum over segments of max(compute, communication). One is in flight at a
 * time, compute runs under them, and the step is shorter. */
static void test_schedule_times(void **state)
{
	enum { MAX_AR = 256 };
	struct trace_op *ar = emu_xcalloc(MAX_AR, sizeof *ar);
	int64_t step[3];

	(void)state;
	for (int mode = 0; mode < 3; mode++) { /* Megatron's, Oases's, Megatron's before 2022 */
		int ovl = mode == 1, sync = mode == 2;
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;
		struct coll_stats st;
		size_t n, pairs = 0, late = 0;
		int64_t under = 0;

		make_cfg(&cfg, "small", 1, 2, 1);
		cfg.model.hidden = 2048;
		cfg.model.heads = 16;
		cfg.model.ffn = 8192;
		cfg.model.seq_len = 1024;
		cfg.mbs = cfg.gbs = 4;
		cfg.steps = 1;
		cfg.tp_overlap = ovl ? PAR_OVERLAP_OASES : PAR_OVERLAP_NONE;
		cfg.tp_sync_dgrad = sync;
		c = test_dry(&cfg, &o, 1);
		coll_stats_get(emu_cluster_dev(c, 0), "all-reduce", &st);
		step[mode] = o.step_ns[0];
		n = all_reduces(c, ar, MAX_AR);
		for (size_t k = 0; k < n; k++) {
			assert_true(k == 0 || ar[k].t0 >= ar[k - 1].t1); /* one in flight */
			under += busy(c, ar[k].t0, ar[k].t1);
		}
		for (size_t k = 0; !ovl && k < n; k++) {
			struct trace_op e;
			const char *kn = kernel_at(c, ar[k].t0, &e);

			if (!ar[k].posted) {
				assert_int_equal(busy(c, ar[k].t0, ar[k].t1), 0);
				continue;
			}
			late++;
			if (!kn || strcmp(kn, "linear.bwd_weight") ||
			    busy(c, ar[k].t0, ar[k].t1) !=
				    (e.t1 < ar[k].t1 ? e.t1 : ar[k].t1) - e.t0)
				fail_msg("the posted all-reduce %zu at %lld ns runs over %s, not "
					 "the "
					 "weight gradient's GEMM alone",
					 k, (long long)ar[k].t0, kn ? kn : "nothing");
		}
		if (!ovl) { /* --no-async-tensor-model-parallel-allreduce: every one waited */
			assert_int_equal(late, sync ? 0 : 2 * (size_t)cfg.model.num_layers + 1);
			assert_true(sync ? under == 0 : under > 0);
			assert_int_equal(o.step_ns[0], o.compute_ns[0] + st.time_ns - under);
		}
		for (size_t k = 1; ovl && k < n; k++) {
			int64_t seg, want;

			if (!ar[k - 1].posted || !ar[k].posted)
				continue;
			seg = busy(c, ar[k - 1].t0, ar[k].t0);
			want = ar[k - 1].t0 + seg > ar[k - 1].t1 ? ar[k - 1].t0 + seg
								 : ar[k - 1].t1;
			if (ar[k].t0 != want)
				fail_msg("all-reduce %zu starts at %lld ns, the schedule says %lld",
					 k, (long long)ar[k].t0, (long long)want);
			pairs++;
		}
		if (ovl) {
			/* 2 a layer and sub-batch, forward and backward: 16 posted in each */
			int L = cfg.model.num_layers;

			assert_int_equal(pairs, 2 * (4 * L - 1));
			assert_true(under > 0);
		}
		run_free(&o);
		emu_cluster_free(c);
	}
	if (step[1] >= step[0] || step[0] >= step[2])
		fail_msg("the steps are %lld ns (Oases's), %lld (Megatron's), %lld (Megatron's "
			 "before 2022): not shorter in that order",
			 (long long)step[1], (long long)step[0], (long long)step[2]);
	free(ar);
}

/* ------------------------------------------------------------------------------------ */
/* Mixed degrees                                                                        */

/* --tp-first K:T against the serial reference: tiny and moe-tiny (its first layer is
 * dense), the cut with and without sequence parallelism, with dp 2 and ZeRO-1 and 2, and
 * under the overlap and Oases's recomputation. */
static void test_tp_first_verify(void **state)
{
	static const struct {
		const char *preset;
		int dp, tp, K, T, sp, zero, oases, chunks;
	} cases[] = {
		{"tiny", 1, 4, 1, 2, 0, 0, 0, 0},     {"tiny", 1, 4, 2, 1, 0, 0, 0, 0},
		{"tiny", 1, 4, 1, 2, 1, 0, 0, 0},     {"tiny", 2, 4, 1, 2, 0, 1, 0, 0},
		{"tiny", 2, 4, 2, 2, 1, 2, 0, 0},     {"tiny", 1, 4, 1, 2, 0, 0, 1, 0},
		{"tiny", 1, 4, 2, 2, 1, 0, 1, 0},     {"moe-tiny", 1, 4, 1, 2, 0, 0, 0, 0},
		{"moe-tiny", 1, 4, 1, 2, 1, 0, 1, 0}, {"tiny", 1, 4, 2, 2, 0, 0, 0, 7},
	};
	int failed = 0;

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct run_cfg cfg;
		struct verify_result r;

		make_cfg(&cfg, cases[i].preset, cases[i].dp, cases[i].tp, 1);
		cfg.mbs = 4;
		cfg.gbs = 16;
		cfg.model.num_layers = 4;
		if (cases[i].K == 2 && !strcmp(cases[i].preset, "tiny"))
			cfg.model.num_layers = 2; /* all of them at T */
		cfg.tpf_layers = cases[i].K;
		cfg.tpf = cases[i].T;
		cfg.sp = cases[i].sp;
		cfg.zero = cases[i].zero;
		cfg.mlp_chunks = cases[i].chunks ? cases[i].chunks : 1;
		if (cases[i].chunks) /* chunk rows that differ between the two cuts */
			cfg.mbs = 8;
		if (cases[i].oases) {
			cfg.tp_overlap = PAR_OVERLAP_OASES;
			cfg.recompute = PAR_RECOMPUTE_OASES;
			cfg.mbs = 8;
			cfg.gbs = 32;
		}
		r = test_verify(&cfg, NULL, 0);
		printf("%-4s %s dp %d tp %d --tp-first %d:%d%s zero %d%s: loss %.2e grad %.2e "
		       "param %.2e\n",
		       r.passed ? "ok" : "FAIL", cases[i].preset, cases[i].dp, cases[i].tp,
		       cases[i].K, cases[i].T, cases[i].sp ? " sp" : "", cases[i].zero,
		       cases[i].oases ? " oases" : "", r.loss_err, r.grad_err, r.param_err);
		failed += !r.passed;
	}
	assert_int_equal(failed, 0);
}

/* What mixed degrees add, small at tp 4 with its first 2 of 4 layers at T = 2 and one
 * micro-batch of 4 (bf16 dry-run), against the same run without: per micro-batch the
 * cut's all-gather of b s h in forward and the embeddings' in backward (none under
 * sequence parallelism, whose rows are the same either way); the first layers'
 * collectives over half the batch (4 all-reduces a layer of b s h / 2 instead of b s h;
 * under sequence parallelism 4 all-gathers and reduce-scatters); and once a
 * step one all-reduce per first-layer tensor of its T-way shard over the merge group.
 * Full recomputation does not gather the parts again. */
static void test_tp_first_volume(void **state)
{
	(void)state;
	for (int sp = 0; sp <= 1; sp++) {
		struct coll_stats ag[3], ar[3];
		struct run_cfg cfg;
		uint64_t h, f, bsh, K = 2, T = 2, elems;

		for (int k = 0; k < 3; k++) { /* without, with, with full recomputation */
			struct run_out o;
			struct emu_cluster *c;

			make_cfg(&cfg, "small", 1, 4, 1);
			cfg.mbs = cfg.gbs = 4;
			cfg.steps = 1;
			cfg.sp = sp;
			cfg.tpf_layers = k ? (int)K : 0;
			cfg.tpf = k ? (int)T : 0;
			cfg.recompute = k == 2 ? PAR_RECOMPUTE_FULL : PAR_RECOMPUTE_NONE;
			c = test_dry(&cfg, &o, 0);
			coll_stats_get(emu_cluster_dev(c, 0), "all-gather", &ag[k]);
			coll_stats_get(emu_cluster_dev(c, 0), "all-reduce", &ar[k]);
			run_free(&o);
			emu_cluster_free(c);
		}
		h = (uint64_t)cfg.model.hidden;
		f = (uint64_t)cfg.model.ffn;
		bsh = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len * h;
		elems = (3 * h * h + 3 * h + h * h + f * h + f + h * f) / T + 6 * h;
		assert_int_equal(ag[1].calls - ag[0].calls, sp ? 0 : 2);
		/* recomputing the layers before the cut does not gather the parts again */
		if (!sp)
			assert_int_equal(ag[2].calls, ag[1].calls);
		if (sp) /* the first layers' 6 all-gathers a layer (2 in forward, the residual
			 * gradient's 2 and the LayerNorm outputs' 2 again in backward) gather
			 * half the batch */
			assert_int_equal(ag[0].bytes - ag[1].bytes, K * 6 * (bsh / 2) * 2);
		else
			assert_int_equal(ag[1].bytes - ag[0].bytes, 2 * bsh * 2);
		/* under sequence parallelism the 4 LayerNorm tensors a layer are summed over the
		 * whole tp group with or without: not in the difference */
		assert_int_equal(ar[1].calls - ar[0].calls, (sp ? 8 : 12) * K);
		if (sp) /* and none of the layers' collectives is an all-reduce */
			assert_int_equal(ar[1].bytes - ar[0].bytes, K * (elems - 4 * h) * 2);
		else
			assert_int_equal(ar[1].bytes + K * 4 * (bsh / 2) * 2 - ar[0].bytes,
					 K * elems * 2);
	}
}

/* ------------------------------------------------------------------------------------ */
/* The search                                                                           */

/* Random costs for 3 layers (6 blocks) and 3 degrees, the memory cap binding or not: the
 * chain's dynamic programme finds the cheapest of the 729 assignments whose memory units
 * fit, and the rounding the cheapest of its family (the first K layers at T, the rest at
 * the top degree), both exactly as enumeration does. */
static void test_chain_search(void **state)
{
	(void)state;
	for (uint64_t seed = 0; seed < 40; seed++) {
		struct oases_costs c;
		int d[6], fits = 0, K = -1, T = -1, rfits = 0;
		double best = 0, cost = 0, rbest = 0, rcost = 0;
		uint64_t x = 0;

		memset(&c, 0, sizeof c);
		c.layers = 3;
		c.ndeg = 3;
		c.micro = 1 + (int)(seed % 4);
		c.mem_cap = seed % 3 == 0 ? 1e9 : 50 + (double)(seed % 7) * 8;
		for (int k = 0; k < 3; k++)
			c.deg[k] = 1 << k;
		for (int b = 0; b < 2; b++)
			for (int k = 0; k < 3; k++) {
				struct oases_block *o = &c.blk[b][k];
				double *v[] = {&o->c, &o->m, &o->b, &o->r, &o->mb, &o->dp, &o->mem};

				for (size_t i = 0; i < sizeof v / sizeof *v; i++)
					*v[i] = 1 + 20 * (test_uniform(seed, x++) + 1);
			}
		for (int a = 0; a < 3; a++)
			for (int b = 0; b < 3; b++)
				c.edge[a][b] = a == b ? 0 : 5 * (test_uniform(seed, x++) + 1);
		for (int e = 0; e < 729; e++) {
			int u = 0, y = e;
			double v, mem;

			for (int i = 0; i < 6; i++, y /= 3) {
				d[i] = y % 3;
				u += oases_mem_units(&c, c.blk[i % 2][d[i]].mem);
			}
			v = oases_cost(&c, d, &mem);
			if (u <= OASES_MEM_UNITS && (!fits || v < best)) {
				fits = 1;
				best = v;
			}
		}
		/* the rounded family: blocks 0 .. 2K - 1 at degree t, the rest at the top */
		for (int t = 0; t < 3; t++)
			for (int k = 0; k <= 3; k++) {
				double v, mem;

				for (int i = 0; i < 6; i++)
					d[i] = i < 2 * k ? t : 2;
				v = oases_cost(&c, d, &mem);
				if (mem <= c.mem_cap && (!rfits || v < rbest)) {
					rfits = 1;
					rbest = v;
				}
			}
		assert_int_equal(oases_solve(&c, d, &cost), fits ? 0 : -1);
		assert_int_equal(oases_round(&c, &K, &T, &rcost), rfits ? 0 : -1);
		if (fits) {
			assert_true(fabs(cost - best) < 1e-9 * best);
			assert_true(fabs(oases_cost(&c, d, NULL) - best) < 1e-9 * best);
		}
		if (rfits) {
			double mem;

			assert_true(fabs(rcost - rbest) < 1e-9 * rbest);
			for (int i = 0; i < 6; i++) /* and the plan it names costs that */
				d[i] = i < 2 * K ? T : 2;
			assert_true(fabs(oases_cost(&c, d, &mem) - rbest) < 1e-9 * rbest);
			assert_true(mem <= c.mem_cap);
		}
	}
}

/* ------------------------------------------------------------------------------------ */
/* Broken and repeated                                                                  */

/* tp 2 under the overlap, forward: the embedding's all-reduce of sub-batch 1 (0) and 2
 * (1), then layer 0's attention output of sub-batch 1 (2); with sequence parallelism the
 * same as reduce-scatters. Dropping either fails verify. */
static void test_dropped_sub_batch_fails(void **state)
{
	struct run_cfg cfg;
	struct verify_result v;

	(void)state;
	make_cfg(&cfg, "tiny", 1, 2, 1);
	cfg.tp_overlap = PAR_OVERLAP_OASES;
	cfg.recompute = PAR_RECOMPUTE_OASES;
	v = test_verify(&cfg, "all-reduce", 2);
	assert_false(v.passed);
	assert_true(v.grad_err > 1e-2);
	cfg.sp = 1;
	v = test_verify(&cfg, "reduce-scatter", 2);
	assert_false(v.passed);
	assert_true(v.grad_err > 1e-2);
	v = test_verify(&cfg, NULL, 0);
	assert_true(v.passed);
}

/* The same configuration on 1 and 2 host threads gives bitwise the same losses,
 * parameters and virtual times. */
static void test_deterministic(void **state)
{
	struct run_cfg cfg;

	(void)state;
	make_cfg(&cfg, "moe-tiny", 2, 2, 2);
	cfg.model.num_layers = 4;
	cfg.sp = 1;
	cfg.tp_overlap = PAR_OVERLAP_OASES;
	cfg.recompute = PAR_RECOMPUTE_OASES;
	test_same_on_threads(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verify_table),
		cmocka_unit_test(test_tp_collectives),
		cmocka_unit_test(test_schedule_times),
		cmocka_unit_test(test_tp_first_verify),
		cmocka_unit_test(test_tp_first_volume),
		cmocka_unit_test(test_chain_search),
		cmocka_unit_test(test_dropped_sub_batch_fails),
		cmocka_unit_test(test_deterministic),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
