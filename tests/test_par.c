/* pemu's strategies against the serial reference (docs/formulas.md, Verification). The verify
 * matrix is one table of cases, in the manner of ggml's test-backend-ops (test_verify_table): every
 * combination of dp in {1, 2, 4}, tp in {1, 2, 4}, ZeRO stage 0 to 3 and sequence
 * parallelism on and off where tp > 1, and every pipeline schedule with pp in {2, 4} and
 * m in {pp, 2 pp, 4 pp} micro-batches, alone and with dp 2 x tp 2, on tiny and moe-tiny.
 * The loss of every step, every gradient of the first step and every parameter after 3
 * steps agree within the design's tolerances; a strategy that drops one all-reduce,
 * bucket or ZeRO-3 gather does not (test_broken_strategies_fail).
 *
 * A case is named by its preset and what it changes, degrees of 1 and sp off left out:
 * "tiny/zero0", "tiny/dp2/tp4/zero3/sp", "moe-tiny/pp4/zb-h2/m8" (pp, schedule, m),
 * "moe-tiny/pp4/zb-h2/m8/dp2tp2". Each case run prints one line: its name, the three
 * errors, ok or FAIL (and why); then how many cases ran and were skipped.
 *
 *   PEMU_TEST_FILTER=tiny/tp4 build/tests/test_par            names containing tiny/tp4
 *   PEMU_TEST_FILTER=moe-tiny/dp2,pp4/helix build/tests/test_par   containing either
 *
 * A substring ("tiny/tp4" also selects moe-tiny/tp4/...); a filter that selects no case
 * fails. The filter picks cases of the table only: the other tests always run.
 * PEMU_TEST_SCALE=small leaves out the pipeline cases with m = 4 pp. */
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
#include "mem.h"
#include "par/tp.h"
#include "presets.h"
#include "run/run.h"
#include "trace.h"
#include "verify.h"

static struct data corpus;

static void make_cfg(struct run_cfg *cfg, const char *preset, int dp, int tp, int zero)
{
	test_make_cfg(cfg, preset, dp, tp, 1, &corpus);
	cfg->zero = zero;
}

/* A fault plan for the parallel run (emu_cluster_set_fault), or none. */
static const char *fault_op;
static int fault_nth;

static struct verify_result verify(const struct run_cfg *cfg)
{
	return test_verify(cfg, fault_op, fault_nth);
}

/* ------------------------------------------------------------------------------------ */
/* The verify table                                                                     */

/* One case: a configuration run on the emulated cluster (2 nodes of 8 A100s) and compared
 * with runs it shares with other cases (struct vshared). */
struct vcase {
	char name[48];      /* "tiny/dp2/tp4/zero3/sp", "moe-tiny/pp4/zb-h2/m8/dp2tp2" */
	struct run_cfg cfg; /* the configuration checked */
	int params_vs_flat; /* the parameters against vcase_flat(cfg), the same dp x tp run
			     * without the pipeline, and not against the serial reference */
	int need_routes;    /* the routing decisions must have been compared (MoE) */
	int large;          /* left out under PEMU_TEST_SCALE=small */
};

#define VCASES_STRATEGY 120 /* 2 presets x 3 dp x (tp 1: 4 ZeRO; tp 2, 4: 4 ZeRO x sp 2) */
#define VCASES_PIPELINE 144 /* 2 presets x 2 pp x 3 m x (alone, dp 2 x tp 2) x 6 schedules */
#define VCASES_LARGE    48  /* of them, those with m = 4 pp */

static struct vcase vcases[VCASES_STRATEGY + VCASES_PIPELINE];
static int vcases_n;

static struct vcase *vcase_new(void)
{
	struct vcase *c;

	assert_true(vcases_n < (int)(sizeof vcases / sizeof *vcases));
	c = &vcases[vcases_n++];
	memset(c, 0, sizeof *c);
	return c;
}

/* Strategies: make_cfg's batch (4 micro-batches of 2 sequences, 3 steps) on dp x tp
 * devices with ZeRO stage zero and sequence parallelism sp, against the serial reference in
 * everything. On moe-tiny the routing decisions are compared too, and none may differ. */
static void vcase_strategy(const char *preset, int dp, int tp, int zero, int sp)
{
	struct vcase *c = vcase_new();
	char dps[16] = "", tps[16] = "";
	int n;

	make_cfg(&c->cfg, preset, dp, tp, zero);
	c->cfg.sp = sp;
	c->need_routes = c->cfg.model.num_experts > 0;
	if (dp > 1)
		snprintf(dps, sizeof dps, "/dp%d", dp);
	if (tp > 1)
		snprintf(tps, sizeof tps, "/tp%d", tp);
	n = snprintf(c->name, sizeof c->name, "%s%s%s/zero%d%s", preset, dps, tps, zero,
		     sp ? "/sp" : "");
	assert_true(n > 0 && n < (int)sizeof c->name);
}

/* Pipelines: schedule kind on pp stages with m micro-batches of 1 sequence a step (per
 * replica), alone or (both) with dp 2 x tp 2 and ZeRO-1, on the preset with 8 layers (so
 * that 4 stages of 2 chunks each hold one). Against the serial reference: the loss of every
 * step and every first-step gradient, and alone every parameter after 3 steps. With dp 2 x
 * tp 2 the parameters of these 8-layer models drift from the serial ones by 1-3e-4 after 3
 * steps (tensor parallelism's rounding, which Adam amplifies where an update nearly
 * cancels: the same error for every schedule and pp, and for pp = 1), so there they are
 * compared with the same dp x tp run without a pipeline, within the same 1e-4; the losses
 * and gradients then agree with that run too. No routing decision may differ from the
 * serial reference's. */
static void vcase_pipeline(const char *preset, int pp, int m, int both, enum sched_kind kind)
{
	struct vcase *c = vcase_new();
	int dp = both ? 2 : 1, tp = both ? 2 : 1, n;

	make_cfg(&c->cfg, preset, dp, tp, both); /* ZeRO-1 with dp 2 x tp 2 */
	c->cfg.model.num_layers = 8;
	c->cfg.mbs = 1;
	c->cfg.gbs = m * dp;
	c->cfg.opt.warmup = 10; /* pemu's default */
	mesh_init(&c->cfg.mesh, tp, 1, 1, dp, pp);
	c->cfg.schedule = kind;
	c->cfg.vpp = kind == SCHED_INTERLEAVED ? 2 : 1;
	c->params_vs_flat = both;
	c->large = m == 4 * pp;
	n = snprintf(c->name, sizeof c->name, "%s/pp%d/%s/m%d%s", preset, pp, sched_name(kind), m,
		     both ? "/dp2tp2" : "");
	assert_true(n > 0 && n < (int)sizeof c->name);
}

/* Fills vcases: the strategies, then the pipelines. */
static void vcases_build(void)
{
	static const char *const presets[] = {"tiny", "moe-tiny"};
	static const int degrees[] = {1, 2, 4};
	static const enum sched_kind kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED,
						SCHED_ZBH1,  SCHED_ZBH2, SCHED_HELIX};
	int large = 0;

	vcases_n = 0;
	for (int p = 0; p < 2; p++)
		for (int d = 0; d < 3; d++)
			for (int t = 0; t < 3; t++)
				for (int z = 0; z <= 3; z++)
					for (int sp = 0; sp <= (degrees[t] > 1); sp++)
						vcase_strategy(presets[p], degrees[d], degrees[t],
							       z, sp);
	assert_int_equal(vcases_n, VCASES_STRATEGY);
	for (int p = 0; p < 2; p++)
		for (int pp = 2; pp <= 4; pp += 2)
			for (int f = 1; f <= 4; f *= 2)
				for (int both = 0; both <= 1; both++)
					for (int k = 0; k < 6; k++)
						vcase_pipeline(presets[p], pp, f * pp, both,
							       kinds[k]);
	assert_int_equal(vcases_n, VCASES_STRATEGY + VCASES_PIPELINE);
	for (int i = 0; i < vcases_n; i++)
		large += vcases[i].large;
	assert_int_equal(large, VCASES_LARGE);
}

/* The run a params_vs_flat case is compared with: its configuration without the pipeline
 * (pp 1, and schedule and vpp as make_cfg leaves them), on dp x tp devices. */
static struct run_cfg vcase_flat(const struct run_cfg *cfg)
{
	struct run_cfg f = *cfg;

	mesh_init(&f.mesh, cfg->mesh.size[MESH_TP], 1, 1, cfg->mesh.size[MESH_DP], 1);
	f.schedule = SCHED_GPIPE;
	f.vpp = 0;
	return f;
}

/* A run that cases share, made once: the serial reference of a configuration, or a flat
 * run (vcase_flat). The 120 strategy cases share 2 references, the pipeline cases 10
 * references and 8 flat runs; each is freed once no case still to run needs it. */
struct vshared {
	int live;           /* out holds a result */
	int flat;           /* 0: the serial reference (one device); 1: a flat run */
	struct run_cfg cfg; /* what was run */
	struct run_out out; /* with its snapshot */
	char err[512];      /* why the run failed, or "" */
};

struct vcache {
	struct vshared runs[32]; /* at most this many live at once */
	int serial, flat_n;      /* serial references and flat runs made */
};

/* Whether a and b give the same shared run: for the serial reference, what run_reference
 * reads (the model, the batch, the optimizer, steps, seed, precision and data); for a flat
 * run, also the mesh and every strategy setting. The structs compared whole hold ints and
 * floats; equal bytes mean equal values, so a match is never wrong (at worst a run is made
 * twice). */
static int vshared_same(const struct run_cfg *a, const struct run_cfg *b, int flat)
{
	if (memcmp(&a->model, &b->model, sizeof a->model) ||
	    memcmp(&a->opt, &b->opt, sizeof a->opt) || a->mbs != b->mbs || a->gbs != b->gbs ||
	    a->steps != b->steps || a->seed != b->seed || a->prec != b->prec || a->data != b->data)
		return 0;
	if (!flat)
		return 1;
	return !memcmp(&a->mesh, &b->mesh, sizeof a->mesh) && a->zero == b->zero &&
	       a->sp == b->sp && a->schedule == b->schedule && a->vpp == b->vpp &&
	       a->recompute == b->recompute && a->flash == b->flash &&
	       a->mlp_chunks == b->mlp_chunks && a->bucket_bytes == b->bucket_bytes;
}

/* Whether case c is compared with the shared run s. */
static int vshared_serves(const struct vshared *s, const struct vcase *c)
{
	struct run_cfg f;

	if (!s->flat)
		return vshared_same(&s->cfg, &c->cfg, 0);
	if (!c->params_vs_flat)
		return 0;
	f = vcase_flat(&c->cfg);
	return vshared_same(&s->cfg, &f, 1);
}

/* The serial reference of case c (flat 0) or its flat run (flat 1), run now if no earlier
 * case made it. A failed run is kept with its report in err, and every case that needs it
 * fails with that. */
static const struct vshared *vcache_get(struct vcache *vc, const struct vcase *c, int flat)
{
	const int nruns = (int)(sizeof vc->runs / sizeof *vc->runs);
	struct emu_cluster *cl;
	struct vshared *s = NULL;

	for (int i = 0; i < nruns; i++)
		if (vc->runs[i].live && vc->runs[i].flat == flat && vshared_serves(&vc->runs[i], c))
			return &vc->runs[i];
	for (int i = 0; i < nruns && !s; i++)
		s = vc->runs[i].live ? NULL : &vc->runs[i];
	assert_non_null(s);
	s->live = 1;
	s->flat = flat;
	s->cfg = flat ? vcase_flat(&c->cfg) : c->cfg;
	s->err[0] = 0;
	run_alloc(&s->out, &s->cfg, 1);
	if (flat) {
		cl = test_cluster("dgx-a100", 1, s->cfg.mesh.world, 0, 0);
		if (run_parallel(cl, &s->cfg, &s->out))
			snprintf(s->err, sizeof s->err, "the run without the pipeline failed: %s",
				 emu_cluster_report(cl));
		vc->flat_n++;
	} else {
		cl = test_cluster("dgx-a100", 1, 1, 0, 0);
		if (run_reference(cl, &s->cfg, &s->out))
			snprintf(s->err, sizeof s->err, "the serial reference failed: %s",
				 emu_cluster_report(cl));
		vc->serial++;
	}
	emu_cluster_free(cl);
	return s;
}

/* Frees the shared runs that none of the cases from from on with sel[] set needs
 * (from = vcases_n: all of them). */
static void vcache_release(struct vcache *vc, int from, const char *sel)
{
	for (int i = 0; i < (int)(sizeof vc->runs / sizeof *vc->runs); i++) {
		struct vshared *s = &vc->runs[i];
		int needed = 0;

		for (int j = from; s->live && j < vcases_n && !needed; j++)
			needed = sel[j] && vshared_serves(s, &vcases[j]);
		if (s->live && !needed) {
			run_free(&s->out);
			s->live = 0;
		}
	}
}

/* Runs case c: v against the serial reference, vf against the flat run (params_vs_flat)
 * or a copy of v. 0, or -1 with why it could not be compared in why[n]. */
static int vcase_run(const struct vcase *c, struct vcache *vc, struct verify_result *v,
		     struct verify_result *vf, char *why, size_t n)
{
	const struct run_cfg *cfg = &c->cfg;
	const struct vshared *ref, *flat = NULL;
	struct emu_cluster *cl;
	struct run_out par;
	char err[256];
	int rc = 0;

	if (run_check(cfg, cfg->mesh.world, err, sizeof err)) {
		snprintf(why, n, "config refused: %s", err);
		return -1;
	}
	ref = vcache_get(vc, c, 0);
	if (c->params_vs_flat)
		flat = vcache_get(vc, c, 1);
	if (ref->err[0] || (flat && flat->err[0])) {
		snprintf(why, n, "%s", ref->err[0] ? ref->err : flat->err);
		return -1;
	}
	cl = test_cluster("dgx-a100", 2, cfg->mesh.world, 0, 0);
	run_alloc(&par, cfg, 1);
	if (run_parallel(cl, cfg, &par)) {
		snprintf(why, n, "the run failed: %s", emu_cluster_report(cl));
		rc = -1;
	} else {
		verify_compare(&ref->out, &par, cfg, v);
		*vf = *v;
		if (flat)
			verify_compare(&flat->out, &par, cfg, vf);
	}
	run_free(&par);
	emu_cluster_free(cl);
	return rc;
}

/* The checks of a case run: 1 if it passes, else 0 with the first thing wrong in why[n].
 * Against the serial reference the loss of every step, every first-step gradient and no
 * routing flip; the parameters after the last step against it, or with params_vs_flat all
 * three against the flat run; with need_routes, routing decisions compared at all. Each
 * within verify's tolerances, and NaN fails. */
static int vcase_passes(const struct vcase *c, const struct verify_result *v,
			const struct verify_result *vf, char *why, size_t n)
{
	why[0] = 0;
	if (!(v->loss_err <= v->loss_tol))
		snprintf(why, n, "the loss of step %d", v->loss_step);
	else if (!(v->grad_err <= v->grad_tol))
		snprintf(why, n, "the gradient of tensor %d", v->grad_tensor);
	else if (c->params_vs_flat && !vf->passed)
		snprintf(why, n,
			 "against the run without the pipeline: loss %.2g (step %d), grad %.2g "
			 "(tensor %d), param %.2g (tensor %d)",
			 vf->loss_err, vf->loss_step, vf->grad_err, vf->grad_tensor, vf->param_err,
			 vf->param_tensor);
	else if (!c->params_vs_flat && !(v->param_err <= v->param_tol))
		snprintf(why, n, "the parameters of tensor %d", v->param_tensor);
	else if (v->route_flips)
		snprintf(why, n,
			 "%zu of %zu routing decisions differ, the first at step %d, layer %d, "
			 "token %d",
			 v->route_flips, v->routes, v->flip_step, v->flip_layer, v->flip_token);
	else if (c->need_routes && !v->routes)
		snprintf(why, n, "no routing decisions compared");
	return !why[0];
}

/* Every case of the table that PEMU_TEST_FILTER and PEMU_TEST_SCALE select, one line each;
 * fails at the end, naming the first failed case, if any failed. */
static void test_verify_table(void **state)
{
	const char *filter = getenv("PEMU_TEST_FILTER");
	int small = test_skip_large(), selected = 0, by_filter = 0, by_scale = 0, failed = 0;
	char sel[VCASES_STRATEGY + VCASES_PIPELINE];
	const char *first = NULL;
	struct vcache *vc;

	(void)state;
	if (filter && !*filter)
		filter = NULL;
	vcases_build();
	for (int i = 0; i < vcases_n; i++) {
		sel[i] = 0;
		if (filter && !test_name_selected(vcases[i].name, filter))
			by_filter++;
		else if (small && vcases[i].large)
			by_scale++;
		else
			sel[i] = 1;
		selected += sel[i];
	}
	printf("verify table: %d of %d cases to run, %d skipped (%d by PEMU_TEST_FILTER, %d by "
	       "PEMU_TEST_SCALE=small)\n",
	       selected, vcases_n, by_filter + by_scale, by_filter, by_scale);
	fflush(stdout);
	if (filter && !selected)
		fail_msg("PEMU_TEST_FILTER=%s selects none of the %d cases%s", filter, vcases_n,
			 by_scale ? " that run under PEMU_TEST_SCALE=small" : "");
	if (!filter)
		assert_int_equal(selected, vcases_n - (small ? VCASES_LARGE : 0));
	vc = calloc(1, sizeof *vc);
	assert_non_null(vc);
	for (int i = 0; i < vcases_n; i++) {
		const struct vcase *c = &vcases[i];
		struct verify_result v, vf;
		char why[768];
		int ok;

		if (!sel[i])
			continue;
		if (vcase_run(c, vc, &v, &vf, why, sizeof why)) {
			ok = 0;
			printf("FAIL %-36s %s\n", c->name, why);
		} else {
			ok = vcase_passes(c, &v, &vf, why, sizeof why);
			printf("%-4s %-36s loss %.2e  grad %.2e  param %.2e%s%s%s\n",
			       ok ? "ok" : "FAIL", c->name, v.loss_err, v.grad_err,
			       c->params_vs_flat ? vf.param_err : v.param_err,
			       c->params_vs_flat ? " (vs no pipeline)" : "", ok ? "" : ": ", why);
		}
		fflush(stdout);
		if (!ok && !failed++)
			first = c->name;
		vcache_release(vc, i + 1, sel);
	}
	printf("verify table: %d cases ran, %d failed; %d serial references and %d runs "
	       "without the pipeline made\n",
	       selected, failed, vc->serial, vc->flat_n);
	fflush(stdout);
	vcache_release(vc, vcases_n, sel);
	free(vc);
	if (failed)
		fail_msg("%d of the %d cases run failed, the first %s", failed, selected, first);
}

/* Leaving out one collective, the tensor-parallel all-reduce of layer 0's MLP output or
 * the first data-parallel gradient bucket's, or ZeRO-3's gather of layer 0, is a wrong
 * strategy: verify must see it. The fault plan (emu_cluster_set_fault) leaves out a
 * device's nth call of a collective, counted in the order the strategy makes them. */
static void test_broken_strategies_fail(void **state)
{
	struct run_cfg cfg;
	struct verify_result v;

	(void)state;
	/* tp 2, forward: the embedding's all-reduce (0), layer 0's attention output (1),
	 * its MLP output (2) */
	make_cfg(&cfg, "tiny", 1, 2, 0);
	fault_op = "all-reduce";
	fault_nth = 2;
	v = verify(&cfg);
	assert_false(v.passed);
	assert_true(v.loss_err > v.loss_tol); /* one micro-batch of the first step's four */
	assert_true(v.grad_err > 1e-2);
	/* dp 2: the first all-reduce is the first bucket's, in the last micro-batch of step 1 */
	make_cfg(&cfg, "tiny", 2, 1, 0);
	fault_nth = 0;
	v = verify(&cfg);
	assert_false(v.passed);
	assert_true(v.grad_err > 1e-2);
	/* ZeRO-3 gathers the embeddings (0), then layer 0 (1): read as ZeRO-3 left it between
	 * uses, NaN outside this rank's chunk */
	make_cfg(&cfg, "tiny", 2, 1, 3);
	fault_op = "all-gather";
	fault_nth = 1;
	v = verify(&cfg);
	fault_op = NULL;
	assert_false(v.passed);
	assert_true(isnan(v.loss_err));
	assert_int_equal(v.loss_step, 0);
	/* A collective of the last step left out, which no loss sees: ZeRO-1's last
	 * all-gather of updated weights (only the parameters differ, and no gradient
	 * difference excuses them as rounding), and tp 2's last backward all-reduce before
	 * the gradient norm's (the last step's gradients differ, by their own size) */
	for (int k = 0; k < 2; k++) {
		struct run_cfg dry_cfg;
		struct run_out o;
		struct emu_cluster *c;
		struct coll_stats st;
		const char *op = k ? "all-reduce" : "all-gather";

		make_cfg(&cfg, "tiny", k ? 1 : 2, k ? 2 : 1, k ? 0 : 1);
		dry_cfg = cfg; /* in dry-run, at fp32 for the same buckets */
		dry_cfg.data = NULL;
		c = test_cluster("dgx-a100", 1, 2, 1, 0);
		run_alloc(&o, &dry_cfg, 0);
		if (run_parallel(c, &dry_cfg, &o))
			fail_msg("dry run failed: %s", emu_cluster_report(c));
		coll_stats_get(emu_cluster_dev(c, 0), op, &st);
		run_free(&o);
		emu_cluster_free(c);
		fault_op = op;
		fault_nth = (int)st.calls - 1 - k;
		v = verify(&cfg);
		fault_op = NULL;
		assert_false(v.passed);
		assert_true(v.loss_err <= v.loss_tol && v.grad_err <= v.grad_tol);
		if (k)
			assert_true(v.later_err > 1e-2 && v.later_step == cfg.steps - 1);
		else
			assert_true(v.param_err > 1e-2);
	}
	/* and the unbroken one passes; what it leaves out as noise-driven is every key bias
	 * (L h entries, gradient zero in exact arithmetic) and a few entries whose first
	 * gradient happens to be tiny, under 0.1% of the model */
	make_cfg(&cfg, "tiny", 2, 2, 1);
	v = verify(&cfg);
	assert_true(v.passed);
	assert_int_equal(v.param_entries, gpt_num_params(&cfg.model));
	if (v.noise_params < (size_t)(cfg.model.num_layers * cfg.model.hidden) ||
	    v.noise_params > (size_t)(cfg.model.num_layers * cfg.model.hidden) +
				     gpt_num_params(&cfg.model) / 1000)
		fail_msg("%zu entries left out as noise-driven", v.noise_params);
}

/* A routing flip is found by comparing the decisions themselves: moe-tiny's 3 steps
 * (4 micro-batches each, 2 layers of which 1 is MoE, 64 tokens, top-2) agree with the
 * reference's; one decision changed by hand is reported where it is. */
static void test_routing_flip_detected(void **state)
{
	struct emu_cluster *one = test_cluster("dgx-a100", 1, 1, 0, 0);
	struct emu_cluster *many = test_cluster("dgx-a100", 1, 4, 0, 0);
	struct run_cfg cfg;
	struct run_out ref, par;
	struct verify_result v;
	size_t per_layer, e, nonzero = 0;
	int moe_layer = -1;

	(void)state;
	make_cfg(&cfg, "moe-tiny", 2, 2, 0);
	run_alloc(&ref, &cfg, 1);
	run_alloc(&par, &cfg, 1);
	assert_int_equal(run_reference(one, &cfg, &ref), 0);
	assert_int_equal(run_parallel(many, &cfg, &par), 0);
	verify_compare(&ref, &par, &cfg, &v);
	assert_true(v.passed);
	assert_int_equal(v.route_flips, 0);
	for (int l = 0; l < cfg.model.num_layers; l++)
		if (gpt_layer_is_moe(&cfg.model, l))
			moe_layer = moe_layer < 0 ? l : moe_layer;
	assert_true(moe_layer >= 0);
	per_layer = (size_t)cfg.mbs * cfg.model.seq_len * cfg.model.moe_top_k;
	assert_int_equal(ref.route_mb, per_layer * cfg.model.num_layers);
	for (e = 0; e < ref.route_mb * 12; e++)
		nonzero += ref.routes[e] != 0;
	assert_true(nonzero > 0);
	/* step 2, its third micro-batch, the MoE layer, token 5's second choice */
	e = (size_t)(1 * 4 + 2) * ref.route_mb + (size_t)moe_layer * per_layer + 5 * 2 + 1;
	par.routes[e] = par.routes[e] == 0 ? 1 : 0;
	verify_compare(&ref, &par, &cfg, &v);
	assert_int_equal(v.route_flips, 1);
	assert_int_equal(v.flip_step, 1);
	assert_int_equal(v.flip_layer, moe_layer);
	assert_int_equal(v.flip_token, 5);
	run_free(&ref);
	run_free(&par);
	emu_cluster_free(one);
	emu_cluster_free(many);
}

/* cfg executed on a node of A100s into o (run_free it); case k named if it fails. */
static void run_exec(struct run_cfg *cfg, struct run_out *o, size_t k)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, cfg->mesh.world, 0, 0);

	run_alloc(o, cfg, 1);
	if (run_parallel(c, cfg, o))
		fail_msg("case %zu: %s", k, emu_cluster_report(c));
	emu_cluster_free(c);
}

/* Two runs of cfg's model: bitwise the same losses, first gradients and weights. */
static void assert_same_run(const struct run_cfg *cfg, const struct run_out *a,
			    const struct run_out *b)
{
	assert_memory_equal(a->loss, b->loss, sizeof(float) * (size_t)cfg->steps);
	for (int i = 0; i < b->np; i++) {
		size_t n = gpt_tensor_numel(&cfg->model, i) * sizeof(float);

		assert_memory_equal(a->grad0[i], b->grad0[i], n);
		assert_memory_equal(a->params[i], b->params[i], n);
	}
}

/* Recomputation changes when activations are computed, not what they are: none,
 * selective, full and Oases's give bitwise the same losses, gradients and weights (with
 * tp, sp and MoE, and in a pipeline). In dry-run on gpt2-124m, selective saves exactly
 * the attention scores (L b a s^2 at 2 bytes; no dropout here), full keeps less than
 * selective, and full pays one more forward of the layers; Oases's sits between. */
static struct emu_cluster *dry(struct run_cfg *cfg, struct run_out *o);

static void test_recompute(void **state)
{
	struct run_out o[4];
	struct emu_cluster *c;
	uint64_t act[4];
	int64_t comp[4];

	(void)state;
	for (int pipe = 0; pipe <= 1; pipe++) {
		for (int r = 0; r < 4; r++) {
			struct run_cfg cfg;

			make_cfg(&cfg, "moe-tiny", 2, 2, 0);
			cfg.sp = 1;
			cfg.recompute = r;
			if (pipe) {
				mesh_init(&cfg.mesh, 2, 1, 1, 1, 2);
				cfg.schedule = SCHED_ZBH1;
				cfg.vpp = 1;
			}
			run_exec(&cfg, &o[r], (size_t)r);
			if (r > 0)
				assert_same_run(&cfg, &o[r], &o[0]);
		}
		for (int r = 0; r < 4; r++)
			run_free(&o[r]);
	}
	for (int r = 0; r < 4; r++) {
		struct run_cfg cfg;

		make_cfg(&cfg, "gpt2-124m", 1, 1, 0);
		cfg.model.hidden_dropout = cfg.model.attention_dropout = 0; /* the preset's 0.1 */
		cfg.mbs = cfg.gbs = 1;
		cfg.steps = 1;
		cfg.recompute = r;
		c = dry(&cfg, &o[r]);
		act[r] = mem_peak_bytes(emu_cluster_dev(c, 0), MEM_ACT);
		comp[r] = o[r].compute_ns[0];
		run_free(&o[r]);
		emu_cluster_free(c);
	}
	{
		struct run_cfg cfg;
		uint64_t scores;

		make_cfg(&cfg, "gpt2-124m", 1, 1, 0);
		scores = (uint64_t)cfg.model.num_layers * (uint64_t)cfg.model.heads *
			 (uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.seq_len * 2;
		/* none live at the peak, forward's end, where the logits at the activations'
		 * precision and Megatron's cross-entropy's fp32 copy are (more than the one
		 * layer's scores live at a time in the recomputed backward) */
		assert_int_equal(act[0] - act[1], scores);
	}
	assert_true(act[2] < act[1]);
	assert_true(comp[1] > comp[0] && comp[2] > comp[1]);
	/* Oases's keeps res2 as well as the layer's output, (b s h) a layer more than full
	 * recomputation (all of them at the peak, forward's end, as above), and runs neither
	 * proj nor fc2 again: 2 b s h (h + f) FLOPs a layer less than full, 2 b s h f + 2 b s
	 * h h more than none */
	{
		struct run_cfg cfg;
		uint64_t bsh;

		make_cfg(&cfg, "gpt2-124m", 1, 1, 0);
		bsh = (uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.hidden * 2;
		assert_int_equal(act[3] - act[2], bsh * (uint64_t)cfg.model.num_layers);
		assert_true(comp[3] > comp[0] && comp[3] < comp[2]);
	}
}

/* Activation memory a layer (Korthikanti et al. 2022, arXiv 2205.05198, Table 2), 2-byte
 * activations and 1-byte dropout masks (gpt2-124m, Megatron's dropouts), on one
 * micro-batch in dry-run, as the difference of 4 layers and 2 over 2, exactly:
 *
 *                      no recomputation                 selective
 *   no parallelism     s b h (34 + 5 a s / h)           34 s b h
 *   tp t               s b h (10 + 24/t + 5 a s / h t)  s b h (10 + 24/t)
 *   tp t, sp           s b h / t (34 + 5 a s / h)       34 s b h / t
 *
 * plus the LayerNorms' statistics, which the paper leaves out: a mean and a reciprocal
 * deviation a row of each of the 2, 8 s b bytes (over t under sp). Under sequence
 * parallelism a LayerNorm output is kept as this rank's rows and gathered again in
 * backward, as Megatron does (section 4.2.2): keeping it gathered would add 4 s b h (1 -
 * 1/t). */
static void test_activation_formula(void **state)
{
	static const struct {
		int t, sp;
	} cuts[] = {{1, 0}, {4, 0}, {4, 1}};

	(void)state;
	for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++)
		for (int sel = 0; sel <= 1; sel++) {
			uint64_t act[2];
			double s, b, h, a, t = cuts[k].t, want;

			for (int i = 0; i < 2; i++) {
				struct run_cfg cfg;
				struct run_out o;
				struct emu_cluster *c;

				make_cfg(&cfg, "gpt2-124m", 1, cuts[k].t, 0);
				cfg.model.vocab = 50304; /* padded, as Megatron pads it */
				cfg.sp = cuts[k].sp;
				cfg.model.num_layers = 2 + 2 * i;
				cfg.mbs = cfg.gbs = 1;
				cfg.steps = 1;
				cfg.recompute = sel ? PAR_RECOMPUTE_SELECTIVE : PAR_RECOMPUTE_NONE;
				c = dry(&cfg, &o);
				act[i] = mem_peak_bytes(emu_cluster_dev(c, 0), MEM_ACT);
				s = cfg.model.seq_len;
				b = cfg.mbs;
				h = cfg.model.hidden;
				a = cfg.model.heads;
				run_free(&o);
				emu_cluster_free(c);
			}
			if (t == 1)
				want = s * b * h * (34 + (sel ? 0 : 5 * a * s / h));
			else if (!cuts[k].sp)
				want = s * b * h * (10 + 24 / t + (sel ? 0 : 5 * a * s / (h * t)));
			else
				want = s * b * h / t * (34 + (sel ? 0 : 5 * a * s / h));
			want += 8 * s * b / (cuts[k].sp ? t : 1);
			if ((double)(act[1] - act[0]) / 2 != want)
				fail_msg("tp %d%s, %s recomputation: %.0f bytes a layer, the "
					 "formula "
					 "%.0f",
					 cuts[k].t, cuts[k].sp ? " sp" : "",
					 sel ? "selective" : "no", (double)(act[1] - act[0]) / 2,
					 want);
		}
}

/* HelixPipe's chunked MLP keeps none of the MLP for backward: on gpt2-124m in dry-run it
 * saves exactly the fc and fc.gelu activations of every layer (2 b s f at 2 bytes each),
 * costs one more fc forward; and verify passes with it, alone and in HelixPipe. */
static void test_mlp_chunks(void **state)
{
	uint64_t act[2];
	int64_t comp[2];

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;

		make_cfg(&cfg, "gpt2-124m", 1, 1, 0);
		cfg.mbs = cfg.gbs = 1;
		cfg.steps = 1;
		cfg.mlp_chunks = i ? 4 : 1;
		c = dry(&cfg, &o);
		act[i] = mem_peak_bytes(emu_cluster_dev(c, 0), MEM_ACT);
		comp[i] = o.compute_ns[0];
		run_free(&o);
		emu_cluster_free(c);
		if (i) {
			uint64_t want = (uint64_t)cfg.model.num_layers * 2 *
					(uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.ffn * 2;

			assert_int_equal(act[0] - act[1], want);
			assert_true(comp[1] > comp[0]);
		}
	}
	for (int helix = 0; helix <= 1; helix++) {
		struct run_cfg cfg;
		struct verify_result v;

		make_cfg(&cfg, "tiny", 1, 2, 0);
		cfg.mlp_chunks = 3;
		cfg.sp = 1;
		if (helix) {
			cfg.model.num_layers = 4;
			mesh_init(&cfg.mesh, 2, 1, 1, 1, 2);
			cfg.schedule = SCHED_HELIX;
			cfg.vpp = 1;
			cfg.recompute = PAR_RECOMPUTE_FULL;
		}
		v = verify(&cfg);
		if (!v.passed)
			fail_msg("chunked MLP%s: loss %.2g, grad %.2g, param %.2g",
				 helix ? " in helix" : "", v.loss_err, v.grad_err, v.param_err);
	}
}

/* Determinism (docs/architecture.md, Determinism) with pipelines: the same config twice gives
 * bitwise the same losses, weights, virtual step times and Chrome trace, for HelixPipe's crossing
 * messages and ZB-H2 with tp 2 and sp. */
static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *buf;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	buf = malloc(*n + 1);
	assert_int_equal(fread(buf, 1, *n, f), *n);
	fclose(f);
	return buf;
}

static void test_pipeline_determinism(void **state)
{
	static const enum sched_kind kinds[] = {SCHED_HELIX, SCHED_ZBH2};

	(void)state;
	for (int k = 0; k < 2; k++) {
		struct run_out o[2];
		char *tr[2], path[64];
		size_t n[2];
		struct run_cfg cfg;

		make_cfg(&cfg, "moe-tiny", 1, 2, 0);
		cfg.model.num_layers = 4;
		cfg.sp = 1;
		mesh_init(&cfg.mesh, 2, 1, 1, 1, 2);
		cfg.schedule = kinds[k];
		cfg.vpp = 1;
		for (int r = 0; r < 2; r++) {
			struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 1);

			run_alloc(&o[r], &cfg, 1);
			if (run_parallel(c, &cfg, &o[r]))
				fail_msg("%s: %s", sched_name(kinds[k]), emu_cluster_report(c));
			snprintf(path, sizeof path, "build/test_pipe_trace_%d.json", r);
			assert_int_equal(trace_write_json(c, path), 0);
			tr[r] = slurp(path, &n[r]);
			emu_cluster_free(c);
		}
		assert_memory_equal(o[0].loss, o[1].loss, sizeof(float) * (size_t)cfg.steps);
		assert_memory_equal(o[0].step_ns, o[1].step_ns,
				    sizeof(int64_t) * (size_t)cfg.steps);
		for (int i = 0; i < o[0].np; i++)
			assert_memory_equal(o[0].params[i], o[1].params[i],
					    gpt_tensor_numel(&cfg.model, i) * sizeof(float));
		assert_int_equal(n[0], n[1]);
		assert_memory_equal(tr[0], tr[1], n[0]);
		for (int r = 0; r < 2; r++) {
			free(tr[r]);
			run_free(&o[r]);
		}
	}
}

/* Runs cfg in dry-run on a dgx-a100 cluster big enough for its mesh; the caller reads
 * device 0's statistics and frees the cluster. */
static struct emu_cluster *dry(struct run_cfg *cfg, struct run_out *o)
{
	return test_dry(cfg, o, 0);
}

/* Sum of the elements of the serial model's tensors [i0, i1). */
static double numel(const struct gpt_config *m, int i0, int i1)
{
	double n = 0;

	for (int i = i0; i < i1; i++)
		n += (double)gpt_tensor_numel(m, i);
	return n;
}

/* ZeRO's memory (docs/formulas.md, bf16 model: 2 + 2 + 12 bytes a parameter): stage 0 keeps
 * 16 Psi on every device, stage 1 4 Psi + 12 Psi / N, stage 2 2 Psi + 14 Psi / N, stage
 * 3 16 Psi / N, in the param, grad and optim categories. Stages 0-2 move 2 Psi per
 * device each step (all-reduce, or reduce-scatter + all-gather: 2 (N-1)/N Psi 2-byte
 * elements sent by each device), stage 3 3 Psi (two gathers and a reduce-scatter).
 * Flat buffers pad each parameter to a multiple of N elements, so the figures hold within
 * that padding (at most N elements a tensor). What stages 2-3 hold only while in use
 * (gradient buckets, gathered units) is charged as comm memory, within the working set
 * par/dp.h describes. With fp32 main gradients (Megatron-LM's bf16 default) a gradient
 * takes 4 bytes, in memory and on the wire: the distributed optimizer (stage 1) holds
 * Megatron's 6 + 12 / N bytes a parameter (REFERENCES.md), and stage 0 sends 4 Psi. */
static void test_zero_memory_and_volume(void **state)
{
	(void)state;
	for (int i = 0; i < 8; i++) {
		int zero = i % 4, fp32_grads = i / 4, gb = fp32_grads ? 4 : 2;
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;
		struct emu_dev *d;
		const int N = 4;
		const double bucket = 25e6;
		double psi, pad, emb, layer, want, got, sent, want_sent, comm, comm_max;

		make_cfg(&cfg, "gpt2-124m", N, 1, zero);
		cfg.mbs = 1;
		cfg.gbs = N;
		cfg.steps = 1;
		cfg.bucket_bytes = (uint64_t)bucket;
		cfg.fp32_grads = fp32_grads;
		c = dry(&cfg, &o);
		d = emu_cluster_dev(c, 0);
		psi = (double)gpt_num_params(&cfg.model);
		pad = (double)gpt_num_tensors(&cfg.model) * N;
		want = 2 * psi / (zero >= 3 ? N : 1);
		got = (double)mem_peak_bytes(d, MEM_PARAM);
		if (fabs(got - want) > 2 * pad)
			fail_msg("ZeRO %d: param %.6g bytes, want %.6g", zero, got, want);
		want = gb * psi / (zero >= 2 ? N : 1);
		got = (double)mem_peak_bytes(d, MEM_GRAD);
		if (fabs(got - want) > gb * pad)
			fail_msg("ZeRO %d: grad %.6g bytes, want %.6g", zero, got, want);
		want = 12 * psi / (zero >= 1 ? N : 1);
		got = (double)mem_peak_bytes(d, MEM_OPTIM);
		if (fabs(got - want) > 12 * pad)
			fail_msg("ZeRO %d: optim %.6g bytes, want %.6g", zero, got, want);
		if (zero == 1) { /* all three: Megatron's distributed optimizer */
			want = (gb + 2 + 12.0 / N) * psi;
			got = (double)(mem_peak_bytes(d, MEM_PARAM) + mem_peak_bytes(d, MEM_GRAD) +
				       mem_peak_bytes(d, MEM_OPTIM));
			if (fabs(got - want) > 16 * pad)
				fail_msg("ZeRO 1, %d-byte gradients: %.6g bytes, want %.6g", gb,
					 got, want);
		}
		/* the transients: stage 2 the wte bucket (the embeddings and at most a bucket
		 * more) and two others, a bucket being under the bucket size plus one layer;
		 * stage 3 the embeddings and two layers, as gathered weights and as
		 * gradients */
		emb = numel(&cfg.model, 0, 2);
		layer = numel(&cfg.model, 2, 2 + LP_N);
		comm = (double)mem_peak_bytes(d, MEM_COMM);
		comm_max = zero == 2   ? gb * (emb + 3 * (bucket / 2 + layer))
			   : zero == 3 ? (2 + gb) * (emb + 2 * layer)
				       : 0;
		if (comm > comm_max + gb * pad || (zero >= 2 && comm < gb * emb))
			fail_msg("ZeRO %d: %.6g bytes of transient buffers, expected at least "
				 "%.6g and at most %.6g",
				 zero, comm, gb * emb, comm_max);
		/* the gradients' reduction (an all-reduce, twice a reduce-scatter's bytes) at
		 * gb bytes an element, the weights' gathers at 2 */
		sent = (double)coll_link_bytes(d, TOPO_LINK_INTRA);
		want_sent = (double)(N - 1) / N * psi *
			    (zero == 0   ? 2.0 * gb
			     : zero == 3 ? 2 * 2.0 + gb
					 : 2.0 + gb);
		if (fabs(sent / want_sent - 1) > 1e-3)
			fail_msg("ZeRO %d, %d-byte gradients: device 0 sent %.6g bytes, want %.6g",
				 zero, gb, sent, want_sent);
		run_free(&o);
		emu_cluster_free(c);
	}
}

/* Megatron TP: 4 all-reduces of b s h per layer per micro-batch (2 forward, 2 backward),
 * plus, outside the layers, the vocab-parallel embedding (b s h), the final layernorm's
 * input gradient (b s h) and the cross-entropy's: by default (Megatron's unfused) the row
 * max (b s), then the target logits and the sums (b s each); fused (native) the last two
 * in one all-reduce (2 b s); Transformer Engine's none, but one all-gather of every rank's
 * (max, sum, target logit) (3 b s t); the cross-entropy's in fp32. */
static void test_tp_volume(void **state)
{
	static const enum ce_impl impls[] = {CE_UNFUSED, CE_NATIVE, CE_TE};

	(void)state;
	for (size_t i = 0; i < sizeof impls / sizeof *impls; i++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;
		struct coll_stats st, ag;
		uint64_t bsh, bs, L, ce_calls, ce_bytes;

		make_cfg(&cfg, "small", 1, 4, 0);
		cfg.mbs = 2;
		cfg.gbs = 4; /* 2 micro-batches */
		cfg.steps = 1;
		cfg.ce = impls[i];
		c = dry(&cfg, &o);
		coll_stats_get(emu_cluster_dev(c, 0), "all-reduce", &st);
		coll_stats_get(emu_cluster_dev(c, 0), "all-gather", &ag);
		L = (uint64_t)cfg.model.num_layers;
		bs = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len;
		bsh = bs * (uint64_t)cfg.model.hidden;
		ce_calls = impls[i] == CE_UNFUSED ? 3 : impls[i] == CE_NATIVE ? 2 : 0;
		ce_bytes = impls[i] == CE_TE ? 0 : 3 * bs;
		/* per micro-batch; and once per step, the gradient norm's one element over tp */
		assert_int_equal(st.calls, 2 * (4 * L + 2 + ce_calls) + 1);
		/* (the cross-entropy's in fp32, 4 bytes a value, the rest at the run's 2) */
		assert_int_equal(st.bytes, 2 * (4 * L * bsh + 2 * bsh) * 2 + 2 * ce_bytes * 4 + 2);
		assert_int_equal(ag.calls, impls[i] == CE_TE ? 2 : 0);
		assert_int_equal(ag.bytes, impls[i] == CE_TE ? 2 * 3 * bs * 4 * 4 : 0);
		run_free(&o);
		emu_cluster_free(c);
	}
}

/* Sequence parallelism moves the same volume as reduce-scatter + all-gather: each of
 * tensor parallelism's 4L + 2 all-reduces of b s h a micro-batch becomes one
 * reduce-scatter and one all-gather of b s h. */
static void test_sp_volume(void **state)
{
	struct run_cfg cfg;
	struct run_out o;
	struct emu_cluster *c;
	struct coll_stats rs, ag;
	uint64_t bsh, L, want;

	(void)state;
	make_cfg(&cfg, "small", 1, 4, 0);
	cfg.sp = 1;
	cfg.mbs = 2;
	cfg.gbs = 4; /* 2 micro-batches */
	cfg.steps = 1;
	c = dry(&cfg, &o);
	coll_stats_get(emu_cluster_dev(c, 0), "reduce-scatter", &rs);
	coll_stats_get(emu_cluster_dev(c, 0), "all-gather", &ag);
	L = (uint64_t)cfg.model.num_layers;
	bsh = (uint64_t)cfg.mbs * (uint64_t)cfg.model.seq_len * (uint64_t)cfg.model.hidden;
	want = 2 * (4 * L + 2);
	assert_int_equal(rs.calls, want);
	assert_int_equal(rs.bytes, want * bsh * 2);
	/* and 2 a layer more, and 1 for the output layer: ln1's, ln2's and lnf's rows
	 * gathered again in backward */
	assert_int_equal(ag.calls, want + 2 * (2 * L + 1));
	assert_int_equal(ag.bytes, (want + 2 * (2 * L + 1)) * bsh * 2);
	run_free(&o);
	emu_cluster_free(c);
}

/* With gradient buckets, data-parallel communication overlaps backward: the step's
 * exposed communication (step time minus compute) is below its total communication.
 * Without --overlap-grad-reduce (Megatron's default) the gradients go after backward as
 * one bucket, whatever the bucket size (Megatron's DDP), and all of it is exposed, to
 * the nanosecond: the same bytes in fewer all-reduces. */
static void test_buckets_overlap(void **state)
{
	struct coll_stats st[2];

	(void)state;
	for (int overlap = 1; overlap >= 0; overlap--) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;
		int64_t exposed;

		make_cfg(&cfg, "small", 4, 1, 0);
		cfg.mbs = 4;
		cfg.gbs = 16;
		cfg.steps = 1;
		cfg.bucket_bytes = 256 << 10; /* several buckets, with the overlap */
		cfg.overlap_grad = overlap;
		c = dry(&cfg, &o);
		coll_stats_get(emu_cluster_dev(c, 0), "all-reduce", &st[overlap]);
		exposed = o.step_ns[0] - o.compute_ns[0];
		if (overlap)
			assert_true(exposed > 0 && exposed < st[1].time_ns);
		else
			assert_int_equal(coll_exposed_ns(emu_cluster_dev(c, 0)), st[0].time_ns);
		run_free(&o);
		emu_cluster_free(c);
	}
	/* small's 13 tensors a layer, 4 layers: more than 4 buckets of 256 KiB */
	assert_true(st[1].calls > st[0].calls + 4);
	assert_int_equal(st[1].bytes, st[0].bytes);
}

/* --overlap-param-gather (ZeRO 1-2): the updated weights' all-gathers wait for the next
 * forward. Execute runs give bitwise the losses, first gradients and weights of the run
 * without it, a pipeline's and HelixPipe's too. In dry-run the first step is shorter by
 * exactly its all-gathers' time (they were all exposed, back to back on their stream;
 * now they are owed to the next step), and a later step lies between the two: the first
 * bucket's gather waits at the embeddings, the rest hides behind the layers before it. */
static void test_param_gather_overlap(void **state)
{
	static const struct {
		int pp, zero;
		enum sched_kind sched;
	} cases[] = {{1, 1, SCHED_1F1B}, {1, 2, SCHED_1F1B}, {2, 1, SCHED_HELIX}};
	struct run_out o[2];
	struct coll_stats ag;

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		for (int over = 0; over < 2; over++) {
			struct run_cfg cfg;

			make_cfg(&cfg, "tiny", 2, 1, cases[k].zero);
			cfg.bucket_bytes = 16 << 10; /* several buckets */
			cfg.overlap_grad = 1;        /* the same buckets both ways (par/dp.h) */
			cfg.overlap_param_gather = over;
			if (cases[k].pp > 1) {
				mesh_init(&cfg.mesh, 1, 1, 1, 2, cases[k].pp);
				cfg.model.num_layers = 4;
				cfg.schedule = cases[k].sched;
				cfg.vpp = 1;
				cfg.gbs = 4 * cfg.mbs;
			}
			run_exec(&cfg, &o[over], k);
			if (over)
				assert_same_run(&cfg, &o[1], &o[0]);
		}
		run_free(&o[0]);
		run_free(&o[1]);
	}
	for (int over = 0; over < 2; over++) {
		struct run_cfg cfg;
		struct emu_cluster *c;

		make_cfg(&cfg, "small", 4, 1, 1);
		cfg.mbs = 4;
		cfg.gbs = 16;
		cfg.steps = 2;
		cfg.bucket_bytes = 256 << 10;
		cfg.overlap_grad = 1;
		cfg.overlap_param_gather = over;
		c = dry(&cfg, &o[over]);
		coll_stats_get(emu_cluster_dev(c, 0), "all-gather", &ag);
		assert_true(ag.calls > 8); /* several buckets a step */
		emu_cluster_free(c);
	}
	/* (the same calls both ways: ag holds the second run's, two steps' worth) */
	assert_int_equal(o[0].step_ns[0] - o[1].step_ns[0], ag.time_ns / 2);
	assert_true(o[1].step_ns[1] > o[1].step_ns[0] && o[1].step_ns[1] < o[0].step_ns[1]);
	assert_int_equal(o[0].step_ns[1], o[0].step_ns[0]);
	run_free(&o[0]);
	run_free(&o[1]);
}

/* fp32 main gradients (--accumulate-allreduce-grads-in-fp32) change the clock and the
 * memory only: under bf16 accounting, execute runs give bitwise the same losses, first
 * gradients and weights with and without, under dp with ZeRO 0 to 3, tp with sp, a
 * pipeline (the tied embedding's gradient summed between its ends) and experts; the
 * gradients take twice the bytes, and the step is longer wherever they cross a link. In
 * dry-run at tp 2 without sp, the one gradient summed over tp is the MoE router's, once a
 * layer a micro-batch: a device sends exactly 2 bytes more for each of its elements. */
static void test_fp32_grads(void **state)
{
	static const struct {
		const char *model;
		int dp, tp, sp, pp, zero;
	} cases[] = {{"tiny", 2, 1, 0, 1, 0},    {"tiny", 2, 2, 1, 1, 1},
		     {"tiny", 2, 1, 0, 1, 2},    {"tiny", 2, 1, 0, 1, 3},
		     {"tiny", 1, 2, 1, 2, 0},    {"moe-tiny", 2, 1, 0, 1, 1},
		     {"moe-tiny", 1, 2, 0, 1, 0}};
	struct run_out o[2];
	double sent[2], router = 0;

	(void)state;
	for (int fp32 = 0; fp32 < 2; fp32++) {
		struct run_cfg cfg;
		struct emu_cluster *c;

		make_cfg(&cfg, "moe-tiny", 1, 2, 0);
		cfg.prec = PREC_BF16;
		cfg.fp32_grads = fp32;
		cfg.steps = 1;
		c = dry(&cfg, &o[fp32]);
		sent[fp32] = (double)coll_link_bytes(emu_cluster_dev(c, 0), TOPO_LINK_INTRA);
		emu_cluster_free(c);
		run_free(&o[fp32]);
		router = 0;
		for (int l = 0; l < cfg.model.num_layers; l++)
			router += (double)gpt_tensor_numel(&cfg.model, 2 + l * LP_N + LP_ROUTER);
		router *= cfg.gbs / cfg.mbs;
	}
	assert_true(router > 0);
	if (sent[1] - sent[0] != 2 * router)
		fail_msg("tp 2, fp32 gradients: %.0f more bytes sent, the router's %.0f elements "
			 "at 2 bytes more are %.0f",
			 sent[1] - sent[0], router, 2 * router);
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct run_cfg cfg;

		for (int fp32 = 0; fp32 < 2; fp32++) {
			make_cfg(&cfg, cases[k].model, cases[k].dp, cases[k].tp, cases[k].zero);
			cfg.sp = cases[k].sp;
			cfg.prec = PREC_BF16;
			cfg.fp32_grads = fp32;
			if (cases[k].pp > 1) {
				mesh_init(&cfg.mesh, cases[k].tp, 1, 1, cases[k].dp, cases[k].pp);
				cfg.model.num_layers = 4;
				cfg.schedule = SCHED_1F1B;
				cfg.vpp = 1;
				cfg.gbs = 4 * cfg.mbs;
			}
			run_exec(&cfg, &o[fp32], k);
		}
		assert_same_run(&cfg, &o[1], &o[0]);
		if (o[1].step_ns[0] <= o[0].step_ns[0])
			fail_msg("case %zu: fp32 gradients' step %lld ns, 16-bit %lld", k,
				 (long long)o[1].step_ns[0], (long long)o[0].step_ns[0]);
		run_free(&o[0]);
		run_free(&o[1]);
	}
}

/* Megatron's order for a column-parallel layer's backward (its input-gradient collective
 * posted before the weight gradient's GEMM, which runs under it) against
 * --no-async-tensor-model-parallel-allreduce (after it, waited for): the same kernels on
 * the same data, so execute runs give bitwise the same losses, first gradients and
 * weights, under tp, sp, dp, a pipeline, zero-bubble's split backward (whose input pass
 * leaves the weight gradient for later) and HelixPipe; in dry-run the default's step is
 * shorter wherever tp > 1, and the same where tp is 1. */
static void test_async_dgrad(void **state)
{
	static const struct {
		const char *model;
		int dp, tp, sp, pp;
		enum sched_kind sched;
	} cases[] = {{"tiny", 1, 2, 0, 1, SCHED_1F1B},     {"tiny", 2, 2, 1, 1, SCHED_1F1B},
		     {"moe-tiny", 1, 2, 1, 1, SCHED_1F1B}, {"tiny", 1, 2, 1, 2, SCHED_1F1B},
		     {"tiny", 1, 2, 0, 2, SCHED_ZBH1},     {"tiny", 1, 2, 1, 2, SCHED_HELIX}};
	struct run_out o[2];

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		for (int sync = 0; sync < 2; sync++) {
			struct run_cfg cfg;

			make_cfg(&cfg, cases[k].model, cases[k].dp, cases[k].tp, 0);
			cfg.sp = cases[k].sp;
			cfg.tp_sync_dgrad = sync;
			if (cases[k].pp > 1) {
				mesh_init(&cfg.mesh, cases[k].tp, 1, 1, cases[k].dp, cases[k].pp);
				cfg.model.num_layers = 4;
				cfg.schedule = cases[k].sched;
				cfg.vpp = 1;
				cfg.gbs = 4 * cfg.mbs;
			}
			run_exec(&cfg, &o[sync], k);
			if (sync)
				assert_same_run(&cfg, &o[1], &o[0]);
		}
		run_free(&o[0]);
		run_free(&o[1]);
	}
	for (int tp = 1; tp <= 2; tp++) {
		for (int sync = 0; sync < 2; sync++) {
			struct run_cfg cfg;
			struct emu_cluster *c;

			make_cfg(&cfg, "small", 2, tp, 1);
			cfg.sp = tp > 1;
			cfg.steps = 1;
			cfg.tp_sync_dgrad = sync;
			c = dry(&cfg, &o[sync]);
			emu_cluster_free(c);
		}
		if (tp == 1)
			assert_int_equal(o[0].step_ns[0], o[1].step_ns[0]);
		else
			assert_true(o[0].step_ns[0] < o[1].step_ns[0]);
		run_free(&o[0]);
		run_free(&o[1]);
	}
}

/* --p2p-sync (Megatron-LM's 1F1B: each send and the receive after it one batch, waited
 * for): the same messages in the same order, so bitwise the same losses, gradients and
 * weights as the eager sends; only waiting changes. On tiny the last stage is the
 * slowest (it also computes the loss), so eagerly the activations it next needs are
 * always there; synchronous, each of its m - 1 steady-state batches (the gradient of one
 * micro-batch sent, the next one's activations received) starts when it gets there and
 * lasts a transfer, T: the step is exactly (m - 1) T longer, and as long again when run
 * twice. With one micro-batch there is no such batch, and no difference. The interleaved
 * schedule's batches (v chunks a stage; every stage waits for its neighbours' batches
 * each iteration) are bitwise the same too, never faster, and repeat. */
static void test_p2p_sync(void **state)
{
	static const int cases[][3] = {{2, 1, 1}, {2, 3, 1}, {2, 8, 1}, {4, 8, 1},
				       {3, 3, 2}, {4, 8, 2}, {3, 6, 3}}; /* pp, micro-batches, v */

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct run_out o[3];
		struct run_cfg cfg;
		struct coll_stats st = {0};

		for (int r = 0; r < 3; r++) {
			struct emu_cluster *c;

			make_cfg(&cfg, "tiny", 1, 1, 0);
			mesh_init(&cfg.mesh, 1, 1, 1, 1, cases[k][0]);
			cfg.model.num_layers = 2 * cases[k][0] * cases[k][2];
			cfg.schedule = cases[k][2] > 1 ? SCHED_INTERLEAVED : SCHED_1F1B;
			cfg.vpp = cases[k][2];
			cfg.gbs = cases[k][1] * cfg.mbs;
			cfg.steps = 1;
			cfg.p2p_sync = r > 0;
			c = test_cluster("dgx-a100", 1, cfg.mesh.world, 0, 0);
			run_alloc(&o[r], &cfg, 1);
			if (run_parallel(c, &cfg, &o[r]))
				fail_msg("case %zu: %s", k, emu_cluster_report(c));
			if (r)
				coll_stats_get(emu_cluster_dev(c, 0), "send", &st);
			emu_cluster_free(c);
		}
		assert_same_run(&cfg, &o[1], &o[0]);
		assert_same_run(&cfg, &o[2], &o[1]);
		assert_int_equal(o[2].step_ns[0], o[1].step_ns[0]);
		assert_true(st.calls > 0 && st.time_ns % (int64_t)st.calls == 0);
		if (cases[k][2] > 1)
			assert_true(o[1].step_ns[0] > o[0].step_ns[0]);
		else if (o[1].step_ns[0] - o[0].step_ns[0] !=
			 (int64_t)(cases[k][1] - 1) * (st.time_ns / (int64_t)st.calls))
			fail_msg("pp %d, %d micro-batches: synchronous %lld ns, eager %lld, a "
				 "transfer %lld",
				 cases[k][0], cases[k][1], (long long)o[1].step_ns[0],
				 (long long)o[0].step_ns[0],
				 (long long)(st.time_ns / (int64_t)st.calls));
		for (int r = 0; r < 3; r++)
			run_free(&o[r]);
	}
}

/* --scatter-gather-tensors-in-pipeline (Megatron-LM's of 2021, the paper's section 4.1):
 * without sequence parallelism the t tensor-parallel ranks send the same message, so
 * each sends its 1/t and the receivers all-gather the parts: bitwise the same losses,
 * gradients and weights, exactly 1/t of the bytes sent, and one all-gather of the whole
 * message a receive; with --p2p-sync (1F1B and interleaved, whose batches gather after
 * they are over) and Oases's sub-batches too. */
static void test_pipeline_scatter(void **state)
{
	static const struct {
		int tp, dp, pp, sync, oases, v;
	} cases[] = {{2, 1, 2, 0, 0, 1},
		     {4, 1, 2, 1, 0, 1},
		     {2, 2, 2, 1, 0, 1},
		     {2, 1, 4, 0, 1, 1},
		     {2, 1, 4, 1, 0, 2}};

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct run_out o[2];
		struct run_cfg cfg;
		struct coll_stats send[2], recv[2], ag[2];

		for (int sc = 0; sc < 2; sc++) {
			struct emu_cluster *c;

			make_cfg(&cfg, "tiny", cases[k].dp, cases[k].tp, 0);
			mesh_init(&cfg.mesh, cases[k].tp, 1, 1, cases[k].dp, cases[k].pp);
			cfg.model.num_layers = 4 * cases[k].v;
			cfg.schedule = cases[k].v > 1 ? SCHED_INTERLEAVED : SCHED_1F1B;
			cfg.vpp = cases[k].v;
			cfg.gbs = 4 * cfg.mbs * cases[k].dp;
			cfg.steps = 2;
			cfg.p2p_sync = cases[k].sync;
			cfg.tp_overlap = cases[k].oases ? PAR_OVERLAP_OASES : PAR_OVERLAP_NONE;
			cfg.pp_scatter = sc;
			c = test_cluster("dgx-a100", 1, cfg.mesh.world, 0, 0);
			run_alloc(&o[sc], &cfg, 1);
			if (run_parallel(c, &cfg, &o[sc]))
				fail_msg("case %zu: %s", k, emu_cluster_report(c));
			/* device 0 is stage 0's first tp rank: it sends activations and
			 * receives gradients */
			coll_stats_get(emu_cluster_dev(c, 0), "send", &send[sc]);
			coll_stats_get(emu_cluster_dev(c, 0), "recv", &recv[sc]);
			coll_stats_get(emu_cluster_dev(c, 0), "all-gather", &ag[sc]);
			emu_cluster_free(c);
		}
		assert_same_run(&cfg, &o[1], &o[0]);
		assert_true(send[0].calls > 0 && recv[0].calls > 0);
		assert_int_equal(send[1].calls, send[0].calls);
		assert_int_equal(send[1].bytes * (uint64_t)cases[k].tp, send[0].bytes);
		assert_int_equal(recv[1].bytes * (uint64_t)cases[k].tp, recv[0].bytes);
		assert_int_equal(ag[1].calls - ag[0].calls, recv[0].calls);
		assert_int_equal(ag[1].bytes - ag[0].bytes, recv[0].bytes);
		run_free(&o[0]);
		run_free(&o[1]);
	}
}

/* The calls of op on each pipeline stage's first data-parallel rank: st[stage]. */
static void stage_stats(struct emu_cluster *c, const struct run_cfg *cfg, const char *op,
			struct coll_stats *st)
{
	for (int d = 0; d < cfg->mesh.world; d++)
		if (!mesh_coord(&cfg->mesh, d, MESH_DP))
			coll_stats_get(emu_cluster_dev(c, d), op,
				       &st[mesh_coord(&cfg->mesh, d, MESH_PP)]);
}

/* --overlap-grad-reduce with a pipeline (Megatron's: gradient sync on in each model
 * chunk's last micro-batch): ZeRO 0-1's buckets go as the last micro-batch's backward
 * finishes them, on every schedule; the end stages keep the tied embedding's bucket
 * until its sum over the embedding group. Megatron cuts only the first stage's first
 * chunk into buckets: the last stage reduces one bucket a chunk with the overlap as
 * without it, the first stage more. The collectives sum the same data over dp 2 (an
 * order of two addends does not round), so execute runs give bitwise the losses, first
 * gradients and weights of the run without (under ZeRO-1 with one bucket both ways, as
 * the gradient norm adds each rank's shard of the buckets); in dry-run the step is
 * shorter. */
static void test_pipeline_grads_overlap(void **state)
{
	static const struct {
		enum sched_kind sched;
		int vpp, zero;
	} cases[] = {{SCHED_1F1B, 1, 0},
		     {SCHED_INTERLEAVED, 2, 1},
		     {SCHED_ZBH1, 1, 0},
		     {SCHED_HELIX, 1, 1}};

	(void)state;
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct run_out o[2], dr[2];
		struct coll_stats st[2][2]; /* [over][first stage, last] */
		struct gpt_config model;    /* the execute runs' */

		for (int over = 0; over < 2; over++) {
			struct run_cfg cfg;
			struct emu_cluster *c;

			for (int dry_run = 0; dry_run < 2; dry_run++) {
				/* (in dry-run, buckets large enough for their overlap to
				 * outweigh the latency of more all-reduces) */
				make_cfg(&cfg, dry_run ? "gpt2-124m" : "tiny", 2, 1, cases[k].zero);
				mesh_init(&cfg.mesh, 1, 1, 1, 2, 2);
				cfg.model.num_layers = dry_run ? 8 : 4;
				cfg.schedule = cases[k].sched;
				cfg.vpp = cases[k].vpp;
				cfg.gbs = 4 * cfg.mbs;
				/* several buckets; in execute runs under ZeRO-1 one bucket both
				 * ways, as the run without the overlap has: the gradient norm
				 * sums each rank's chunks, which the buckets cut */
				cfg.bucket_bytes = dry_run         ? 16 << 20
						   : cases[k].zero ? 1 << 30
								   : 16 << 10;
				cfg.overlap_grad = over;
				if (dry_run) {
					c = dry(&cfg, &dr[over]);
					stage_stats(c, &cfg,
						    cases[k].zero ? "reduce-scatter" : "all-reduce",
						    st[over]);
					emu_cluster_free(c);
					continue;
				}
				c = test_cluster("dgx-a100", 1, cfg.mesh.world, 0, 0);
				run_alloc(&o[over], &cfg, 1);
				if (run_parallel(c, &cfg, &o[over]))
					fail_msg("case %zu: %s", k, emu_cluster_report(c));
				emu_cluster_free(c);
				model = cfg.model;
			}
			if (!over)
				continue;
			for (int i = 0; i < o[0].np; i++) {
				size_t n = gpt_tensor_numel(&model, i) * sizeof(float);

				if (memcmp(o[1].grad0[i], o[0].grad0[i], n))
					fail_msg("case %zu: tensor %d's gradients differ", k, i);
			}
			if (memcmp(o[1].loss, o[0].loss, sizeof(float) * (size_t)o[0].steps))
				fail_msg("case %zu: the losses differ", k);
			for (int i = 0; i < o[0].np; i++) {
				size_t n = gpt_tensor_numel(&model, i) * sizeof(float);

				if (memcmp(o[1].grad0[i], o[0].grad0[i], n))
					fail_msg("case %zu: tensor %d's gradients differ", k, i);
				assert_memory_equal(o[1].params[i], o[0].params[i], n);
			}
		}
		if (st[1][0].calls <= st[0][0].calls)
			fail_msg("case %zu: the first stage reduces in %llu calls with the "
				 "overlap, %llu without",
				 k, (unsigned long long)st[1][0].calls,
				 (unsigned long long)st[0][0].calls);
		assert_int_equal(st[1][0].bytes, st[0][0].bytes);
		assert_int_equal(st[1][1].calls, st[0][1].calls);
		if (dr[1].step_ns[0] >= dr[0].step_ns[0])
			fail_msg("case %zu: the step with --overlap-grad-reduce takes %lld ns, "
				 "without %lld",
				 k, (long long)dr[1].step_ns[0], (long long)dr[0].step_ns[0]);
		for (int over = 0; over < 2; over++) {
			run_free(&o[over]);
			run_free(&dr[over]);
		}
	}
}

/* Megatron's buckets, counted: an interleaved pipeline (pp 2, 2 chunks a stage) under
 * ZeRO-1 reduce-scatters one bucket a chunk on either stage without the overlap, and the
 * tied embedding one of its own on each end stage (Megatron's distributed optimizer's
 * shared-embedding bucket): 3 a step; with it, the last stage the same 3, the first
 * stage's first chunk in 16 KiB buckets and its second chunk still one. */
static void test_buckets_per_chunk(void **state)
{
	struct coll_stats st[2][2]; /* [overlap][stage] */

	(void)state;
	for (int over = 0; over < 2; over++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;

		make_cfg(&cfg, "small", 2, 1, 1);
		mesh_init(&cfg.mesh, 1, 1, 1, 2, 2);
		cfg.model.num_layers = 4;
		cfg.schedule = SCHED_INTERLEAVED;
		cfg.vpp = 2;
		cfg.gbs = 4 * cfg.mbs;
		cfg.steps = 1;
		cfg.bucket_bytes = 16 << 10;
		cfg.overlap_grad = over;
		c = dry(&cfg, &o);
		stage_stats(c, &cfg, "reduce-scatter", st[over]);
		run_free(&o);
		emu_cluster_free(c);
	}
	assert_int_equal(st[0][0].calls, 3);
	assert_int_equal(st[0][1].calls, 3);
	assert_int_equal(st[1][1].calls, 3);
	assert_true(st[1][0].calls > 4);
	assert_int_equal(st[1][0].bytes, st[0][0].bytes);
}

/* The host memory an execute run holds is what run_host_need's dry-run of the same code
 * says, exactly, though that sizes one micro-batch a replica where there is no pipeline:
 * dp 2 x tp 2 with ZeRO-1 (2 micro-batches a replica), a MoE pipeline (every micro-batch),
 * and dp 2 x tp 2 with 8 micro-batches a replica and the gradients' reduction overlapping
 * backward. */
static void test_host_need(void **state)
{
	(void)state;
	for (int k = 0; k < 3; k++) {
		struct run_cfg cfg;
		struct emu_cluster *c = test_cluster("dgx-a100", 1, 4, 0, 0);
		struct run_out o;
		uint64_t largest, need, held = 0, big = 0;
		char why[256];

		test_make_cfg(&cfg, k == 1 ? "moe-tiny" : "tiny", 2, k == 1 ? 1 : 2, k == 1 ? 2 : 1,
			      &corpus);
		cfg.zero = k == 0;
		if (k == 1)
			cfg.model.num_layers = 4;
		if (k == 2) {
			cfg.gbs = 32;
			cfg.overlap_grad = 1;
		}
		need = run_host_need(&cfg, emu_cluster_config(c), 1, 0, &largest, why, sizeof why);
		run_alloc(&o, &cfg, 0);
		if (run_parallel(c, &cfg, &o))
			fail_msg("run failed: %s", emu_cluster_report(c));
		for (int d = 0; d < 4; d++) {
			uint64_t h = mem_host_peak(emu_cluster_dev(c, d));

			held += h;
			big = h > big ? h : big;
		}
		assert_true(need > 0);
		assert_string_equal(why, "");
		assert_int_equal(need, held);
		assert_int_equal(largest, big);
		run_free(&o);
		emu_cluster_free(c);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verify_table),
		cmocka_unit_test(test_broken_strategies_fail),
		cmocka_unit_test(test_routing_flip_detected),
		cmocka_unit_test(test_recompute),
		cmocka_unit_test(test_activation_formula),
		cmocka_unit_test(test_mlp_chunks),
		cmocka_unit_test(test_pipeline_determinism),
		cmocka_unit_test(test_zero_memory_and_volume),
		cmocka_unit_test(test_tp_volume),
		cmocka_unit_test(test_sp_volume),
		cmocka_unit_test(test_buckets_overlap),
		cmocka_unit_test(test_buckets_per_chunk),
		cmocka_unit_test(test_param_gather_overlap),
		cmocka_unit_test(test_async_dgrad),
		cmocka_unit_test(test_fp32_grads),
		cmocka_unit_test(test_pipeline_grads_overlap),
		cmocka_unit_test(test_p2p_sync),
		cmocka_unit_test(test_pipeline_scatter),
		cmocka_unit_test(test_host_need),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
