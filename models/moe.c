/* moe: the mixture-of-experts block of moe.h. */
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "linear.h"
#include "ops.h"
#include "util.h"

/* The experts the block runs. */
static int held(const struct moe_shape *s)
{
	return s->El ? s->El : s->E;
}

int moe_capacity(double capacity_factor, int M, int k, int E)
{
	int cap = (int)floor(capacity_factor * (double)M * k / E);

	if (capacity_factor <= 0)
		return M; /* dropless: an expert gets each token at most once */
	return cap < 1 ? 1 : cap;
}

/* Whether the experts run on compact rows (dropless, or routed over ranks). */
static int compact(const struct moe_shape *s)
{
	return s->dropless || s->cap_all;
}

/* The rows of the block's x, pre, h and y. */
static size_t rows_of(const struct moe_shape *s)
{
	if (s->rows)
		return (size_t)s->rows;
	return compact(s) ? (size_t)s->M * s->k : (size_t)held(s) * s->cap;
}

/* p + n, or NULL in dry-run (no arithmetic on a null pointer). */
static float *off(float *p, size_t n)
{
	return p ? p + n : NULL;
}

static const float *coff(const float *p, size_t n)
{
	return p ? p + n : NULL;
}

int moe_acts_alloc(const struct kctx *k, struct moe_acts *a, const struct moe_shape *s)
{
	size_t slots = rows_of(s);
	int rc = 0;

#define A(t, n, name)                                                                              \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_ensure(k, (t), MEM_ACT, (n), (name));                          \
	} while (0)
	A(&a->probs, (size_t)s->M * s->E, "router probs");
	A(&a->x, slots * s->C, "expert inputs");
	A(&a->pre, slots * s->F, "expert fc");
	A(&a->h, slots * s->F, "expert fc.gelu");
	A(&a->y, slots * s->C, "expert outputs");
#undef A
	if (rc || a->rows)
		return rc;
	a->frac = emu_xcalloc(2 * (size_t)s->E, sizeof *a->frac);
	a->psum = a->frac + s->E;
	a->rows = emu_xcalloc(2 * (size_t)s->E, sizeof *a->rows);
	if (!kctx_math(k)) /* a dry-run routes uniformly: no decision to keep */
		return 0;
	/* The routing decisions: host-side bookkeeping of a few ints a token. */
	a->slot_token = emu_xcalloc((size_t)s->E * s->cap, sizeof *a->slot_token);
	a->choice = emu_xcalloc((size_t)s->M * s->k, sizeof *a->choice);
	a->slot = emu_xcalloc((size_t)s->M * s->k, sizeof *a->slot);
	return 0;
}

void moe_acts_free(struct moe_acts *a)
{
	free(a->slot_token);
	free(a->choice);
	free(a->slot);
	free(a->frac);
	free(a->rows);
	a->slot_token = a->choice = a->slot = a->rows = NULL;
	a->frac = a->psum = NULL; /* (one allocation) */
}

int moe_scratch_alloc(const struct kctx *k, struct moe_scratch *sc, const struct moe_shape *s)
{
	size_t rows = compact(s) ? (size_t)s->M * s->k : (size_t)s->cap; /* (compact: all) */
	int rc;

	if ((rc = tensor_alloc(k, &sc->dy, MEM_WORK, rows * s->C, "moe d out")) ||
	    (rc = tensor_alloc(k, &sc->dx, MEM_WORK, rows * s->C, "moe d in")) ||
	    (rc = tensor_alloc(k, &sc->dh, MEM_WORK, (size_t)s->cap * s->F, "moe d fc.gelu")) ||
	    (rc = tensor_alloc(k, &sc->dpre, MEM_WORK, (size_t)s->cap * s->F, "moe d fc")) ||
	    (rc = tensor_alloc(k, &sc->dprobs, MEM_WORK, (size_t)s->M * s->E, "router d probs")) ||
	    (rc = tensor_alloc(k, &sc->dlogits, MEM_WORK, (size_t)s->M * s->E, "router d logits")))
		return rc;
	return 0;
}

void moe_expert_fwd(const struct kctx *k, float *y, float *pre, float *h, const float *x,
		    const float *w1, const float *b1, const float *w2, const float *b2, int n,
		    int C, int F)
{
	linear_fwd(k, pre, x, w1, b1, 1, n, C, F);
	gelu_fwd(k, h, pre, (size_t)n * F);
	linear_fwd(k, y, h, w2, b2, 1, n, F, C);
}

/* Each token's k choices, best first (ties: the lower index). */
static void top_k(const struct moe_shape *s, struct moe_acts *a)
{
	int E = s->E, K = s->k;

	for (int t = 0; t < s->M; t++) {
		const float *p = a->probs.data + (size_t)t * E;

		for (int j = 0; j < K; j++) {
			int best = -1;

			for (int e = 0; e < E; e++) {
				int taken = j == 1 && a->choice[t * K] == e;

				if (!taken && (best < 0 || p[e] > p[best]))
					best = e;
			}
			a->choice[t * K + j] = best;
		}
	}
}

/* The micro-batch's tokens. */
static int all_tokens(const struct moe_shape *s)
{
	return s->Mall ? s->Mall : s->M;
}

/* cnt[(j nruns + u) E + e]: run u's j-th choices of expert e; a->psum: the block's sums
 * of each expert's probability. */
static void count_runs(const struct moe_shape *s, struct moe_acts *a, int nruns, const int *len,
		       int *cnt)
{
	int E = s->E, K = s->k;

	memset(cnt, 0, (size_t)K * nruns * E * sizeof *cnt);
	for (int j = 0; j < K; j++)
		for (int u = 0, t = 0; u < nruns; u++)
			for (int end = t + len[u]; t < end; t++)
				cnt[(j * nruns + u) * E + a->choice[t * K + j]]++;
	for (int e = 0; e < E; e++) {
		double pe = 0;

		for (int t = 0; t < s->M; t++)
			pe += a->probs.data[(size_t)t * E + e];
		a->psum[e] = pe;
	}
}

void moe_keep(const struct moe_shape *s, struct moe_acts *a, int nruns, const int *len,
	      const int *base, const int *all)
{
	int E = s->E, K = s->k, cap = s->cap;
	int lim = s->cap_all ? s->cap_all : cap;
	int *fill = emu_xcalloc(2 * (size_t)E, sizeof *fill), *seen = fill + E;
	double inc = 1.0 / ((double)all_tokens(s) * K);

	/* f_e as the sum of its choices' shares, one at a time: the same bits however the
	 * micro-batch is spread */
	for (int e = 0; e < E; e++) {
		a->frac[e] = 0;
		for (int c = 0; c < all[e]; c++)
			a->frac[e] += inc;
	}
	for (int i = 0; i < E * cap; i++)
		a->slot_token[i] = -1;
	/* First choices in token order, then second choices: a choice's place is the
	 * choices of its expert before it in the micro-batch */
	for (int j = 0; j < K; j++)
		for (int u = 0, t0 = 0; u < nruns; t0 += len[u++]) {
			const int *b = base + (size_t)(j * nruns + u) * E;

			memset(seen, 0, (size_t)E * sizeof *seen);
			for (int t = t0; t < t0 + len[u]; t++) {
				int e = a->choice[t * K + j], place = b[e] + seen[e]++;

				a->slot[t * K + j] = -1;
				if (place >= lim)
					continue;
				EMU_ASSERT(fill[e] < cap);
				a->slot[t * K + j] = e * cap + fill[e];
				a->slot_token[e * cap + fill[e]++] = t;
			}
		}
	free(fill);
}

/* Top-k and capacity on the router's probabilities of the whole micro-batch (execute
 * mode only): each token's choices, the slot each got (or -1), the slots' tokens and
 * f_e. */
static void route_local(const struct moe_shape *s, struct moe_acts *a)
{
	int E = s->E, K = s->k;
	int *cnt = emu_xcalloc(3 * (size_t)K * E, sizeof *cnt), *base = cnt + K * E,
	    *all = base + K * E;

	top_k(s, a);
	count_runs(s, a, 1, &s->M, cnt);
	for (int j = 0; j < K; j++)
		for (int e = 0; e < E; e++) {
			base[j * E + e] = j ? base[(j - 1) * E + e] + cnt[(j - 1) * E + e] : 0;
			all[e] += cnt[j * E + e];
		}
	moe_keep(s, a, 1, &s->M, base, all);
	free(cnt);
}

/* The kept choices' rows of x into the slots of the experts held, a->x (El, cap, C),
 * zero-padded. */
static void dispatch(const struct moe_shape *s, struct moe_acts *a, const float *x)
{
	int C = s->C, lo = s->e0 * s->cap;

	memset(a->x.data, 0, a->x.n * sizeof *a->x.data);
	for (int i = 0; i < held(s) * s->cap; i++)
		if (a->slot_token[lo + i] >= 0)
			memcpy(a->x.data + (size_t)i * C, x + (size_t)a->slot_token[lo + i] * C,
			       (size_t)C * sizeof *x);
}

/* The router's probabilities (M, E). */
static void router(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
		   const float *x, const float *wr)
{
	int M = s->M, E = s->E;

	linear_fwd(k, a->probs.data, x, wr, NULL, 0, M, s->C, E);
	softmax_fwd(k, a->probs.data, a->probs.data, M, E);
	emu_compute(k->d, "moe.route", (double)M * E * s->k, (double)M * E * k->ab);
}

void moe_route(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a, const float *x,
	       const float *wr)
{
	router(k, s, a, x, wr);
	if (kctx_math(k))
		route_local(s, a);
}

void moe_choose(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a, const float *x,
		const float *wr, int nruns, const int *len, int *cnt)
{
	router(k, s, a, x, wr);
	if (!kctx_math(k))
		return;
	top_k(s, a);
	count_runs(s, a, nruns, len, cnt);
}

float moe_aux(const struct moe_shape *s, const struct moe_acts *a)
{
	double aux = 0;

	if (!a->probs.data)
		return 0;
	for (int e = 0; e < s->E; e++)
		aux += a->frac[e] * a->psum[e] / all_tokens(s);
	return (float)(s->aux_coeff * s->E * aux);
}

int moe_uniform_rows(const struct moe_shape *s, int e)
{
	long long mk = (long long)s->M * s->k;
	int u = (int)(mk / s->E) + (e < (int)(mk % s->E)); /* the remainder to the first */

	return u < s->cap ? u : s->cap;
}

/* The row of choice i in moe_permute's order (off[e]: the first row of held expert e),
 * or -1 if it was dropped or its expert is not held. */
static int permuted_row(const struct moe_shape *s, const struct moe_acts *a, const int *off, int i)
{
	int slot = a->slot[i], e = a->choice[i];

	if (slot < 0 || e < s->e0 || e >= s->e0 + held(s))
		return -1;
	return off[e] + slot - e * s->cap;
}

/* off[E + 1]: the first row of each held expert in moe_permute's order, from cnt. */
static void offsets(const struct moe_shape *s, const int *cnt, int *off)
{
	off[0] = 0;
	for (int e = 0; e < s->E; e++)
		off[e + 1] = off[e] + (e >= s->e0 && e < s->e0 + held(s) ? cnt[e] : 0);
}

int moe_permute(const struct kctx *k, const struct moe_shape *s, const struct moe_acts *a,
		float *xp, const float *x, int *cnt)
{
	int n = 0, C = s->C, e1 = s->e0 + held(s);

	for (int e = 0; e < s->E; e++) { /* the slots fill from the first: count them */
		int c = 0;

		if (e < s->e0 || e >= e1)
			c = 0;
		else if (kctx_math(k))
			while (c < s->cap && a->slot_token[e * s->cap + c] >= 0)
				c++;
		else
			c = moe_uniform_rows(s, e);
		cnt[e] = c;
		n += c;
	}
	emu_compute(k->d, "moe.permute", 0, 2.0 * n * C * k->ab);
	if (!kctx_math(k))
		return n;
	for (int e = s->e0, r = 0; e < e1; e++)
		for (int c = 0; c < cnt[e]; c++, r++)
			memcpy(xp + (size_t)r * C, x + (size_t)a->slot_token[e * s->cap + c] * C,
			       (size_t)C * sizeof *x);
	return n;
}

void moe_unpermute(const struct kctx *k, const struct moe_shape *s, const struct moe_acts *a,
		   float *out, const float *yp, const int *cnt)
{
	int M = s->M, K = s->k, C = s->C, E = s->E;
	int *off = emu_xcalloc((size_t)E + 1, sizeof *off);

	emu_compute(k->d, "moe.unpermute", 2.0 * M * K * C,
		    ((double)M * K * C + (double)M * C) * k->ab);
	if (kctx_math(k)) {
		offsets(s, cnt, off);
		memset(out, 0, (size_t)M * C * sizeof *out);
		for (int t = 0; t < M; t++)
			for (int j = 0; j < K; j++) {
				int row = permuted_row(s, a, off, t * K + j);
				float g = a->probs.data[(size_t)t * E + a->choice[t * K + j]];

				if (row < 0)
					continue;
				for (int c = 0; c < C; c++)
					out[(size_t)t * C + c] += g * yp[(size_t)row * C + c];
			}
	}
	free(off);
}

void moe_unpermute_bwd(const struct kctx *k, const struct moe_shape *s, const struct moe_acts *a,
		       float *dyp, float *dprobs, const float *dout, const float *yp,
		       const int *cnt)
{
	int M = s->M, K = s->k, C = s->C, E = s->E;
	int *off = emu_xcalloc((size_t)E + 1, sizeof *off);

	emu_compute(k->d, "moe.unpermute.bwd", 4.0 * M * K * C, 4.0 * M * K * C * k->ab);
	if (kctx_math(k)) {
		offsets(s, cnt, off);
		for (int t = 0; t < M; t++)
			for (int j = 0; j < K; j++) {
				int e = a->choice[t * K + j],
				    row = permuted_row(s, a, off, t * K + j);
				float g = a->probs.data[(size_t)t * E + e], dot = 0;
				const float *d = dout + (size_t)t * C, *y;

				if (row < 0)
					continue;
				y = yp + (size_t)row * C;
				for (int c = 0; c < C; c++) {
					dyp[(size_t)row * C + c] = g * d[c];
					dot += d[c] * y[c];
				}
				dprobs[(size_t)t * E + e] += dot;
			}
	}
	free(off);
}

void moe_permute_bwd(const struct kctx *k, const struct moe_shape *s, const struct moe_acts *a,
		     float *dx, const float *dxp, const int *cnt)
{
	int n = 0, C = s->C, e1 = s->e0 + held(s);

	for (int e = s->e0; e < e1; e++)
		n += cnt[e];
	emu_compute(k->d, "moe.permute.bwd", (double)n * C, 3.0 * n * C * k->ab);
	if (!kctx_math(k))
		return;
	for (int e = s->e0, r = 0; e < e1; e++)
		for (int c = 0; c < cnt[e]; c++, r++) {
			float *d = dx + (size_t)a->slot_token[e * s->cap + c] * C;

			for (int i = 0; i < C; i++)
				d[i] += dxp[(size_t)r * C + i];
		}
}

/* The held experts on the rows routed to them, compact (the permuted pieces). */
float moe_compact_fwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
		      float *out, const float *x, const float *w1, const float *b1, const float *w2,
		      const float *b2)
{
	int C = s->C, F = s->F, *cnt = a->rows;
	size_t r = 0;

	moe_permute(k, s, a, a->x.data, x, cnt);
	for (int e = 0; e < held(s); e++) {
		int n = cnt[s->e0 + e];

		moe_expert_fwd(k, off(a->y.data, r * C), off(a->pre.data, r * F),
			       off(a->h.data, r * F), off(a->x.data, r * C),
			       coff(w1, (size_t)e * F * C), coff(b1, (size_t)e * F),
			       coff(w2, (size_t)e * C * F), coff(b2, (size_t)e * C), n, C, F);
		r += (size_t)n;
	}
	moe_unpermute(k, s, a, out, a->y.data, cnt);
	a->aux = moe_aux(s, a);
	return kctx_math(k) ? a->aux : 0;
}

static void compact_bwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
			struct moe_scratch *sc, float *dx, const float *dout, float aux_scale,
			const float *x, const float *wr, const float *w1, const float *w2,
			float *dwr, float *dw1, float *db1, float *dw2, float *db2)
{
	int C = s->C, F = s->F, *cnt = a->rows;
	size_t r = 0;

	if (kctx_math(k))
		memset(sc->dprobs.data, 0, sc->dprobs.n * sizeof *sc->dprobs.data);
	moe_unpermute_bwd(k, s, a, sc->dy.data, sc->dprobs.data, dout, a->y.data, cnt);
	for (int e = 0; e < held(s); e++) {
		int n = cnt[s->e0 + e];

		moe_expert_bwd(k, off(sc->dx.data, r * C), sc->dh.data, sc->dpre.data,
			       off(sc->dy.data, r * C), off(a->x.data, r * C),
			       off(a->pre.data, r * F), off(a->h.data, r * F),
			       coff(w1, (size_t)e * F * C), coff(w2, (size_t)e * C * F),
			       off(dw1, (size_t)e * F * C), off(db1, (size_t)e * F),
			       off(dw2, (size_t)e * C * F), off(db2, (size_t)e * C), n, C, F);
		r += (size_t)n;
	}
	moe_permute_bwd(k, s, a, dx, sc->dx.data, cnt);
	moe_router_bwd(k, s, a, sc, dx, aux_scale, x, wr, dwr);
}

float moe_fwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a, float *out,
	      const float *x, const float *wr, const float *w1, const float *b1, const float *w2,
	      const float *b2)
{
	if (compact(s)) {
		moe_route(k, s, a, x, wr);
		return moe_compact_fwd(k, s, a, out, x, w1, b1, w2, b2);
	}
	int M = s->M, E = s->E, K = s->k, C = s->C, F = s->F, cap = s->cap, El = held(s);
	size_t slots = (size_t)El * cap;

	linear_fwd(k, a->probs.data, x, wr, NULL, 0, M, C, E);
	softmax_fwd(k, a->probs.data, a->probs.data, M, E);
	emu_compute(k->d, "moe.route", (double)M * E * K,
		    ((double)M * E + (double)slots * C + (double)M * K * C) * k->ab);
	if (kctx_math(k)) {
		route_local(s, a);
		dispatch(s, a, x);
	}
	for (int e = 0; e < El; e++) /* e: the held expert e0 + e */
		moe_expert_fwd(k, off(a->y.data, (size_t)e * cap * C),
			       off(a->pre.data, (size_t)e * cap * F),
			       off(a->h.data, (size_t)e * cap * F),
			       off(a->x.data, (size_t)e * cap * C), coff(w1, (size_t)e * F * C),
			       coff(b1, (size_t)e * F), coff(w2, (size_t)e * C * F),
			       coff(b2, (size_t)e * C), cap, C, F);
	emu_compute(k->d, "moe.combine", 2.0 * M * K * C,
		    ((double)M * K * C + (double)M * C) * k->ab);
	if (!kctx_math(k))
		return 0;
	/* out[t] = sum of gate * expert output over t's kept choices, in choice order (of
	 * the experts held: a part of the sum otherwise) */
	memset(out, 0, (size_t)M * C * sizeof *out);
	for (int t = 0; t < M; t++)
		for (int j = 0; j < K; j++) {
			int e = a->choice[t * K + j], slot = a->slot[t * K + j];
			float g = a->probs.data[(size_t)t * E + e];
			const float *y;

			if (slot < 0 || e < s->e0 || e >= s->e0 + El)
				continue;
			y = a->y.data + (size_t)(slot - s->e0 * cap) * C;
			for (int c = 0; c < C; c++)
				out[(size_t)t * C + c] += g * y[c];
		}
	a->aux = moe_aux(s, a);
	return a->aux;
}

void moe_bwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
	     struct moe_scratch *sc, float *dx, const float *dout, float aux_scale, const float *x,
	     const float *wr, const float *w1, const float *w2, float *dwr, float *dw1, float *db1,
	     float *dw2, float *db2)
{
	int M = s->M, E = s->E, C = s->C, F = s->F, cap = s->cap, math = kctx_math(k);
	float *dp = sc->dprobs.data; /* d loss / d router probabilities */

	if (compact(s)) {
		compact_bwd(k, s, a, sc, dx, dout, aux_scale, x, wr, w1, w2, dwr, dw1, db1, dw2,
			    db2);
		return;
	}
	if (math)
		memset(dp, 0, (size_t)M * E * sizeof *dp);
	for (int le = 0; le < held(s); le++) { /* the held expert e, le-th of the block's */
		int e = s->e0 + le;
		size_t base = (size_t)le * cap, gbase = (size_t)e * cap;

		/* combine backward: each slot's d output is gate * dout of its token, and the
		 * gate's gradient is dout . expert output */
		emu_compute(k->d, "moe.combine.bwd", 4.0 * cap * C, 4.0 * cap * C * k->ab);
		if (math) {
			memset(sc->dy.data, 0, sc->dy.n * sizeof *sc->dy.data);
			for (int r = 0; r < cap; r++) {
				int t = a->slot_token[gbase + r];
				const float *g = dout + (size_t)t * C,
					    *y = a->y.data + (base + r) * C;
				float gate, dot = 0;

				if (t < 0)
					continue;
				gate = a->probs.data[(size_t)t * E + e];
				for (int c = 0; c < C; c++) {
					sc->dy.data[(size_t)r * C + c] = gate * g[c];
					dot += g[c] * y[c];
				}
				dp[(size_t)t * E + e] += dot;
			}
		}
		/* the expert's MLP backward on its cap rows */
		moe_expert_bwd(k, sc->dx.data, sc->dh.data, sc->dpre.data, sc->dy.data,
			       off(a->x.data, base * C), off(a->pre.data, base * F),
			       off(a->h.data, base * F), coff(w1, (size_t)le * F * C),
			       coff(w2, (size_t)le * C * F), off(dw1, (size_t)le * F * C),
			       off(db1, (size_t)le * F), off(dw2, (size_t)le * C * F),
			       off(db2, (size_t)le * C), cap, C, F);
		/* scatter the inputs' gradients back to their tokens */
		emu_compute(k->d, "moe.scatter.bwd", (double)cap * C, 3.0 * cap * C * k->ab);
		if (math)
			for (int r = 0; r < cap; r++) {
				int t = a->slot_token[gbase + r];

				if (t >= 0)
					for (int c = 0; c < C; c++)
						dx[(size_t)t * C + c] +=
							sc->dx.data[(size_t)r * C + c];
			}
	}
	moe_router_bwd(k, s, a, sc, dx, aux_scale, x, wr, dwr);
}

void moe_expert_bwd(const struct kctx *k, float *dx, float *dh, float *dpre, const float *dy,
		    const float *x, const float *pre, const float *h, const float *w1,
		    const float *w2, float *dw1, float *db1, float *dw2, float *db2, int n, int C,
		    int F)
{
	if (kctx_math(k)) {
		memset(dh, 0, (size_t)n * F * sizeof *dh);
		memset(dpre, 0, (size_t)n * F * sizeof *dpre);
		memset(dx, 0, (size_t)n * C * sizeof *dx);
	}
	linear_bwd_input(k, dh, dy, w2, n, F, C);
	linear_bwd_weight(k, dw2, db2, 1, dy, h, n, F, C);
	gelu_bwd(k, dpre, pre, dh, (size_t)n * F);
	linear_bwd_input(k, dx, dpre, w1, n, C, F);
	linear_bwd_weight(k, dw1, db1, 1, dpre, x, n, C, F);
}

void moe_router_bwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
		    struct moe_scratch *sc, float *dx, float aux_scale, const float *x,
		    const float *wr, float *dwr)
{
	int M = s->M, E = s->E, math = kctx_math(k);
	float *dp = sc->dprobs.data;

	/* aux loss: d aux / d probs[t][e] = coeff * E * f_e / Mall; then the router's
	 * softmax and linear backward */
	emu_compute(k->d, "moe.aux.bwd", (double)M * E, 2.0 * M * E * k->ab);
	if (math)
		for (int t = 0; t < M; t++)
			for (int e = 0; e < E; e++)
				dp[(size_t)t * E + e] +=
					aux_scale *
					(float)(s->aux_coeff * E * a->frac[e] / all_tokens(s));
	if (math)
		memset(sc->dlogits.data, 0, sc->dlogits.n * sizeof *sc->dlogits.data);
	softmax_bwd(k, sc->dlogits.data, a->probs.data, dp, M, E);
	linear_bwd_input(k, dx, sc->dlogits.data, wr, M, s->C, E);
	linear_bwd_weight(k, dwr, NULL, 0, sc->dlogits.data, x, M, s->C, E);
}
