/* pemu plan's search (run/plan.h) against what it promises: its ranking is a brute-force
 * dry-run of every layout of the space, sorted; the memory bound never prunes a layout
 * that fits; the worker processes change nothing; its dry-runs fold ZeRO's replicas
 * exactly; every Megatron-LM and pemu run line it prints
 * parses back through pemu's command line to the same layout; --validate's tiny twin
 * keeps the layout and fails on a broken strategy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cmd/cli.h"
#include "common.h"
#include "cmd/cmd.h"
#include "run/oases_plan.h"
#include "run/plan.h"

#define GPUS 8

static void cluster(struct emu_config *ec, uint64_t cap)
{
	assert_int_equal(emu_config_default(ec, "dgx-a100"), 0);
	ec->topo.nodes = 1;
	ec->ndev = GPUS;
	ec->dry_run = 1;
	ec->mem_cap = cap;
}

/* tiny (or another preset) on 8 GPUs, global batch gbs, micro-batches up to mbs. */
static void space(struct plan_space *s, const char *preset, int gbs, int mbs)
{
	memset(s, 0, sizeof *s);
	run_cfg_init(&s->base);
	s->base.preset = model_preset(preset);
	s->base.model = s->base.preset->cfg;
	s->base.gbs = gbs;
	s->gpus = GPUS;
	s->max_mbs = test_skip_large() ? 1 : mbs; /* (the sanitizers' builds: a smaller space) */
}

static const int64_t *sort_step;
static int by_step(const void *a, const void *b);

/* A point of Oases's degrees by hand: its search on the layout, then the layout with the
 * K:T it chose run (as the point); the fate. */
static enum plan_fate oases_point(const struct emu_config *ec, const struct plan_space *s,
				  const struct plan_point *x, struct run_cfg *cfg,
				  struct plan_eval *e)
{
	struct oases_result *o = calloc(1, sizeof *o);
	struct plan_point p = *x;
	char err[512];
	int rc = oases_plan(ec, cfg, o, err, sizeof err);

	p.tpf_layers = o->K;
	p.tpf = o->T;
	free(o);
	if (rc)
		return rc == EMU_EINVAL ? PLAN_RULE : rc == EMU_EOOM ? PLAN_OOM : PLAN_FAIL;
	if (!p.tpf_layers)
		return PLAN_SAME;
	assert_int_equal(p.tpf_layers, x->tpf_layers);
	assert_int_equal(p.tpf, x->tpf);
	assert_int_equal(plan_cfg(s, &p, cfg, err, sizeof err), 0);
	return plan_dry_run(ec, cfg, e);
}

/* The ranking by hand: every point's checker, then a dry-run of every one that passes
 * it, with no bound; sorted by step time, then place. */
static void test_ranking_is_brute_force(void **state)
{
	struct plan_space s;
	struct emu_config ec;
	struct plan_result r, r2;
	char err[512];
	int nok = 0, tpf = 0, *rank;
	int64_t *step;

	(void)state;
	space(&s, "tiny", 16, 2);
	cluster(&ec, 600 << 10); /* some layouts do not fit, some by the bound alone */
	assert_int_equal(plan_search(&s, &ec, 1, NULL, NULL, &r, err, sizeof err), 0);
	rank = calloc((size_t)r.n, sizeof *rank);
	step = calloc((size_t)r.n, sizeof *step);
	for (int i = 0; i < r.n; i++) {
		const struct plan_entry *x = &r.all[i];
		struct run_cfg cfg;
		struct plan_eval e;
		enum plan_fate f;

		assert_int_equal(x->index, i);
		if (plan_cfg(&s, &x->p, &cfg, err, sizeof err)) {
			assert_int_equal(x->fate, PLAN_RULE);
			continue;
		}
		f = plan_dry_run(&ec, &cfg, &e);
		if (x->fate == PLAN_BOUND) { /* the bound pruned it: it does not fit */
			if (f != PLAN_OOM)
				fail_msg("layout %d pruned by the bound (%llu bytes) fits: peak "
					 "%llu",
					 i, (unsigned long long)x->e.bound,
					 (unsigned long long)e.peak);
			continue;
		}
		tpf += x->p.v[PLAN_TPF];
		if (x->p.v[PLAN_TPF] && (f = oases_point(&ec, &s, &x->p, &cfg, &e)) != PLAN_OK) {
			assert_int_equal(x->fate, f);
			continue;
		}
		assert_int_equal(x->fate, f);
		if (f != PLAN_OK)
			continue;
		assert_true(x->e.bound <= e.peak);
		assert_int_equal(x->e.step_ns, e.step_ns);
		assert_int_equal(x->e.peak, e.peak);
		step[i] = e.step_ns;
		rank[nok++] = i;
	}
	sort_step = step;
	qsort(rank, (size_t)nok, sizeof *rank, by_step);
	assert_int_equal(nok, r.nok);
	assert_memory_equal(rank, r.rank, (size_t)nok * sizeof *rank);
	/* the case means something: each sieve took some, and many fit */
	assert_true(r.by_rule > 0 && r.by_bound > 0 && r.by_oom > 0 && r.nok > 20);
	/* Oases's search ran on some layouts (it needs even micro-batches, which the
	 * sanitizers' smaller space leaves out) */
	assert_true(tpf > 0 || test_skip_large());
	/* the front: each needs less memory than every faster layout */
	for (int k = 1; k < r.npareto; k++)
		assert_true(r.all[r.pareto[k]].e.peak < r.all[r.pareto[k - 1]].e.peak);
	/* two worker processes decide the same */
	assert_int_equal(plan_search(&s, &ec, 2, NULL, NULL, &r2, err, sizeof err), 0);
	assert_int_equal(r2.n, r.n);
	assert_int_equal(r2.nok, r.nok);
	for (int i = 0; i < r.n; i++) {
		assert_int_equal(r2.all[i].fate, r.all[i].fate);
		assert_int_equal(r2.all[i].e.step_ns, r.all[i].e.step_ns);
		assert_int_equal(r2.all[i].e.peak, r.all[i].e.peak);
	}
	assert_memory_equal(r2.rank, r.rank, (size_t)r.nok * sizeof *r.rank);
	free(rank);
	free(step);
	plan_result_free(&r);
	plan_result_free(&r2);
}

static int by_step(const void *a, const void *b)
{
	const int64_t *step = sort_step;
	int x = *(const int *)a, y = *(const int *)b;

	if (step[x] != step[y])
		return step[x] < step[y] ? -1 : 1;
	return x - y;
}

/* The bound under every strategy a MoE space has (experts over dp, over tp, rows; ZeRO
 * 0-3; cp): never above the largest device's peak. */
static void test_bound_under_moe(void **state)
{
	struct plan_space s;
	struct emu_config ec;
	struct plan_result r;
	char err[512];
	int moe_ep = 0;

	(void)state;
	space(&s, "moe-tiny", 16, 2);
	s.base.model.seq_len = 64;
	s.max_cp = 2;
	s.fixed = 1u << PLAN_FLASH;
	s.base.flash = 1;
	cluster(&ec, 0);
	assert_int_equal(plan_search(&s, &ec, 1, NULL, NULL, &r, err, sizeof err), 0);
	assert_true(r.nok > 20);
	for (int k = 0; k < r.nok; k++) {
		const struct plan_entry *x = &r.all[r.rank[k]];

		if (x->e.bound > x->e.peak)
			fail_msg("layout %d: bound %llu over its peak %llu", x->index,
				 (unsigned long long)x->e.bound, (unsigned long long)x->e.peak);
		moe_ep += x->p.v[PLAN_EP] > 1;
	}
	assert_true(moe_ep > 10);
	plan_result_free(&r);
}

/* The search's dry-runs fold ZeRO's data-parallel replicas as every other dry-run does,
 * exactly: each fitting ZeRO layout's step time and peak memory equal those of a dry-run
 * of every device. */
static void test_zero_folds_exactly(void **state)
{
	struct plan_space s;
	struct emu_config ec;
	struct plan_result r;
	char err[512];
	int checked = 0;

	(void)state;
	space(&s, "tiny", 32, 2);
	s.fixed = 1u << PLAN_PP;
	mesh_init(&s.base.mesh, 1, 1, 1, GPUS, 1);
	cluster(&ec, 0);
	assert_int_equal(plan_search(&s, &ec, 1, NULL, NULL, &r, err, sizeof err), 0);
	for (int i = 0; i < r.n; i++) {
		const struct plan_entry *x = &r.all[i];
		struct run_cfg cfg;
		struct plan_eval e;

		if (x->fate != PLAN_OK || !x->p.v[PLAN_ZERO] || x->p.dp == 1)
			continue;
		assert_int_equal(plan_cfg(&s, &x->p, &cfg, err, sizeof err), 0);
		assert_true(x->e.devices_run <= 2); /* the replicas folded (and tp ranks 2..) */
		cfg.fold = 0;
		assert_int_equal(plan_dry_run(&ec, &cfg, &e), PLAN_OK);
		assert_int_equal(e.devices_run, GPUS);
		if (e.step_ns != x->e.step_ns || e.peak != x->e.peak)
			fail_msg(
				"layout %d (dp %d tp %d ZeRO %d): folded %lld ns %llu bytes, every "
				"device %lld ns %llu bytes",
				i, x->p.dp, x->p.v[PLAN_TP], x->p.v[PLAN_ZERO],
				(long long)x->e.step_ns, (unsigned long long)x->e.peak,
				(long long)e.step_ns, (unsigned long long)e.peak);
		checked++;
	}
	assert_true(checked >= 8);
	plan_result_free(&r);
}

/* A printed command line split at spaces (no argument of these has one), after the
 * words up to and including `after`, into argv[1..] with argv[0] = "run". */
static int split(char *line, const char *after, char **argv, int max)
{
	int argc = 1, on = !after;

	argv[0] = "run";
	for (char *t = strtok(line, " "); t && argc < max; t = strtok(NULL, " ")) {
		if (on)
			argv[argc++] = t;
		else if (!strcmp(t, after))
			on = 1;
	}
	return argc;
}

/* The fields that make a layout and its model. */
static void assert_same_layout(const struct run_cfg *a, const struct run_cfg *b)
{
	assert_memory_equal(a->mesh.size, b->mesh.size, sizeof a->mesh.size);
	assert_memory_equal(&a->model, &b->model, sizeof a->model);
	assert_int_equal(a->ep, b->ep);
	assert_int_equal(run_ep_mode(a), run_ep_mode(b));
	if (a->mesh.size[MESH_PP] > 1)
		assert_int_equal(a->schedule, b->schedule);
	assert_int_equal(a->vpp, b->vpp);
	assert_int_equal(a->mbs, b->mbs);
	assert_int_equal(a->gbs, b->gbs);
	assert_int_equal(a->zero, b->zero);
	assert_int_equal(a->recompute, b->recompute);
	assert_int_equal(a->tp_overlap, b->tp_overlap);
	assert_int_equal(a->tpf_layers, b->tpf_layers);
	assert_int_equal(a->tpf, b->tpf);
	assert_int_equal(a->sp, b->sp);
	assert_int_equal(a->tp_comm_overlap, b->tp_comm_overlap);
	assert_int_equal(a->flash, b->flash);
	assert_int_equal(a->cp_comm, b->cp_comm);
	assert_int_equal(a->prec, b->prec);
	assert_int_equal(a->fp32_grads, b->fp32_grads);
	assert_int_equal(a->vocab_div, b->vocab_div);
	assert_int_equal(run_overlaps_grads(a), run_overlaps_grads(b));
}

/* cfg's Megatron-LM line (cmd_plan_megatron) parsed back by pemu run's parser, the world
 * given as --dp, into *got: the same layout. Whether the line holds flag. */
static int megatron_line_parses(const struct run_cfg *cfg, const struct emu_config *ec,
				struct run_cfg *got, const char *flag)
{
	char *buf = NULL, *argv[128], dp[16];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int n, has;

	cmd_plan_megatron(f, cfg, ec);
	fclose(f);
	has = strstr(buf, flag) != NULL;
	n = split(buf, "pretrain_gpt.py", argv, 120);
	snprintf(dp, sizeof dp, "%d", cfg->mesh.size[MESH_DP]);
	argv[n++] = "--dp";
	argv[n++] = dp;
	argv[n++] = "--dry-run";
	assert_int_equal(cmd_run_parse_cfg(n, argv, 0, got), 0);
	assert_same_layout(cfg, got);
	free(buf);
	return has;
}

static void parse_back(const char *preset, int seq, int experts_every)
{
	char seqs[16], every[16];
	char *plan_argv[] = {"plan",
			     "--model",
			     (char *)preset,
			     "--global-batch-size",
			     "16",
			     "--gpus",
			     "8",
			     "--max-micro-batch-size",
			     "2",
			     "--seq-length",
			     seqs,
			     "--moe-every",
			     every,
			     NULL};
	struct plan_space s;
	struct emu_config ec;
	struct plan_result r;
	char err[512];
	int megatron = 0, argc = experts_every ? 13 : 11;

	snprintf(seqs, sizeof seqs, "%d", seq);
	snprintf(every, sizeof every, "%d", experts_every);
	space(&s, preset, 16, 2);
	s.base.model.seq_len = seq;
	if (experts_every)
		s.base.model.moe_every = experts_every;
	s.max_cp = 2;
	cluster(&ec, 0);
	assert_int_equal(plan_search(&s, &ec, 1, NULL, NULL, &r, err, sizeof err), 0);
	for (int k = 0; k < r.nok; k++) {
		struct run_cfg cfg, got;
		char *buf = NULL, *argv[128];
		size_t len = 0;
		FILE *f;
		int n;

		assert_int_equal(plan_cfg(&s, &r.all[r.rank[k]].p, &cfg, err, sizeof err), 0);
		if (!cmd_plan_megatron_gap(&cfg, &ec)) { /* Megatron's line */
			megatron_line_parses(&cfg, &ec, &got, "pretrain_gpt.py");
			megatron++;
		}
		/* pemu run's line: every layout has one */
		f = open_memstream(&buf, &len);
		cmd_plan_pemu_run(f, argc, plan_argv, &cfg, 0);
		fclose(f);
		n = split(buf, "run", argv, 120);
		assert_int_equal(cmd_run_parse_cfg(n, argv, 0, &got), 0);
		assert_same_layout(&cfg, &got);
		free(buf);
	}
	assert_true(megatron > 10);
	plan_result_free(&r);
}

/* --overlap-param-gather in the search: on every layout with weights to gather (ZeRO
 * 1-2), off on the others, which it refuses in pemu run; the same layouts fit as
 * without it, none slower, and the ZeRO 1-2 ones that gather (dp > 1) faster. */
static void test_param_gather_search(void **state)
{
	struct plan_space s[2];
	struct emu_config ec;
	struct plan_result r[2];
	char err[512];
	int faster = 0;

	(void)state;
	cluster(&ec, 0);
	for (int k = 0; k < 2; k++) {
		space(&s[k], "tiny", 32, 2);
		s[k].fixed = 1u << PLAN_PP;
		mesh_init(&s[k].base.mesh, 1, 1, 1, GPUS, 1);
		s[k].base.overlap_param_gather = k;
		assert_int_equal(plan_search(&s[k], &ec, 1, NULL, NULL, &r[k], err, sizeof err), 0);
	}
	assert_int_equal(r[1].n, r[0].n);
	for (int i = 0; i < r[0].n; i++) {
		const struct plan_entry *a = &r[0].all[i], *b = &r[1].all[i];
		int z = a->p.v[PLAN_ZERO];
		struct run_cfg cfg;

		assert_memory_equal(a->p.v, b->p.v, sizeof a->p.v);
		assert_int_equal(b->fate, a->fate);
		if (a->fate != PLAN_OK)
			continue;
		assert_int_equal(plan_cfg(&s[1], &b->p, &cfg, err, sizeof err), 0);
		assert_int_equal(cfg.overlap_param_gather, z >= 1 && z <= 2);
		assert_true(b->e.step_ns <= a->e.step_ns);
		faster += b->e.step_ns < a->e.step_ns;
		if (z >= 1 && z <= 2 && a->p.dp > 1 && b->e.step_ns == a->e.step_ns)
			fail_msg("ZeRO %d dp %d tp %d: no faster with --overlap-param-gather", z,
				 a->p.dp, a->p.v[PLAN_TP]);
	}
	assert_true(faster > 0);
	plan_result_free(&r[0]);
	plan_result_free(&r[1]);
}

/* --tp-comm-overlap in the search: on every layout with sequence parallelism but Oases's,
 * off on the others, which it refuses in pemu run; the same layouts fit as without it,
 * and its pemu run and Megatron-LM lines give the layout back, the flag with it. */
static void test_tp_comm_overlap_search(void **state)
{
	char *plan_argv[] = {"plan", "--model",           "tiny", "--global-batch-size",
			     "32",   "--tp-comm-overlap", NULL};
	struct plan_space s[2];
	struct emu_config ec;
	struct plan_result r[2];
	char err[512];
	int on = 0;

	(void)state;
	cluster(&ec, 0);
	for (int k = 0; k < 2; k++) {
		space(&s[k], "tiny", 32, 2);
		s[k].fixed = 1u << PLAN_PP;
		s[k].base.tp_comm_overlap = k;
		assert_int_equal(plan_search(&s[k], &ec, 1, NULL, NULL, &r[k], err, sizeof err), 0);
	}
	assert_int_equal(r[1].n, r[0].n);
	for (int i = 0; i < r[0].n; i++) {
		const struct plan_entry *a = &r[0].all[i], *b = &r[1].all[i];
		struct run_cfg cfg, got;
		char *buf = NULL, *argv[128];
		size_t len = 0;
		FILE *f;
		int n;

		assert_memory_equal(a->p.v, b->p.v, sizeof a->p.v);
		assert_int_equal(b->fate, a->fate);
		if (a->fate != PLAN_OK)
			continue;
		assert_int_equal(plan_cfg(&s[1], &b->p, &cfg, err, sizeof err), 0);
		assert_int_equal(cfg.tp_comm_overlap,
				 cfg.sp && !cfg.tp_overlap && cfg.recompute != PAR_RECOMPUTE_OASES);
		on += cfg.tp_comm_overlap;
		f = open_memstream(&buf, &len);
		cmd_plan_pemu_run(f, 6, plan_argv, &cfg, 0);
		fclose(f);
		n = split(buf, "run", argv, 120);
		assert_int_equal(cmd_run_parse_cfg(n, argv, 0, &got), 0);
		assert_same_layout(&cfg, &got);
		free(buf);
	}
	assert_true(on > 0);
	plan_result_free(&r[0]);
	plan_result_free(&r[1]);
}

/* --p2p-sync (Megatron-LM's synchronous pipeline sends) applies to the layouts that run
 * 1F1B over a pipeline, or the interleaved schedule over more than 2 stages (but Oases's
 * sub-batches), and no other, --scatter-gather-tensors-in-
 * pipeline to the pipelines with tp and without sp: the same layouts fit, fail or are
 * refused as without them, and their run lines say so and parse back. */
static void test_pipeline_flags_search(void **state)
{
	char *plan_argv[] = {"plan",
			     "--model",
			     "tiny",
			     "--num-layers",
			     "8",
			     "--global-batch-size",
			     "32",
			     "--p2p-sync",
			     "--scatter-gather-tensors-in-pipeline",
			     NULL};
	struct plan_space sp[2], s;
	struct emu_config ec;
	struct plan_result r, r0;
	char err[512];
	int on = 0, off = 0, cut = 0, il_sync = 0, il_megatron = 0;

	(void)state;
	cluster(&ec, 0);
	for (int k = 0; k < 2; k++) {
		space(&sp[k], "tiny", 32, 2);    /* (micro-batches of 2: Oases's layouts too) */
		sp[k].base.model.num_layers = 8; /* (interleaved over 4 stages too) */
		sp[k].base.p2p_sync = k;
		sp[k].base.pp_scatter = k;
		sp[k].both_sp = 1; /* (--with-sp-off: the layouts without sp too) */
		assert_int_equal(
			plan_search(&sp[k], &ec, 1, NULL, NULL, k ? &r : &r0, err, sizeof err), 0);
	}
	s = sp[1];
	assert_int_equal(r.n, r0.n); /* the flags take no layout away */
	for (int i = 0; i < r.n; i++) {
		const struct plan_entry *a = &r.all[i];
		struct run_cfg cfg, got;
		char *buf = NULL, *argv[128];
		size_t len = 0;
		FILE *f;
		int n;

		assert_memory_equal(a->p.v, r0.all[i].p.v, sizeof a->p.v);
		assert_int_equal(a->fate, r0.all[i].fate);
		if (a->fate != PLAN_OK)
			continue;
		assert_int_equal(plan_cfg(&s, &a->p, &cfg, err, sizeof err), 0);
		assert_int_equal(cfg.p2p_sync, cfg.mesh.size[MESH_PP] > 1 && !cfg.tp_overlap &&
						       (cfg.schedule == SCHED_1F1B ||
							(cfg.schedule == SCHED_INTERLEAVED &&
							 cfg.mesh.size[MESH_PP] > 2)));
		il_sync += cfg.p2p_sync && cfg.schedule == SCHED_INTERLEAVED;
		if (!cmd_plan_megatron_gap(&cfg, &ec)) { /* Megatron's line: its flag */
			int il = cfg.p2p_sync && cfg.schedule == SCHED_INTERLEAVED;

			assert_int_equal(megatron_line_parses(&cfg, &ec, &got,
							      " --no-overlap-p2p-communication"),
					 il);
			if (il)
				assert_true(got.p2p_sync);
			il_megatron += il;
		}
		assert_int_equal(cfg.pp_scatter,
				 cfg.mesh.size[MESH_PP] > 1 && cfg.mesh.size[MESH_TP] > 1 &&
					 !cfg.sp && cfg.schedule != SCHED_HELIX && !cfg.tpf_layers);
		on += cfg.p2p_sync;
		off += !cfg.p2p_sync;
		cut += cfg.pp_scatter;
		f = open_memstream(&buf, &len);
		cmd_plan_pemu_run(f, 9, plan_argv, &cfg, 0);
		fclose(f);
		n = split(buf, "run", argv, 120);
		assert_int_equal(cmd_run_parse_cfg(n, argv, 0, &got), 0);
		assert_same_layout(&cfg, &got);
		assert_int_equal(got.p2p_sync, cfg.p2p_sync);
		assert_int_equal(got.pp_scatter, cfg.pp_scatter);
		free(buf);
	}
	assert_true(on > 0 && off > 0 && cut > 0 && il_sync > 0 && il_megatron > 0);
	plan_result_free(&r);
	plan_result_free(&r0);
}

/* Where Megatron-LM has no such run, no line: 12 GPUs on nodes of 8 (torchrun starts as
 * many on each), expert with tensor parallelism but no sequence parallelism, ZeRO-3; and
 * a fixed --vpp N is the interleaved schedule's only. */
static void test_megatron_gaps_and_vpp(void **state)
{
	struct plan_space s;
	struct emu_config ec;
	struct run_cfg cfg;
	struct plan_point *pts;
	char err[512];
	int n;

	(void)state;
	cluster(&ec, 0);
	run_cfg_init(&cfg);
	mesh_init(&cfg.mesh, 2, 1, 1, 6, 1);
	assert_non_null(cmd_plan_megatron_gap(&cfg, &ec));
	mesh_init(&cfg.mesh, 2, 1, 1, 4, 1);
	assert_null(cmd_plan_megatron_gap(&cfg, &ec));
	cfg.ep = 2;
	assert_non_null(cmd_plan_megatron_gap(&cfg, &ec));
	cfg.sp = 1;
	assert_null(cmd_plan_megatron_gap(&cfg, &ec));
	cfg.zero = 3;
	assert_non_null(cmd_plan_megatron_gap(&cfg, &ec));
	cfg.zero = 1; /* Megatron-Core has no scatter/gather of pipeline messages */
	cfg.ep = 1;
	cfg.sp = 0;
	mesh_init(&cfg.mesh, 2, 1, 1, 2, 2);
	assert_null(cmd_plan_megatron_gap(&cfg, &ec));
	cfg.pp_scatter = 1;
	assert_non_null(strstr(cmd_plan_megatron_gap(&cfg, &ec), "scatter/gather"));
	space(&s, "small", 16, 2);
	s.base.vpp = 2;
	s.fixed = 1u << PLAN_VPP;
	pts = plan_points(&s, &n);
	assert_true(n > 0);
	for (int i = 0; i < n; i++) {
		assert_int_equal(pts[i].v[PLAN_SCHEDULE], SCHED_INTERLEAVED);
		assert_int_equal(pts[i].v[PLAN_VPP], 2);
		assert_true(pts[i].v[PLAN_PP] > 1);
	}
	assert_int_equal(plan_cfg(&s, &pts[0], &cfg, err, sizeof err) == 0 ||
				 strstr(err, "interleaved") != NULL,
			 1);
	free(pts);
}

/* A bucket size given (--bucket-size or --ddp-bucket-size) goes into the Megatron-LM line
 * as --ddp-bucket-size, in parameters, where it applies (with --overlap-grad-reduce), and
 * parses back to the same buckets; Megatron's default needs no flag. */
static void test_megatron_bucket_size(void **state)
{
	struct emu_config ec;
	struct run_cfg cfg, got;
	uint64_t want[] = {0, 4000000, 3000000};
	char err[256];

	(void)state;
	cluster(&ec, 0);
	for (int k = 0; k < 3; k++) {
		run_cfg_init(&cfg);
		cfg.model = model_preset("small")->cfg;
		mesh_init(&cfg.mesh, 2, 1, 1, 4, 1);
		cfg.mbs = 2;
		cfg.gbs = 16;
		cfg.ep = 1;
		cfg.sp = 1;
		cfg.zero = 1;
		cfg.prec = PREC_BF16;
		cfg.overlap_grad = 1;
		cfg.bucket_bytes = k == 1 ? 8000000 : 0;
		cfg.bucket_params = k == 2 ? 3000000 : 0;
		assert_int_equal(run_cfg_finish(&cfg, 8, err, sizeof err), 0);
		assert_int_equal(megatron_line_parses(&cfg, &ec, &got, "--ddp-bucket-size"), k > 0);
		assert_int_equal(run_bucket_params(&got), k ? want[k] : run_bucket_params(&cfg));
		assert_int_equal(got.bucket_params, want[k]);
	}
}

static void test_lines_parse_back(void **state)
{
	(void)state;
	if (!test_skip_large())
		parse_back("tiny", 32, 0);
	parse_back("moe-tiny", 32, 1); /* MoE in every layer: Megatron's lines have experts */
}

/* The worker processes are all waited for: a space whose last layout (pp 8, 16384
 * micro-batches) runs far longer than the others, so that one worker ends early, gives
 * the same entries on two processes as on one (the search once stopped when the first
 * worker ended, and marked the other's point failed). */
static void test_workers_all_waited(void **state)
{
	struct plan_space s;
	struct emu_config ec;
	struct plan_result a, b;
	char err[512];

	(void)state;
	space(&s, "gpt2-124m", 16384, 1);
	s.base.schedule = SCHED_1F1B;
	s.base.schedule_set = 1;
	s.base.flash = 1;
	s.fixed = 1u << PLAN_TP | 1u << PLAN_MBS | 1u << PLAN_ZERO | 1u << PLAN_RECOMPUTE |
		  1u << PLAN_FLASH | 1u << PLAN_SCHEDULE | 1u << PLAN_OVERLAP;
	s.base.mbs = 1;
	cluster(&ec, 0);
	assert_int_equal(plan_search(&s, &ec, 2, NULL, NULL, &a, err, sizeof err), 0);
	assert_int_equal(plan_search(&s, &ec, 1, NULL, NULL, &b, err, sizeof err), 0);
	assert_int_equal(a.n, b.n);
	assert_int_equal(a.failed, 0);
	assert_int_equal(a.nok, 3); /* pp 2, 4, 8 (pp 1 has no schedule) */
	for (int i = 0; i < a.n; i++) {
		assert_int_equal(a.all[i].fate, b.all[i].fate);
		assert_int_equal(a.all[i].e.step_ns, b.all[i].e.step_ns);
	}
	plan_result_free(&a);
	plan_result_free(&b);
}

/* Oases's degrees a block, one option of the space: on gpt2-124m its search chooses mixed
 * degrees for some layouts; each such ranked layout is its search's K:T run (figures as a
 * dry-run of that K:T gives), and its pemu run line parses back to it, --tp-first too. */
static void test_oases_degrees(void **state)
{
	char *plan_argv[] = {"plan", "--model", "gpt2-124m", "--global-batch-size", "64", NULL};
	struct plan_space s;
	struct emu_config ec;
	struct plan_result r;
	char err[512];
	int mixed = 0;

	(void)state;
	space(&s, "gpt2-124m", 64, 8);
	s.max_mbs = 8; /* (even under the sanitizers: Oases splits a micro-batch in two) */
	s.base.tp_overlap = PAR_OVERLAP_OASES;
	s.base.recompute = PAR_RECOMPUTE_OASES;
	s.fixed = 1u << PLAN_PP | 1u << PLAN_OVERLAP | 1u << PLAN_RECOMPUTE | 1u << PLAN_FLASH;
	s.base.flash = 1;
	cluster(&ec, 0);
	assert_int_equal(plan_search(&s, &ec, 1, NULL, NULL, &r, err, sizeof err), 0);
	for (int k = 0; k < r.nok; k++) {
		const struct plan_entry *x = &r.all[r.rank[k]];
		struct plan_point uniform = x->p;
		struct run_cfg cfg, got;
		struct plan_eval e;
		char *buf = NULL, *argv[128];
		size_t len = 0;
		FILE *f;

		if (!x->p.tpf_layers)
			continue;
		uniform.tpf_layers = uniform.tpf = 0;
		assert_int_equal(plan_cfg(&s, &uniform, &cfg, err, sizeof err), 0);
		assert_int_equal(cfg.tpf_layers, 0);
		assert_int_equal(oases_point(&ec, &s, &x->p, &cfg, &e), PLAN_OK);
		assert_int_equal(e.step_ns, x->e.step_ns);
		assert_int_equal(e.peak, x->e.peak);
		f = open_memstream(&buf, &len);
		cmd_plan_pemu_run(f, 5, plan_argv, &cfg, 0);
		fclose(f);
		assert_non_null(strstr(buf, " --tp-first "));
		assert_int_equal(cmd_run_parse_cfg(split(buf, "run", argv, 120), argv, 0, &got), 0);
		assert_same_layout(&cfg, &got);
		free(buf);
		mixed++;
	}
	assert_true(mixed > 0 && r.by_same > 0);
	plan_result_free(&r);
}

/* --validate's tiny twin keeps the layout, passes with the strategies as they are and
 * fails with a deliberate bug in one. With the gradients' overlap it runs several buckets
 * of 4 KiB whatever size the real model's have (--ddp-bucket-size once made it refuse
 * the pair), so that ZeRO-1's buckets are checked against the serial reference. */
static void check_validate(const char *preset, int tp, int cp, int dp, int pp, int ep,
			   enum par_bug bug)
{
	struct run_cfg cfg, tiny;
	struct emu_config ec;
	struct verify_result v;
	struct data d;
	char err[512];

	run_cfg_init(&cfg);
	cfg.preset = model_preset(preset);
	cfg.model = cfg.preset->cfg;
	cfg.model.seq_len = 64;
	mesh_init(&cfg.mesh, tp, cp, 1, dp, pp);
	cfg.ep = ep;
	cfg.sp = tp > 1;
	cfg.gbs = 8 * dp;
	cfg.mbs = 2;
	cfg.zero = 1;
	cfg.overlap_grad = 1;
	cfg.bucket_params = 1000000;
	cfg.steps = 1;
	cfg.data = NULL;
	assert_int_equal(run_cfg_finish(&cfg, GPUS, err, sizeof err), 0);
	assert_int_equal(plan_tiny(&cfg, &tiny, err, sizeof err), 0);
	assert_int_equal(tiny.overlap_grad, 1);
	assert_int_equal(run_bucket_params(&tiny), 4096 / 4); /* (fp32) */
	assert_memory_equal(tiny.mesh.size, cfg.mesh.size, sizeof cfg.mesh.size);
	assert_int_equal(tiny.ep, cfg.ep);
	assert_int_equal(tiny.schedule, cfg.schedule);
	assert_int_equal(tiny.zero, cfg.zero);
	assert_int_equal(tiny.sp, cfg.sp);
	assert_int_equal(tiny.flash, cfg.flash);
	assert_true(tiny.model.hidden < cfg.model.hidden || cfg.model.hidden <= 64);
	data_builtin(&d, 1 << 16);
	tiny.data = &d;
	cluster(&ec, 0);
	assert_int_equal(plan_validate(&ec, &tiny, &v), 0);
	assert_true(v.passed);
	tiny.bug = bug;
	assert_int_equal(plan_validate(&ec, &tiny, &v), 0);
	if (v.passed)
		fail_msg("%s tp %d cp %d dp %d pp %d ep %d: validate passed with bug %d", preset,
			 tp, cp, dp, pp, ep, bug);
	data_free(&d);
}

static void test_validate_fails_on_a_bug(void **state)
{
	(void)state;
	check_validate("tiny", 2, 2, 1, 2, 1, PAR_BUG_CP_CHUNKS);
	check_validate("moe-tiny", 1, 1, 4, 2, 2, PAR_BUG_EP_SPLIT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ranking_is_brute_force),
		cmocka_unit_test(test_bound_under_moe),
		cmocka_unit_test(test_zero_folds_exactly),
		cmocka_unit_test(test_param_gather_search),
		cmocka_unit_test(test_tp_comm_overlap_search),
		cmocka_unit_test(test_pipeline_flags_search),
		cmocka_unit_test(test_megatron_gaps_and_vpp),
		cmocka_unit_test(test_megatron_bucket_size),
		cmocka_unit_test(test_lines_parse_back),
		cmocka_unit_test(test_oases_degrees),
		cmocka_unit_test(test_workers_all_waited),
		cmocka_unit_test(test_validate_fails_on_a_bug),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
