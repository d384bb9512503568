/* The team of host threads one device's kernels share (models/team.h): team_for runs every
 * element of its range once, in pieces on grain boundaries, also when called from inside a
 * piece; and every kernel gives the same bits on 1, 2 and 3 threads: a whole GPT step
 * (dense and MoE, dropout on), the memory-efficient attention, and GEMMs cut by rows and
 * by columns at odd shapes either side of the size where they start to be cut. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attention.h"
#include "cmd/cmd.h"
#include "common.h"
#include "data.h"
#include "gpt.h"
#include "linear.h"
#include "team.h"

static const int thread_counts[] = {1, 2, 3};
#define NTHREADS (int)(sizeof thread_counts / sizeof thread_counts[0])

/* ------------------------------------------------------------------------------------ */
/* team_for                                                                             */

#define MAXN 70000

struct cover {
	unsigned char seen[MAXN]; /* times each element was visited */
	size_t lo[64];            /* each piece's first element, by the order pieces start */
	int npieces, bad_grain;
	size_t grain;
	int nested; /* each piece runs a team_for of its own over its range */
};

static void mark(void *arg, size_t lo, size_t hi, int w)
{
	struct cover *c = arg;

	(void)w;
	for (size_t i = lo; i < hi; i++)
		c->seen[i]++;
}

static void cover_piece(void *arg, size_t lo, size_t hi, int w)
{
	struct cover *c = arg;
	int i = __atomic_fetch_add(&c->npieces, 1, __ATOMIC_RELAXED);

	(void)w;
	if (i < 64)
		c->lo[i] = lo;
	if (lo % c->grain)
		__atomic_store_n(&c->bad_grain, 1, __ATOMIC_RELAXED);
	if (c->nested) { /* the team is busy: this one runs here, in order */
		struct cover inner = {.grain = 1};

		team_for(hi - lo, 1, mark, &inner);
		for (size_t j = lo; j < hi; j++)
			c->seen[j] = inner.seen[j - lo];
	} else {
		mark(c, lo, hi, w);
	}
}

static void test_team_for_covers(void **state)
{
	static const size_t ns[] = {0, 1, 7, 100, 1000, 65537, MAXN};
	static const size_t grains[] = {1, 3, 64, 16384};
	static struct cover c;

	(void)state;
	for (int t = 0; t < NTHREADS; t++) {
		assert_int_equal(team_start(thread_counts[t]), 0);
		assert_int_equal(team_threads(), thread_counts[t]);
		for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
			for (size_t g = 0; g < sizeof grains / sizeof *grains; g++)
				for (int nested = 0; nested < 2; nested++) {
					size_t n = ns[a], units = (n + grains[g] - 1) / grains[g];
					int want = units < (size_t)thread_counts[t]
							   ? (units ? (int)units : 1)
							   : thread_counts[t];

					memset(&c, 0, sizeof c);
					c.grain = grains[g];
					c.nested = nested;
					assert_int_equal(team_pieces(n, grains[g]), want);
					team_for(n, grains[g], cover_piece, &c);
					assert_int_equal(c.npieces, want);
					assert_int_equal(c.bad_grain, 0);
					for (size_t i = 0; i < n; i++)
						if (c.seen[i] != 1)
							fail_msg("%d threads, n %zu, grain %zu: "
								 "element %zu "
								 "visited %d times",
								 thread_counts[t], n, grains[g], i,
								 c.seen[i]);
				}
		team_stop();
		assert_int_equal(team_threads(), 1);
	}
}

/* ------------------------------------------------------------------------------------ */
/* A GPT's training steps                                                               */

enum { STEPS = 2 };

struct run {
	struct gpt_config cfg;
	int B;
	struct data *data;
	/* results */
	float loss[STEPS];
	int np;
	float **w, **g; /* [np]: the weights after the steps, the last step's gradients */
	size_t *n;
};

static float *copy_tensor(const struct tensor *t)
{
	float *c = malloc(t->n ? t->n * sizeof *c : 1);

	if (t->n)
		memcpy(c, t->data, t->n * sizeof *c);
	return c;
}

static int gpt_device(struct emu_dev *d, void *arg)
{
	struct run *r = arg;
	int BT = r->B * r->cfg.seq_len, rc;
	int *tok = calloc((size_t)BT, sizeof *tok), *tgt = calloc((size_t)BT, sizeof *tgt);
	struct optim_cfg o;
	struct kctx k;
	struct gpt m;

	optim_defaults(&o);
	kctx_init(&k, d, PREC_FP32);
	if ((rc = gpt_init(&m, &k, &r->cfg, r->B, 7)))
		return rc;
	for (int s = 0; s < STEPS; s++) {
		data_batch(r->data, 7, (uint64_t)s, r->B, r->cfg.seq_len, tok, tgt);
		m.seq0 = (uint64_t)s * (uint64_t)r->B;
		gpt_zero_grad(&m);
		r->loss[s] = gpt_forward(&m, tok, tgt);
		gpt_backward(&m, 1.0f);
		gpt_update(&m, &o, s + 1);
	}
	r->np = m.np;
	r->w = calloc((size_t)m.np, sizeof *r->w);
	r->g = calloc((size_t)m.np, sizeof *r->g);
	r->n = calloc((size_t)m.np, sizeof *r->n);
	for (int i = 0; i < m.np; i++) {
		r->w[i] = copy_tensor(&m.p[i].w);
		r->g[i] = copy_tensor(&m.p[i].g);
		r->n[i] = m.p[i].n;
	}
	gpt_free(&m);
	free(tok);
	free(tgt);
	return 0;
}

static void run_free(struct run *r)
{
	for (int i = 0; i < r->np; i++) {
		free(r->w[i]);
		free(r->g[i]);
	}
	free(r->w);
	free(r->g);
	free(r->n);
}

/* Runs fn on one device with each thread count; check(ctx[0], ctx[t]) compares. */
static void on_threads(int (*fn)(struct emu_dev *, void *), void *ctx[NTHREADS])
{
	for (int t = 0; t < NTHREADS; t++) {
		struct emu_cluster *c = test_cluster("dgx-a100", 1, 1, 0, 0);

		assert_int_equal(team_start(thread_counts[t]), 0);
		if (emu_cluster_run(c, fn, ctx[t]))
			fail_msg("the run failed:\n%s", emu_cluster_report(c));
		team_stop();
		emu_cluster_free(c);
	}
}

static void check_gpt(const struct gpt_config *cfg, int B)
{
	struct data data;
	struct run r[NTHREADS];
	void *ctx[NTHREADS];

	data_builtin(&data, 1 << 16);
	for (int t = 0; t < NTHREADS; t++) {
		r[t] = (struct run){.cfg = *cfg, .B = B, .data = &data};
		ctx[t] = &r[t];
	}
	on_threads(gpt_device, ctx);
	for (int t = 1; t < NTHREADS; t++) {
		assert_memory_equal(r[0].loss, r[t].loss, sizeof r[0].loss);
		assert_int_equal(r[0].np, r[t].np);
		for (int i = 0; i < r[0].np; i++) {
			if (memcmp(r[0].w[i], r[t].w[i], r[0].n[i] * sizeof(float)))
				fail_msg("%d threads: tensor %d's weights differ from one thread's",
					 thread_counts[t], i);
			if (memcmp(r[0].g[i], r[t].g[i], r[0].n[i] * sizeof(float)))
				fail_msg("%d threads: tensor %d's gradients differ from one "
					 "thread's",
					 thread_counts[t], i);
		}
	}
	for (int t = 0; t < NTHREADS; t++)
		run_free(&r[t]);
	data_free(&data);
}

/* Sizes where every kind of kernel is cut: (B T, h) = (512, 64) is two LayerNorm and
 * residual pieces, the MLP's GEMMs and GeLU are cut, attention has 32 (sequence, head)
 * pairs; hidden and attention dropout on. */
static struct gpt_config team_gpt(void)
{
	struct gpt_config c = {.num_layers = 2,
			       .hidden = 64,
			       .heads = 4,
			       .vocab = 256,
			       .seq_len = 64,
			       .ffn = 256,
			       .moe_top_k = 2,
			       .moe_every = 2,
			       .aux_coeff = 0.01f,
			       .hidden_dropout = 0.1f,
			       .attention_dropout = 0.1f};

	return c;
}

static void test_team_gpt_bitwise(void **state)
{
	struct gpt_config c = team_gpt();

	(void)state;
	check_gpt(&c, 8);
}

static void test_team_moe_bitwise(void **state)
{
	struct gpt_config c = team_gpt();

	(void)state;
	c.num_experts = 4;
	c.capacity_factor = 1.25f;
	check_gpt(&c, 8);
}

/* ------------------------------------------------------------------------------------ */
/* The memory-efficient attention and GEMMs at odd shapes                               */

enum { FB = 3, FT = 70, FNH = 4, FHS = 16, FC = FNH * FHS };

struct kern {
	/* attention: qkv (FB, FT, 3, FNH, FHS), out (FB, FT, FC), lse (FB, FNH, FT) */
	float qkv[FB * FT * 3 * FC], out[FB * FT * FC], lse[FB * FNH * FT], dout[FB * FT * FC];
	float dqkv[FB * FT * 3 * FC], scratch[2 * FLASH_ROWS * FT];
	/* GEMMs: the shapes of shape[], one after another */
	float *x, *w, *b, *dy, *y, *dx, *dw, *db;
};

/* (M, K, N): cut by rows (M >= N) and by columns, odd sizes, around GEMM_MIN (2^18) */
static const int shape[][3] = {{97, 131, 1000}, {1000, 131, 97}, {64, 64, 63},
			       {65, 64, 64},    {33, 257, 31},   {300, 3, 500}};
#define NSHAPES (int)(sizeof shape / sizeof shape[0])

static size_t shape_elems(int which, int s)
{
	const int *d = shape[s];

	return which == 0   ? (size_t)d[0] * d[1]
	       : which == 1 ? (size_t)d[2] * d[1]
			    : (size_t)d[0] * d[2];
}

static void fill(float *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = test_uniform(seed, i);
}

static int kern_device(struct emu_dev *d, void *arg)
{
	struct kern *kn = arg;
	size_t ox = 0, ow = 0, oy = 0, ob = 0;
	struct kctx k;

	kctx_init(&k, d, PREC_FP32);
	attention_flash_fwd(&k, kn->out, kn->lse, kn->qkv, FB, FT, FNH, 0, FNH, FHS, kn->scratch);
	attention_flash_bwd(&k, kn->dqkv, kn->scratch, kn->dout, kn->out, kn->lse, kn->qkv, FB, FT,
			    FNH, 0, FNH, FHS);
	for (int s = 0; s < NSHAPES; s++) {
		int M = shape[s][0], K = shape[s][1], N = shape[s][2];

		linear_fwd(&k, kn->y + oy, kn->x + ox, kn->w + ow, kn->b + ob, 1, M, K, N);
		linear_bwd_input(&k, kn->dx + ox, kn->dy + oy, kn->w + ow, M, K, N);
		linear_bwd_weight(&k, kn->dw + ow, kn->db + ob, 1, kn->dy + oy, kn->x + ox, M, K,
				  N);
		ox += shape_elems(0, s);
		ow += shape_elems(1, s);
		oy += shape_elems(2, s);
		ob += (size_t)N;
	}
	return 0;
}

/* Fails naming what differs, and where: the first float that does. */
static void same(int t, const char *what, const float *a, const float *b, size_t bytes)
{
	for (size_t i = 0; i < bytes / sizeof(float); i++)
		if (memcmp(&a[i], &b[i], sizeof a[i]))
			fail_msg("%d threads: %s differs from one thread's at %zu: %.9g, not %.9g",
				 thread_counts[t], what, i, (double)b[i], (double)a[i]);
}

static void test_team_kernels_bitwise(void **state)
{
	struct kern *kn[NTHREADS];
	void *ctx[NTHREADS];
	size_t nx = 0, nw = 0, ny = 0, nb = 0;

	(void)state;
	for (int s = 0; s < NSHAPES; s++) {
		nx += shape_elems(0, s);
		nw += shape_elems(1, s);
		ny += shape_elems(2, s);
		nb += (size_t)shape[s][2];
	}
	for (int t = 0; t < NTHREADS; t++) {
		kn[t] = calloc(1, sizeof *kn[t]);
		fill(kn[t]->qkv, sizeof kn[t]->qkv / sizeof(float), 1);
		fill(kn[t]->dout, sizeof kn[t]->dout / sizeof(float), 2);
		kn[t]->x = malloc(nx * sizeof(float));
		kn[t]->dx = malloc(nx * sizeof(float));
		kn[t]->w = malloc(nw * sizeof(float));
		kn[t]->dw = malloc(nw * sizeof(float));
		kn[t]->y = malloc(ny * sizeof(float));
		kn[t]->dy = malloc(ny * sizeof(float));
		kn[t]->b = malloc(nb * sizeof(float));
		kn[t]->db = malloc(nb * sizeof(float));
		fill(kn[t]->x, nx, 3);
		fill(kn[t]->dx, nx, 4); /* the backward kernels add into what is there */
		fill(kn[t]->w, nw, 5);
		fill(kn[t]->dw, nw, 6);
		fill(kn[t]->dy, ny, 7);
		fill(kn[t]->b, nb, 8);
		fill(kn[t]->db, nb, 9);
		ctx[t] = kn[t];
	}
	on_threads(kern_device, ctx);
	for (int t = 1; t < NTHREADS; t++) {
		same(t, "flash attention's out", kn[0]->out, kn[t]->out, sizeof kn[0]->out);
		same(t, "flash attention's lse", kn[0]->lse, kn[t]->lse, sizeof kn[0]->lse);
		same(t, "flash attention's dqkv", kn[0]->dqkv, kn[t]->dqkv, sizeof kn[0]->dqkv);
		same(t, "linear_fwd", kn[0]->y, kn[t]->y, ny * sizeof(float));
		same(t, "linear_bwd_input", kn[0]->dx, kn[t]->dx, nx * sizeof(float));
		same(t, "linear_bwd_weight's dw", kn[0]->dw, kn[t]->dw, nw * sizeof(float));
		same(t, "linear_bwd_weight's dbias", kn[0]->db, kn[t]->db, nb * sizeof(float));
	}
	for (int t = 0; t < NTHREADS; t++) {
		free(kn[t]->x);
		free(kn[t]->dx);
		free(kn[t]->w);
		free(kn[t]->dw);
		free(kn[t]->y);
		free(kn[t]->dy);
		free(kn[t]->b);
		free(kn[t]->db);
		free(kn[t]);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_team_for_covers),
		cmocka_unit_test(test_team_gpt_bitwise),
		cmocka_unit_test(test_team_moe_bitwise),
		cmocka_unit_test(test_team_kernels_bitwise),
	};

	(void)argc;
	cmd_blas_kernels(argv); /* the GEMM kernels pemu runs, whose sums depend on the cut */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
