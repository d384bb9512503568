/* Hidden dropout (models/dropout.h): the masks' generator, and every layout drawing the
 * serial model's masks (verify against the reference with --hidden-dropout 0.1), a rank
 * keying its own rows caught, bitwise the same on any number of host threads, the masks'
 * bytes charged as activation memory. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common.h"
#include "dropout.h"
#include "mem.h"
#include "verify.h"

static struct data corpus;

enum { DM = 512, DC = 64 };

struct masks {
	float x[DM * DC], out[DM * DC], half[DM * DC], dx[DM * DC];
	unsigned char mask[DM * DC], mhalf[DM * DC];
	struct dropout d;
	struct drop_rows r;
};

static int masks_dev(struct emu_dev *d, void *ctx)
{
	struct masks *t = ctx;
	struct drop_rows lo = t->r, hi = t->r;
	struct kctx kc, *k = &kc;

	kctx_init(k, d, PREC_FP32);
	dropout_add_fwd(k, t->out, t->mask, NULL, t->x, &t->d, &t->r, DM, DC);
	/* the same rows as two ranks' halves (sequence parallelism's cut) */
	hi.row0 = t->r.row0 + DM / 2;
	memcpy(t->half, t->x, sizeof t->half); /* (dropout_fwd works in place) */
	dropout_fwd(k, t->half, t->mhalf, &t->d, &lo, DM / 2, DC);
	dropout_fwd(k, t->half + DM / 2 * DC, t->mhalf + DM / 2 * DC, &t->d, &hi, DM / 2, DC);
	dropout_bwd(k, t->dx, t->x, t->mask, t->d.p, (size_t)DM * DC);
	return 0;
}

static void run_masks(struct masks *t)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 1, 0, 0);

	assert_int_equal(emu_cluster_run(c, masks_dev, t), 0);
	emu_cluster_free(c);
}

/* The kept fraction is 1 - p within 5 standard deviations; kept elements are x / (1 - p)
 * exactly, dropped ones 0; two halves of the rows draw the whole's mask; the backward
 * passes dy through the same mask; another site, seed or position draws another mask. */
static void test_masks(void **state)
{
	static struct masks t, u;
	int pos[32];
	size_t kept = 0, n = (size_t)DM * DC, same = 0;
	double p = 0.1, sd = sqrt(p * (1 - p) / (double)n);

	(void)state;
	for (int t0 = 0; t0 < 32; t0++)
		pos[t0] = 32 + t0; /* a context-parallel rank's second chunk */
	t.d = (struct dropout){0.1f, 11, dropout_site(3, DROP_MLP)};
	t.r = (struct drop_rows){40, 32, 64, 0, pos};
	for (size_t i = 0; i < n; i++)
		t.x[i] = test_uniform(5, i);
	run_masks(&t);
	for (size_t i = 0; i < n; i++) {
		float want = t.mask[i] ? t.x[i] * (1.0f / 0.9f) : 0.0f;

		kept += t.mask[i];
		if (memcmp(&t.out[i], &want, sizeof want) || memcmp(&t.dx[i], &want, sizeof want))
			fail_msg("element %zu: %g, backward %g, want %g", i, (double)t.out[i],
				 (double)t.dx[i], (double)want);
		if (t.mask[i] != dropout_keep(&t.d, &t.r, (int)(i / DC), DC, (int)(i % DC)))
			fail_msg("element %zu: the kernel's mask is not the generator's", i);
	}
	if (fabs((double)kept / (double)n - (1 - p)) > 5 * sd)
		fail_msg("kept %.4f of the elements, want %.4f +- %.4f", (double)kept / (double)n,
			 1 - p, 5 * sd);
	assert_memory_equal(t.mask, t.mhalf, n);
	assert_memory_equal(t.out, t.half, n * sizeof(float));
	u = t;
	u.d.site = dropout_site(3, DROP_ATTN);
	u.r.pos = NULL; /* positions 0..31: other tokens */
	run_masks(&u);
	for (size_t i = 0; i < n; i++)
		same += u.mask[i] == t.mask[i];
	/* independent masks agree on p^2 + (1 - p)^2 = 0.82 of the elements */
	assert_true(fabs((double)same / (double)n - 0.82) < 0.02);
}

/* Layouts against the serial reference, each with hidden dropout 0.1. */
struct layout {
	const char *name;
	const char *model;
	int dp, tp, pp, cp, ep, sp, zero;
	enum par_recompute recompute;
	enum sched_kind schedule;
	enum par_overlap overlap;
	enum par_cp_comm comm;
	int tpf_layers, tpf;
};

static const struct layout layouts[] = {
	{"tp2 sp", "tiny", 1, 2, 1, 1, 1, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0, 0, 0},
	{"tp2 pp2 dp2 zero1", "tiny", 2, 2, 2, 1, 1, 0, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0, 0,
	 0},
	{"cp2 ring", "tiny", 1, 1, 1, 2, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, PAR_CP_P2P, 0,
	 0},
	{"cp2 ulysses dp2", "tiny", 2, 1, 1, 2, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0,
	 PAR_CP_A2A, 0, 0},
	{"pp2 helix", "tiny", 1, 1, 2, 1, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_HELIX, 0, 0, 0, 0},
	{"pp2 zb-h1 full recompute", "tiny", 1, 1, 2, 1, 1, 0, 0, PAR_RECOMPUTE_FULL, SCHED_ZBH1, 0,
	 0, 0, 0},
	{"tp2 oases overlap and recompute", "tiny", 1, 2, 1, 1, 1, 0, 0, PAR_RECOMPUTE_OASES,
	 SCHED_1F1B, PAR_OVERLAP_OASES, 0, 0, 0},
	{"tp4 mixed degrees 1:2", "tiny", 1, 4, 1, 1, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0,
	 1, 2},
	{"tp2 sp dp2 zero3", "tiny", 2, 2, 1, 1, 1, 1, 3, PAR_RECOMPUTE_SELECTIVE, SCHED_1F1B, 0, 0,
	 0, 0},
	{"moe ep2 dp2", "moe-tiny", 2, 1, 1, 1, 2, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0, 0,
	 0},
	{"moe tp2 sp ep2", "moe-tiny", 1, 2, 1, 1, 2, 1, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0, 0,
	 0},
};

static void layout_cfg(struct run_cfg *cfg, const struct layout *l)
{
	test_make_cfg(cfg, l->model, l->dp, l->tp, l->pp, &corpus);
	mesh_init(&cfg->mesh, l->tp, l->cp, 1, l->dp, l->pp);
	cfg->model.hidden_dropout = 0.1f;
	cfg->ep = l->ep;
	cfg->sp = l->sp;
	cfg->zero = l->zero;
	cfg->recompute = l->recompute;
	cfg->schedule = l->schedule;
	cfg->tp_overlap = l->overlap;
	cfg->cp_comm = l->comm;
	cfg->flash = l->cp > 1;
	cfg->tpf_layers = l->tpf_layers;
	cfg->tpf = l->tpf;
	cfg->gbs = 4 * l->dp * l->pp;
	if (l->pp > 1)
		cfg->model.num_layers = 4;
}

static void test_layouts(void **state)
{
	const char *filter = getenv("PEMU_TEST_FILTER");
	int failed = 0;

	(void)state;
	for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
		struct run_cfg cfg;
		struct verify_result v;

		if (filter && !test_name_selected(layouts[i].name, filter))
			continue;
		layout_cfg(&cfg, &layouts[i]);
		v = test_verify(&cfg, NULL, 0);
		printf("# %-4s %-32s loss %.2e grad %.2e param %.2e\n", v.passed ? "ok" : "FAIL",
		       layouts[i].name, v.loss_err, v.grad_err, v.param_err);
		failed += !v.passed;
	}
	assert_int_equal(failed, 0);
}

/* The dropout is on: the reference's losses move with p (0.1 against 0). */
static void test_dropout_changes_the_loss(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 1, 0, 0);
	struct run_out o[2];
	struct run_cfg cfg;

	(void)state;
	for (int i = 0; i < 2; i++) {
		test_make_cfg(&cfg, "tiny", 1, 1, 1, &corpus);
		cfg.model.hidden_dropout = i ? 0.1f : 0.0f;
		run_alloc(&o[i], &cfg, 0);
		if (run_reference(c, &cfg, &o[i]))
			fail_msg("reference failed: %s", emu_cluster_report(c));
	}
	for (int s = 0; s < cfg.steps; s++)
		if (fabsf(o[0].loss_part[s] - o[1].loss_part[s]) < 1e-4f)
			fail_msg("step %d: loss %g with dropout, %g without", s,
				 (double)o[1].loss_part[s], (double)o[0].loss_part[s]);
	run_free(&o[0]);
	run_free(&o[1]);
	emu_cluster_free(c);
}

/* Ranks that key the masks by their own rows (the sequence-parallel share, the
 * context-parallel positions) draw other masks than the serial model: verify fails. */
static void test_local_keys_caught(void **state)
{
	static const int which[] = {0, 2}; /* tp2 sp, cp2 ring */

	(void)state;
	for (size_t i = 0; i < sizeof which / sizeof *which; i++) {
		struct run_cfg cfg;

		layout_cfg(&cfg, &layouts[which[i]]);
		cfg.bug = PAR_BUG_DROPOUT_LOCAL;
		if (test_verify(&cfg, NULL, 0).passed)
			fail_msg("%s: verify passed with the masks keyed by local rows",
				 layouts[which[i]].name);
	}
}

static void test_same_on_host_threads(void **state)
{
	struct run_cfg cfg;

	(void)state;
	layout_cfg(&cfg, &layouts[1]); /* tp2 pp2 dp2 */
	test_same_on_threads(&cfg);
}

/* One device, no recomputation: at the end of forward every mask is held, one byte an
 * element of the embeddings and of each layer's two branches, so the activations' peak
 * grows by (2 L + 1) B T h bytes. */
static void test_masks_charged(void **state)
{
	uint64_t peak[2];

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct run_cfg cfg;
		struct run_out o;
		struct emu_cluster *c;

		test_make_cfg(&cfg, "tiny", 1, 1, 1, NULL);
		cfg.model.hidden_dropout = i ? 0.1f : 0.0f;
		c = test_dry(&cfg, &o, 0);
		peak[i] = mem_peak_bytes(emu_cluster_dev(c, 0), MEM_ACT);
		run_free(&o);
		emu_cluster_free(c);
	}
	{
		const struct gpt_config *g = &model_preset("tiny")->cfg;
		uint64_t want = (uint64_t)(2 * g->num_layers + 1) * 2 * g->seq_len * g->hidden;

		assert_int_equal(peak[1] - peak[0], want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_masks),
		cmocka_unit_test(test_dropout_changes_the_loss),
		cmocka_unit_test(test_layouts),
		cmocka_unit_test(test_local_keys_caught),
		cmocka_unit_test(test_same_on_host_threads),
		cmocka_unit_test(test_masks_charged),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
