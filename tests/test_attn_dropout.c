/* Attention dropout (models/dropout.h): the probabilities' generator and its keying by
 * global indices, every layout drawing the serial model's masks (verify against the
 * reference with --attention-dropout 0.1, the standard and the memory-efficient paths),
 * a rank keying its own heads and key positions caught, bitwise the same on any number
 * of host threads, and the memory the standard path keeps (the mask and P', none on the
 * memory-efficient path). */
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

/* The kept fraction of B sequences, H heads, S x S pairs is 1 - p within 5 standard
 * deviations; attn_drop_row keeps what attn_drop_keep says, scaled by 1 / (1 - p). */
static void test_generator(void **state)
{
	enum { B = 2, H = 4, S = 64 };
	struct attn_drop d = {.p = 0.1f, .seed = 11, .layer = 3, .seq0 = 40, .S = S};
	double n = (double)B * H * S * S, kept = 0, sd = sqrt(0.1 * 0.9 / n);
	float row[S];
	unsigned char mask[S];

	(void)state;
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			uint64_t key = attn_drop_key(&d, b, h);

			for (int q = 0; q < S; q++) {
				for (int k = 0; k < S; k++)
					row[k] = test_uniform(5, (uint64_t)k) + 1.0f;
				attn_drop_row(&d, key, q, row, mask, S);
				for (int k = 0; k < S; k++) {
					float x = test_uniform(5, (uint64_t)k) + 1.0f;
					float want = mask[k] ? x * (1.0f / 0.9f) : 0.0f;

					kept += mask[k];
					assert_int_equal(mask[k], attn_drop_keep(&d, key, q, k));
					assert_memory_equal(&row[k], &want, sizeof want);
				}
			}
		}
	if (fabs(kept / n - 0.9) > 5 * sd)
		fail_msg("kept %.4f of the probabilities, want 0.9 +- %.4f", kept / n, 5 * sd);
}

/* What a rank sees is the whole's: its heads (head0 on), a block of keys and of queries at
 * their global positions; another layer, head, sequence or seed draws another mask. */
static void test_global_indices(void **state)
{
	enum { S = 64 };
	struct attn_drop whole = {.p = 0.1f, .seed = 11, .layer = 1, .seq0 = 6, .S = S};
	struct attn_drop part = whole, other = whole;
	int qpos[S / 2], kpos[S / 2], same = 0, n = 0;

	(void)state;
	for (int i = 0; i < S / 2; i++) {
		qpos[i] = S / 2 + i; /* a ring rank's second chunk of queries */
		kpos[i] = i;         /* against the sender's first chunk of keys */
	}
	part.head0 = 2; /* tp rank 1 of 2 of 4 heads */
	part.seq0 = 5;  /* its sequence 1 is the whole's 0 */
	part.qpos = qpos;
	part.kpos = kpos;
	other.layer = 2;
	for (int h = 0; h < 2; h++) {
		uint64_t kw = attn_drop_key(&whole, 0, 2 + h), kp = attn_drop_key(&part, 1, h);
		uint64_t ko = attn_drop_key(&other, 0, 2 + h);

		for (int i = 0; i < S / 2; i++)
			for (int j = 0; j < S / 2; j++) {
				int w = attn_drop_keep(&whole, kw, S / 2 + i, j);

				if (attn_drop_keep(&part, kp, i, j) != w)
					fail_msg("head %d query %d key %d: the part's mask differs",
						 h, i, j);
				same += attn_drop_keep(&other, ko, S / 2 + i, j) == w;
				n++;
			}
	}
	/* independent masks agree on p^2 + (1 - p)^2 = 0.82 of the probabilities */
	assert_true(fabs((double)same / n - 0.82) < 0.03);
}

/* Layouts against the serial reference, each with attention dropout 0.1. */
struct layout {
	const char *name;
	const char *model;
	int dp, tp, pp, cp, ep, sp, zero, flash;
	enum par_recompute recompute;
	enum sched_kind schedule;
	enum par_overlap overlap;
	enum par_cp_comm comm;
};

static const struct layout layouts[] = {
	{"tp2", "tiny", 1, 2, 1, 1, 1, 0, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp2 ring", "tiny", 1, 1, 1, 2, 1, 0, 0, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, PAR_CP_P2P},
	{"tp2 sp", "tiny", 1, 2, 1, 1, 1, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"tp2 sp flash", "tiny", 1, 2, 1, 1, 1, 1, 0, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"cp2 ulysses", "tiny", 1, 1, 1, 2, 1, 0, 0, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0,
	 PAR_CP_A2A},
	{"tp2 cp2 ring", "tiny", 1, 2, 1, 2, 1, 0, 0, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0,
	 PAR_CP_P2P},
	{"cp2 all-gather", "tiny", 1, 1, 1, 2, 1, 0, 0, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0,
	 PAR_CP_ALL_GATHER},
	{"pp2 1f1b", "tiny", 1, 1, 2, 1, 1, 0, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"pp2 interleaved", "tiny", 1, 1, 2, 1, 1, 0, 0, 0, PAR_RECOMPUTE_NONE, SCHED_INTERLEAVED,
	 0, 0},
	{"pp2 helix", "tiny", 1, 1, 2, 1, 1, 0, 0, 0, PAR_RECOMPUTE_NONE, SCHED_HELIX, 0, 0},
	{"pp2 zb-h1 full recompute", "tiny", 1, 1, 2, 1, 1, 0, 0, 0, PAR_RECOMPUTE_FULL, SCHED_ZBH1,
	 0, 0},
	{"tp2 oases overlap and recompute", "tiny", 1, 2, 1, 1, 1, 0, 0, 0, PAR_RECOMPUTE_OASES,
	 SCHED_1F1B, PAR_OVERLAP_OASES, 0},
	{"selective recompute", "tiny", 1, 1, 1, 1, 1, 0, 0, 0, PAR_RECOMPUTE_SELECTIVE, SCHED_1F1B,
	 0, 0},
	{"full recompute", "tiny", 1, 1, 1, 1, 1, 0, 0, 0, PAR_RECOMPUTE_FULL, SCHED_1F1B, 0, 0},
	{"dp2 zero3", "tiny", 2, 1, 1, 1, 1, 0, 3, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"dp2", "tiny", 2, 1, 1, 1, 1, 0, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"flash", "tiny", 1, 1, 1, 1, 1, 0, 0, 1, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"standard", "tiny", 1, 1, 1, 1, 1, 0, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0, 0},
	{"moe tp2 sp ep2", "moe-tiny", 1, 2, 1, 1, 2, 1, 0, 0, PAR_RECOMPUTE_NONE, SCHED_1F1B, 0,
	 0},
};

static void layout_cfg(struct run_cfg *cfg, const struct layout *l)
{
	test_make_cfg(cfg, l->model, l->dp, l->tp, l->pp, &corpus);
	mesh_init(&cfg->mesh, l->tp, l->cp, 1, l->dp, l->pp);
	cfg->model.attention_dropout = 0.1f;
	cfg->ep = l->ep;
	cfg->sp = l->sp;
	cfg->zero = l->zero;
	cfg->recompute = l->recompute;
	cfg->schedule = l->schedule;
	cfg->tp_overlap = l->overlap;
	cfg->cp_comm = l->comm;
	cfg->flash = l->flash;
	cfg->gbs = 4 * l->dp * l->pp;
	if (l->pp > 1)
		cfg->model.num_layers = 4;
	if (l->schedule == SCHED_INTERLEAVED)
		cfg->vpp = 2;
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

/* The dropout is on in the reference: its losses move with p (0.1 against 0). */
static void test_dropout_changes_the_loss(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-a100", 1, 1, 0, 0);
	struct run_out o[2];
	struct run_cfg cfg;

	(void)state;
	for (int i = 0; i < 2; i++) {
		test_make_cfg(&cfg, "tiny", 1, 1, 1, &corpus);
		cfg.model.attention_dropout = i ? 0.1f : 0.0f;
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

/* Ranks that key the masks by their own heads (tensor parallelism) or their own key
 * positions (the ring's blocks) draw other masks than the serial model: verify fails. */
static void test_local_keys_caught(void **state)
{
	static const int which[] = {0, 1}; /* tp2, cp2 ring */

	(void)state;
	for (size_t i = 0; i < sizeof which / sizeof *which; i++) {
		struct run_cfg cfg;

		layout_cfg(&cfg, &layouts[which[i]]);
		cfg.bug = PAR_BUG_ATTN_DROPOUT_LOCAL;
		if (test_verify(&cfg, NULL, 0).passed)
			fail_msg("%s: verify passed with the masks keyed by local indices",
				 layouts[which[i]].name);
	}
}

static void test_same_on_host_threads(void **state)
{
	struct run_cfg cfg;

	(void)state;
	layout_cfg(&cfg, &layouts[5]); /* tp2 cp2 ring */
	test_same_on_threads(&cfg);
}

/* One device, no recomputation, bf16: at the end of forward every layer holds its mask
 * (a byte a score) and its dropped probabilities P' (2 bytes a score), 3 a s^2 b bytes a
 * layer on top of the 2 a s^2 b of the softmax's output (Korthikanti et al. 2022: 5 a s^2
 * b with dropout); the memory-efficient path keeps neither. */
static void test_memory(void **state)
{
	uint64_t peak[2][2];

	(void)state;
	for (int flash = 0; flash < 2; flash++)
		for (int i = 0; i < 2; i++) {
			struct run_cfg cfg;
			struct run_out o;
			struct emu_cluster *c;

			test_make_cfg(&cfg, "tiny", 1, 1, 1, NULL);
			cfg.model.attention_dropout = i ? 0.1f : 0.0f;
			cfg.flash = flash;
			c = test_dry(&cfg, &o, 0);
			peak[flash][i] = mem_peak_bytes(emu_cluster_dev(c, 0), MEM_ACT);
			run_free(&o);
			emu_cluster_free(c);
		}
	{
		const struct gpt_config *g = &model_preset("tiny")->cfg;
		uint64_t s = (uint64_t)g->seq_len, b = 2; /* test_make_cfg's micro-batch */
		uint64_t want = (uint64_t)g->num_layers * (1 + 2) * (uint64_t)g->heads * s * s * b;

		assert_int_equal(peak[0][1] - peak[0][0], want);
		assert_int_equal(peak[1][1], peak[1][0]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_generator),
		cmocka_unit_test(test_global_indices),
		cmocka_unit_test(test_dropout_changes_the_loss),
		cmocka_unit_test(test_layouts),
		cmocka_unit_test(test_local_keys_caught),
		cmocka_unit_test(test_same_on_host_threads),
		cmocka_unit_test(test_memory),
	};
	int rc;

	data_builtin(&corpus, 1 << 16);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	data_free(&corpus);
	return rc;
}
