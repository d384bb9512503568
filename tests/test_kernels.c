/* Every kernel of models/ but attention (test_attention.c) against the independent
 * double-precision reference of ref.h: the forward output, and the backward gradients
 * against central finite differences of the reference in double precision. The loss
 * checked is L = sum(out * R) for a fixed random R (for cross-entropy, the mean loss
 * itself), so the analytic gradient is the kernel's backward with dout = R. The harness
 * and the thresholds are kernel_check.h's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attention.h"
#include "clock.h"
#include "common.h"
#include "kernel_check.h"
#include "linear.h"
#include "ops.h"
#include "optim.h"
#include "ref.h"
#include "vmath.h"

/* ------------------------------------------------------------------------------------ */
/* linear                                                                               */

enum { LM = 5, LK = 7, LN = 6 };

struct lin {
	float *x, *w, *b, *r, out[LM * LN], dx[LM * LK], dw[LN * LK], db[LN];
	double *xd, *wd, *bd;
};

static void lin_dev(const struct kctx *k, void *ctx)
{
	struct lin *l = ctx;

	linear_fwd(k, l->out, l->x, l->w, l->b, 1, LM, LK, LN);
	linear_bwd_input(k, l->dx, l->r, l->w, LM, LK, LN);
	linear_bwd_weight(k, l->dw, l->db, 1, l->r, l->x, LM, LK, LN);
}

static double lin_loss(void *ctx)
{
	struct lin *l = ctx;
	double out[LM * LN];

	ref_linear(out, l->xd, l->wd, l->bd, LM, LK, LN);
	return dot(out, l->r, LM * LN);
}

/* The kernels' exponential (models/vmath.h): within 1 ulp of the correctly rounded
 * exp over [-87, 88] (one float in 4099 of the range), exactly 1 at 0, 0 below the
 * normal range, finite and saturated above it, NaN for NaN. Floats are walked in their
 * order as integers: the bits of a positive float, minus those of -x for a negative one. */
static int64_t float_order(float f)
{
	int32_t i;

	memcpy(&i, &f, sizeof i);
	return i < 0 ? (int64_t)INT32_MIN - i : i;
}

static float float_at_order(int64_t o)
{
	int32_t i = (int32_t)(o < 0 ? (int64_t)INT32_MIN - o : o);
	float f;

	memcpy(&f, &i, sizeof f);
	return f;
}

static void test_exp(void **state)
{
	int64_t worst = 0;
	float at = 0;

	(void)state;
	for (int64_t o = float_order(-87.0f); o < float_order(88.0f); o += 4099) {
		float x = float_at_order(o);
		int64_t d = float_order(vm_expf(x)) - float_order((float)exp((double)x));

		d = d < 0 ? -d : d;
		if (d > worst) {
			worst = d;
			at = x;
		}
	}
	if (worst > 1)
		fail_msg("vm_expf is %lld ulp off at %.9g", (long long)worst, (double)at);
	assert_true(vm_expf(0.0f) == 1.0f);
	assert_true(vm_expf(-100.0f) == 0.0f && vm_expf(-INFINITY) == 0.0f);
	assert_true(isfinite(vm_expf(100.0f)) && vm_expf(100.0f) > 1e38f);
	assert_true(isnan(vm_expf(NAN)));
}

static void test_linear(void **state)
{
	struct lin l = {0};
	double out[LM * LN];

	(void)state;
	l.x = rnd(LM * LK, 1, 1);
	l.w = rnd(LN * LK, 2, 1);
	l.b = rnd(LN, 3, 1);
	l.r = rnd(LM * LN, 4, 1);
	run_on_device(lin_dev, &l);
	l.xd = to_double(l.x, LM * LK);
	l.wd = to_double(l.w, LN * LK);
	l.bd = to_double(l.b, LN);
	ref_linear(out, l.xd, l.wd, l.bd, LM, LK, LN);
	fwd_check("linear", l.out, out, LM * LN, TOL_FWD);
	fd_check("linear dx", lin_loss, &l, l.xd, LM * LK, l.dx, TOL_GRAD);
	fd_check("linear dw", lin_loss, &l, l.wd, LN * LK, l.dw, TOL_GRAD);
	fd_check("linear db", lin_loss, &l, l.bd, LN, l.db, TOL_GRAD);
	free(l.x), free(l.w), free(l.b), free(l.r), free(l.xd), free(l.wd), free(l.bd);
}

/* ------------------------------------------------------------------------------------ */
/* layernorm                                                                            */

enum { NM = 4, NC = 16 };

struct ln {
	float *x, *w, *b, *r, out[NM * NC], mean[NM], rstd[NM], dx[NM * NC], dw[NC], db[NC];
	double *xd, *wd, *bd;
};

static void ln_dev(const struct kctx *k, void *ctx)
{
	struct ln *l = ctx;

	layernorm_fwd(k, l->out, l->mean, l->rstd, l->x, l->w, l->b, NM, NC);
	layernorm_bwd(k, l->dx, l->dw, l->db, l->r, l->x, l->w, l->mean, l->rstd, NM, NC);
}

static double ln_loss(void *ctx)
{
	struct ln *l = ctx;
	double out[NM * NC];

	ref_layernorm(out, l->xd, l->wd, l->bd, NM, NC);
	return dot(out, l->r, NM * NC);
}

static void test_layernorm(void **state)
{
	struct ln l = {0};
	double out[NM * NC];

	(void)state;
	l.x = rnd(NM * NC, 5, 2);
	l.w = rnd(NC, 6, 1);
	l.b = rnd(NC, 7, 1);
	l.r = rnd(NM * NC, 8, 1);
	run_on_device(ln_dev, &l);
	l.xd = to_double(l.x, NM * NC);
	l.wd = to_double(l.w, NC);
	l.bd = to_double(l.b, NC);
	ref_layernorm(out, l.xd, l.wd, l.bd, NM, NC);
	fwd_check("layernorm", l.out, out, NM * NC, TOL_FWD);
	fd_check("layernorm dx", ln_loss, &l, l.xd, NM * NC, l.dx, TOL_GRAD);
	fd_check("layernorm dw", ln_loss, &l, l.wd, NC, l.dw, TOL_GRAD);
	fd_check("layernorm db", ln_loss, &l, l.bd, NC, l.db, TOL_GRAD);
	free(l.x), free(l.w), free(l.b), free(l.r), free(l.xd), free(l.wd), free(l.bd);
}

/* ------------------------------------------------------------------------------------ */
/* GeLU and the residual add                                                            */

enum { GN = 50 };

struct elt {
	float *x, *y, *r, out[GN], dx[GN], sum[GN], da[GN], dbb[GN];
	double *xd, *yd;
};

static void elt_dev(const struct kctx *k, void *ctx)
{
	struct elt *e = ctx;

	gelu_fwd(k, e->out, e->x, GN);
	gelu_bwd(k, e->dx, e->x, e->r, GN);
	residual_fwd(k, e->sum, e->x, e->y, GN);
	add_acc(k, e->da, e->r, GN); /* the residual's backward: dout into both inputs */
	add_acc(k, e->dbb, e->r, GN);
}

static double gelu_loss(void *ctx)
{
	struct elt *e = ctx;
	double s = 0;

	for (int i = 0; i < GN; i++)
		s += ref_gelu1(e->xd[i]) * e->r[i];
	return s;
}

static double res_loss(void *ctx)
{
	struct elt *e = ctx;
	double s = 0;

	for (int i = 0; i < GN; i++)
		s += (e->xd[i] + e->yd[i]) * e->r[i];
	return s;
}

static void test_gelu_and_residual(void **state)
{
	struct elt e = {0};
	double out[GN];

	(void)state;
	e.x = rnd(GN, 9, 4);
	e.y = rnd(GN, 10, 1);
	e.r = rnd(GN, 11, 1);
	run_on_device(elt_dev, &e);
	e.xd = to_double(e.x, GN);
	e.yd = to_double(e.y, GN);
	for (int i = 0; i < GN; i++)
		out[i] = ref_gelu1(e.xd[i]);
	fwd_check("gelu", e.out, out, GN, TOL_FWD);
	fd_check("gelu dx", gelu_loss, &e, e.xd, GN, e.dx, TOL_GRAD);
	for (int i = 0; i < GN; i++)
		out[i] = e.xd[i] + e.yd[i];
	fwd_check("residual", e.sum, out, GN, TOL_FWD);
	fd_check("residual da", res_loss, &e, e.xd, GN, e.da, TOL_GRAD);
	fd_check("residual db", res_loss, &e, e.yd, GN, e.dbb, TOL_GRAD);
	free(e.x), free(e.y), free(e.r), free(e.xd), free(e.yd);
}

/* ------------------------------------------------------------------------------------ */
/* softmax                                                                              */

enum { SXM = 3, SXN = 9 };

struct sx {
	float *x, *r, out[SXM * SXN], dx[SXM * SXN];
	double *xd;
};

static void sx_dev(const struct kctx *k, void *ctx)
{
	struct sx *s = ctx;

	softmax_fwd(k, s->out, s->x, SXM, SXN);
	softmax_bwd(k, s->dx, s->out, s->r, SXM, SXN);
}

static void sx_ref(const double *x, double *out)
{
	for (int i = 0; i < SXM; i++) {
		double mx = x[i * SXN], sum = 0;

		for (int j = 1; j < SXN; j++)
			mx = x[i * SXN + j] > mx ? x[i * SXN + j] : mx;
		for (int j = 0; j < SXN; j++)
			sum += exp(x[i * SXN + j] - mx);
		for (int j = 0; j < SXN; j++)
			out[i * SXN + j] = exp(x[i * SXN + j] - mx) / sum;
	}
}

static double sx_loss(void *ctx)
{
	struct sx *s = ctx;
	double out[SXM * SXN];

	sx_ref(s->xd, out);
	return dot(out, s->r, SXM * SXN);
}

static void test_softmax(void **state)
{
	struct sx s = {0};
	double out[SXM * SXN];

	(void)state;
	s.x = rnd(SXM * SXN, 25, 3);
	s.r = rnd(SXM * SXN, 26, 1);
	run_on_device(sx_dev, &s);
	s.xd = to_double(s.x, SXM * SXN);
	sx_ref(s.xd, out);
	fwd_check("softmax", s.out, out, SXM * SXN, TOL_FWD);
	fd_check("softmax dx", sx_loss, &s, s.xd, SXM * SXN, s.dx, TOL_GRAD);
	free(s.x), free(s.r), free(s.xd);
}

/* ------------------------------------------------------------------------------------ */
/* AdamW and the schedule, against their formulas in double                             */

enum { AN = 16, ASTEPS = 5 };

struct adam {
	float w[AN], g[ASTEPS][AN], state[2 * AN], w0[AN];
	struct optim_cfg o;
	float lr[ASTEPS];
};

static void adam_dev(const struct kctx *k, void *ctx)
{
	struct adam *a = ctx;

	for (int t = 1; t <= ASTEPS; t++) {
		a->lr[t - 1] = optim_lr(&a->o, t - 1);
		optim_adamw(k, &a->o, a->w, a->g[t - 1], a->state, a->state + AN, AN, a->lr[t - 1],
			    0.5f, 1, t);
	}
}

static void test_adamw(void **state)
{
	struct adam a = {0};
	double w[AN], m[AN] = {0}, v[AN] = {0}, b1 = 0.9, b2 = 0.95;

	(void)state;
	a.o = (struct optim_cfg){.lr = 1e-2f,
				 .min_lr = 1e-3f,
				 .warmup = 2,
				 .decay_steps = 4,
				 .beta1 = 0.9f,
				 .beta2 = 0.95f,
				 .eps = 1e-8f,
				 .weight_decay = 0.1f,
				 .clip = 1.0f};
	for (int i = 0; i < AN; i++) {
		a.w[i] = a.w0[i] = test_uniform(27, (uint64_t)i);
		w[i] = a.w[i];
		for (int t = 0; t < ASTEPS; t++)
			a.g[t][i] = test_uniform(28 + (uint64_t)t, (uint64_t)i);
	}
	run_on_device(adam_dev, &a);
	/* warm-up 0.005, 0.01; cosine from 0.01 to 0.001 over steps 2..4; then 0.001 */
	{
		double want[ASTEPS] = {0.005, 0.01, 0.01,
				       0.001 + 0.5 * (1 + cos(3.141592653589793 * 0.5)) * 0.009,
				       0.001};

		for (int t = 0; t < ASTEPS; t++)
			if (fabs(a.lr[t] - want[t]) > 1e-7)
				fail_msg("lr at step %d is %g, want %g", t, (double)a.lr[t],
					 want[t]);
	}
	/* Loshchilov and Hutter's AdamW: decoupled decay, bias-corrected moments; the
	 * gradient scaled by 0.5 as a clipped one would be. */
	for (int t = 1; t <= ASTEPS; t++)
		for (int i = 0; i < AN; i++) {
			double g = 0.5 * a.g[t - 1][i];

			m[i] = b1 * m[i] + (1 - b1) * g;
			v[i] = b2 * v[i] + (1 - b2) * g * g;
			w[i] -= a.lr[t - 1] * ((m[i] / (1 - pow(b1, t))) /
						       (sqrt(v[i] / (1 - pow(b2, t))) + 1e-8) +
					       0.1 * w[i]);
		}
	fwd_check("adamw weights after 5 steps", a.w, w, AN, 1e-5);
}

/* ------------------------------------------------------------------------------------ */
/* The vector versions give the scalar bits                                             */

/* GeLU and AdamW carry VM_CLONES (models/vmath.h): on this host the loader runs their
 * AVX-512 or AVX2 version. Each element must come out as the formula evaluated one
 * element at a time in the base version's float arithmetic (this file has no clones):
 * the same bits, which an FMA or a reordered sum in a wide version would break. */
enum { CN = 1003 }; /* not a multiple of any vector width: the tails run too */

struct clones {
	float x[CN], dy[CN], gelu[CN], dgelu[CN], w[CN], g[CN], m[CN], v[CN];
	struct optim_cfg o;
};

static void clones_dev(const struct kctx *k, void *ctx)
{
	struct clones *c = ctx;

	gelu_fwd(k, c->gelu, c->x, CN);
	gelu_bwd(k, c->dgelu, c->x, c->dy, CN);
	optim_adamw(k, &c->o, c->w, c->g, c->m, c->v, CN, 1e-3f, 0.5f, 1, 3);
}

static float one_gelu(float x)
{
	float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);

	return 0.5f * x * (1.0f + (1.0f - 2.0f / (vm_expf(2.0f * u) + 1.0f)));
}

static void test_clones_bitwise(void **state)
{
	static struct clones c;
	float w[CN], m[CN], v[CN], c1 = 1.0f - powf(0.9f, 3.0f), c2 = 1.0f - powf(0.95f, 3.0f);

	(void)state;
	optim_defaults(&c.o);
	for (int i = 0; i < CN; i++) {
		c.x[i] = 12.0f * test_uniform(40, (uint64_t)i); /* past GeLU's saturation */
		c.dy[i] = test_uniform(41, (uint64_t)i);
		c.dgelu[i] = test_uniform(42, (uint64_t)i);
		w[i] = c.w[i] = test_uniform(43, (uint64_t)i);
		c.g[i] = test_uniform(44, (uint64_t)i);
		m[i] = c.m[i] = 0.1f * test_uniform(45, (uint64_t)i);
		v[i] = c.v[i] = 0.01f * (1.0f + test_uniform(46, (uint64_t)i));
	}
	run_on_device(clones_dev, &c);
	for (int i = 0; i < CN; i++) {
		float x = c.x[i], u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
		float t = 1.0f - 2.0f / (vm_expf(2.0f * u) + 1.0f), sech2 = 1.0f - t * t;
		float dg = test_uniform(42, (uint64_t)i) +
			   (0.5f * (1.0f + t) + 0.5f * x * sech2 * 0.7978845608028654f *
							(1.0f + 3.0f * 0.044715f * x * x)) *
				   c.dy[i];
		float gi = c.g[i] * 0.5f, b1 = c.o.beta1, b2 = c.o.beta2;

		m[i] = b1 * m[i] + (1.0f - b1) * gi;
		v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
		w[i] -= 1e-3f *
			((m[i] / c1) / (sqrtf(v[i] / c2) + c.o.eps) + c.o.weight_decay * w[i]);
		if (memcmp(&c.gelu[i], &(float){one_gelu(x)}, sizeof(float)) ||
		    memcmp(&c.dgelu[i], &dg, sizeof dg) || memcmp(&c.w[i], &w[i], sizeof w[i]) ||
		    memcmp(&c.m[i], &m[i], sizeof m[i]) || memcmp(&c.v[i], &v[i], sizeof v[i]))
			fail_msg("element %d of %d differs from the scalar formula's bits (x = "
				 "%.9g)",
				 i, CN, (double)x);
	}
}

/* ------------------------------------------------------------------------------------ */
/* embedding                                                                            */

enum { EB = 2, ET = 3, EC = 4, EV = 5, EMAXT = 5, ET0 = 1 };

struct emb {
	int tok[EB * ET];
	float *wte, *wpe, *r, out[EB * ET * EC], dwte[EV * EC], dwpe[EMAXT * EC];
	double *wted, *wped;
};

static void emb_dev(const struct kctx *k, void *ctx)
{
	struct emb *e = ctx;

	embedding_fwd(k, e->out, e->tok, e->wte, e->wpe, EB, ET, EC, ET0);
	embedding_bwd(k, e->dwte, e->dwpe, e->r, e->tok, EB, ET, EC, ET0);
}

static void emb_ref(const struct emb *e, double *out)
{
	for (int b = 0; b < EB; b++)
		for (int t = 0; t < ET; t++)
			for (int c = 0; c < EC; c++)
				out[(b * ET + t) * EC + c] = e->wted[e->tok[b * ET + t] * EC + c] +
							     e->wped[(ET0 + t) * EC + c];
}

static double emb_loss(void *ctx)
{
	struct emb *e = ctx;
	double out[EB * ET * EC];

	emb_ref(e, out);
	return dot(out, e->r, EB * ET * EC);
}

static void test_embedding(void **state)
{
	struct emb e = {.tok = {3, 0, 3, 4, 1, 3}};
	double out[EB * ET * EC];

	(void)state;
	e.wte = rnd(EV * EC, 12, 1);
	e.wpe = rnd(EMAXT * EC, 13, 1);
	e.r = rnd(EB * ET * EC, 14, 1);
	run_on_device(emb_dev, &e);
	e.wted = to_double(e.wte, EV * EC);
	e.wped = to_double(e.wpe, EMAXT * EC);
	emb_ref(&e, out);
	fwd_check("embedding", e.out, out, EB * ET * EC, TOL_FWD);
	fd_check("embedding dwte", emb_loss, &e, e.wted, EV * EC, e.dwte, TOL_GRAD);
	fd_check("embedding dwpe", emb_loss, &e, e.wped, EMAXT * EC, e.dwpe, TOL_GRAD);
	free(e.wte), free(e.wpe), free(e.r), free(e.wted), free(e.wped);
}

/* ------------------------------------------------------------------------------------ */
/* cross-entropy                                                                        */

enum { CM = 4, CV = 11 };

struct ce {
	int tgt[CM];
	float *x, losses[CM], probs[CM * CV], dx[CM * CV];
	double *xd;
};

static void ce_dev(const struct kctx *k, void *ctx)
{
	struct ce *c = ctx;

	crossentropy_fwd(k, CE_ONE, c->losses, c->probs, c->x, c->tgt, CM, CV);
	crossentropy_bwd(k, CE_ONE, c->dx, c->probs, c->tgt, 1.0f / CM, CM, CV);
}

static double ce_loss(void *ctx)
{
	struct ce *c = ctx;

	return ref_crossentropy(c->xd, c->tgt, CM, CV);
}

static void test_crossentropy(void **state)
{
	struct ce c = {.tgt = {0, 10, 5, 5}};
	float mean = 0;
	double want;

	(void)state;
	c.x = rnd(CM * CV, 15, 3);
	run_on_device(ce_dev, &c);
	c.xd = to_double(c.x, CM * CV);
	for (int i = 0; i < CM; i++)
		mean += c.losses[i] / CM;
	want = ref_crossentropy(c.xd, c.tgt, CM, CV);
	fwd_check("crossentropy", &mean, &want, 1, TOL_FWD);
	fd_check("crossentropy dlogits", ce_loss, &c, c.xd, CM * CV, c.dx, TOL_GRAD);
	free(c.x), free(c.xd);
}

/* A linear layer on shards of its weight, as Megatron's tensor parallelism runs it:
 * column shards (rows of w, out features) concatenate to the full output; row shards
 * (columns of w, in features, with the matching slice of the input) give partial outputs
 * that sum to it. Tolerance 1e-6: the same products, summed in two parts. */
enum { SM = 4, SK = 8, SN = 6 };

struct shards {
	float *x, *w, full[SM * SN], col[2][SM * SN / 2], row[2][SM * SN];
	float xs[2][SM * SK / 2], ws[2][SN * SK / 2];
};

static void shards_dev(const struct kctx *k, void *ctx)
{
	struct shards *s = ctx;

	linear_fwd(k, s->full, s->x, s->w, NULL, 0, SM, SK, SN);
	for (int p = 0; p < 2; p++) {
		/* column shard p: out features [p N/2, (p+1) N/2) */
		linear_fwd(k, s->col[p], s->x, s->w + p * (SN / 2) * SK, NULL, 0, SM, SK, SN / 2);
		/* row shard p: in features [p K/2, (p+1) K/2) */
		for (int i = 0; i < SM; i++)
			memcpy(s->xs[p] + i * SK / 2, s->x + i * SK + p * SK / 2,
			       SK / 2 * sizeof(float));
		for (int j = 0; j < SN; j++)
			memcpy(s->ws[p] + j * SK / 2, s->w + j * SK + p * SK / 2,
			       SK / 2 * sizeof(float));
		linear_fwd(k, s->row[p], s->xs[p], s->ws[p], NULL, 0, SM, SK / 2, SN);
	}
}

static void test_linear_shards(void **state)
{
	struct shards s = {0};
	double full[SM * SN];
	float cat[SM * SN], sum[SM * SN];

	(void)state;
	s.x = rnd(SM * SK, 23, 1);
	s.w = rnd(SN * SK, 24, 1);
	run_on_device(shards_dev, &s);
	for (int i = 0; i < SM; i++)
		for (int j = 0; j < SN; j++) {
			full[i * SN + j] = s.full[i * SN + j];
			cat[i * SN + j] = s.col[j / (SN / 2)][i * (SN / 2) + j % (SN / 2)];
			sum[i * SN + j] = s.row[0][i * SN + j] + s.row[1][i * SN + j];
		}
	fwd_check("linear column shards", cat, full, SM * SN, 1e-6);
	fwd_check("linear row shards", sum, full, SM * SN, 1e-6);
	free(s.x), free(s.w);
}

/* The FLOPs a kernel charges are the same in dry-run: the clock does not look at data. */
static void flops_dev(const struct kctx *k, void *ctx)
{
	int64_t *t = ctx;

	attention_fwd(k, NULL, NULL, NULL, 4, 128, 8, 0, 8, 64);
	linear_fwd(k, NULL, NULL, NULL, NULL, 0, 512, 1024, 4096);
	*t = emu_now(k->d);
}

static int flops_main(struct emu_dev *d, void *arg)
{
	struct kctx k;

	kctx_init(&k, d, PREC_BF16);
	flops_dev(&k, arg);
	return 0;
}

static void test_dry_run_charges_the_same(void **state)
{
	struct emu_cluster *c = test_cluster("dgx-h100", 1, 1, 1, 0);
	const struct topo_gpu *g = &emu_cluster_config(c)->topo.gpu;
	double rate = g->peak_flops * g->efficiency;
	/* attention over 4 x 8 heads of 128 tokens, hs 64, 2-byte activations: FLOPs
	 * 32 (4 T^2 hs + 5 T^2), bytes 32 (3 T hs + 2 T^2 + T hs) * 2: memory-bound on an H100.
	 * linear 512 x 1024 -> 4096: FLOPs 2 M K N, bytes (MK + NK + MN) * 2: math-bound. */
	double fa = 32.0 * (4.0 * 128 * 128 * 64 + 5.0 * 128 * 128);
	double ba = 32.0 * (3.0 * 128 * 64 + 2.0 * 128 * 128 + 128.0 * 64) * 2;
	double fl = 2.0 * 512 * 1024 * 4096, bl = (512.0 * 1024 + 4096.0 * 1024 + 512.0 * 4096) * 2;
	int64_t ta = (int64_t)ceil(ba / g->hbm_bw * 1e9), tl = (int64_t)ceil(fl / rate * 1e9);
	int64_t t = 0;

	(void)state;
	assert_true(ba / g->hbm_bw > fa / rate && fl / rate > bl / g->hbm_bw);
	assert_int_equal(emu_cluster_run(c, flops_main, &t), 0);
	assert_int_equal(t, 2 * g->launch_ns + ta + tl);
	emu_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exp),
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_layernorm),
		cmocka_unit_test(test_gelu_and_residual),
		cmocka_unit_test(test_embedding),
		cmocka_unit_test(test_crossentropy),
		cmocka_unit_test(test_softmax),
		cmocka_unit_test(test_adamw),
		cmocka_unit_test(test_clones_bitwise),
		cmocka_unit_test(test_linear_shards),
		cmocka_unit_test(test_dry_run_charges_the_same),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
