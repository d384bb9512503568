/* moe: the mixture-of-experts block of moe.h: its activations and scratch, one expert's
 * MLP, and moe_fwd and moe_bwd, whose experts run on each held expert's cap slots,
 * zero-padded (dropless, or routed over ranks, on compact rows: moe_permute.c). The
 * routing is moe_router.c's. */
#include "moe.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "linear.h"
#include "moe_internal.h"
#include "ops.h"
#include "util.h"

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
	return compact(s) ? (size_t)s->M * s->k : (size_t)moe_held(s) * s->cap;
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

/* The kept choices' rows of x into the slots of the experts held, a->x (El, cap, C),
 * zero-padded. */
static void dispatch(const struct moe_shape *s, struct moe_acts *a, const float *x)
{
	int C = s->C, lo = s->e0 * s->cap;

	memset(a->x.data, 0, a->x.n * sizeof *a->x.data);
	for (int i = 0; i < moe_held(s) * s->cap; i++)
		if (a->slot_token[lo + i] >= 0)
			memcpy(a->x.data + (size_t)i * C, x + (size_t)a->slot_token[lo + i] * C,
			       (size_t)C * sizeof *x);
}

float moe_fwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a, float *out,
	      const float *x, const float *wr, const float *w1, const float *b1, const float *w2,
	      const float *b2)
{
	if (compact(s)) {
		moe_route(k, s, a, x, wr);
		return moe_compact_fwd(k, s, a, out, x, w1, b1, w2, b2);
	}
	int M = s->M, E = s->E, K = s->k, C = s->C, F = s->F, cap = s->cap, El = moe_held(s);
	size_t slots = (size_t)El * cap;

	linear_fwd(k, a->probs.data, x, wr, NULL, 0, M, C, E);
	softmax_fwd(k, a->probs.data, a->probs.data, M, E);
	emu_compute(k->d, "moe.route", (double)M * E * K,
		    ((double)M * E + (double)slots * C + (double)M * K * C) * k->ab);
	if (kctx_math(k)) {
		moe_route_local(s, a);
		dispatch(s, a, x);
	}
	for (int e = 0; e < El; e++) /* e: the held expert e0 + e */
		moe_expert_fwd(k, moe_off(a->y.data, (size_t)e * cap * C),
			       moe_off(a->pre.data, (size_t)e * cap * F),
			       moe_off(a->h.data, (size_t)e * cap * F),
			       moe_off(a->x.data, (size_t)e * cap * C),
			       moe_coff(w1, (size_t)e * F * C), moe_coff(b1, (size_t)e * F),
			       moe_coff(w2, (size_t)e * C * F), moe_coff(b2, (size_t)e * C), cap, C,
			       F);
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
		moe_compact_bwd(k, s, a, sc, dx, dout, aux_scale, x, wr, w1, w2, dwr, dw1, db1, dw2,
				db2);
		return;
	}
	if (math)
		memset(dp, 0, (size_t)M * E * sizeof *dp);
	for (int le = 0; le < moe_held(s); le++) { /* the held expert e, le-th of the block's */
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
			       moe_off(a->x.data, base * C), moe_off(a->pre.data, base * F),
			       moe_off(a->h.data, base * F), moe_coff(w1, (size_t)le * F * C),
			       moe_coff(w2, (size_t)le * C * F), moe_off(dw1, (size_t)le * F * C),
			       moe_off(db1, (size_t)le * F), moe_off(dw2, (size_t)le * C * F),
			       moe_off(db2, (size_t)le * C), cap, C, F);
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
