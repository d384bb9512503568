/* moe_permute: the MoE block's permuted pieces (moe.h): the kept choices' rows of x
 * expert by expert onto compact rows, and back into each token's sum (the combine), their
 * backward, and the held experts on those rows, forward and backward, as moe_fwd and
 * moe_bwd run them dropless or routed over ranks. */
#include "moe.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "moe_internal.h"
#include "util.h"

/* The row of choice i in moe_permute's order (off[e]: the first row of held expert e),
 * or -1 if it was dropped or its expert is not held. */
static int permuted_row(const struct moe_shape *s, const struct moe_acts *a, const int *off, int i)
{
	int slot = a->slot[i], e = a->choice[i];

	if (slot < 0 || e < s->e0 || e >= s->e0 + moe_held(s))
		return -1;
	return off[e] + slot - e * s->cap;
}

/* off[E + 1]: the first row of each held expert in moe_permute's order, from cnt. */
static void offsets(const struct moe_shape *s, const int *cnt, int *off)
{
	off[0] = 0;
	for (int e = 0; e < s->E; e++)
		off[e + 1] = off[e] + (e >= s->e0 && e < s->e0 + moe_held(s) ? cnt[e] : 0);
}

int moe_permute(const struct kctx *k, const struct moe_shape *s, const struct moe_acts *a,
		float *xp, const float *x, int *cnt)
{
	int n = 0, C = s->C, e1 = s->e0 + moe_held(s);

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
	int n = 0, C = s->C, e1 = s->e0 + moe_held(s);

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
	for (int e = 0; e < moe_held(s); e++) {
		int n = cnt[s->e0 + e];

		moe_expert_fwd(k, moe_off(a->y.data, r * C), moe_off(a->pre.data, r * F),
			       moe_off(a->h.data, r * F), moe_off(a->x.data, r * C),
			       moe_coff(w1, (size_t)e * F * C), moe_coff(b1, (size_t)e * F),
			       moe_coff(w2, (size_t)e * C * F), moe_coff(b2, (size_t)e * C), n, C,
			       F);
		r += (size_t)n;
	}
	moe_unpermute(k, s, a, out, a->y.data, cnt);
	a->aux = moe_aux(s, a);
	return kctx_math(k) ? a->aux : 0;
}

void moe_compact_bwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
		     struct moe_scratch *sc, float *dx, const float *dout, float aux_scale,
		     const float *x, const float *wr, const float *w1, const float *w2, float *dwr,
		     float *dw1, float *db1, float *dw2, float *db2)
{
	int C = s->C, F = s->F, *cnt = a->rows;
	size_t r = 0;

	if (kctx_math(k))
		memset(sc->dprobs.data, 0, sc->dprobs.n * sizeof *sc->dprobs.data);
	moe_unpermute_bwd(k, s, a, sc->dy.data, sc->dprobs.data, dout, a->y.data, cnt);
	for (int e = 0; e < moe_held(s); e++) {
		int n = cnt[s->e0 + e];

		moe_expert_bwd(k, moe_off(sc->dx.data, r * C), sc->dh.data, sc->dpre.data,
			       moe_off(sc->dy.data, r * C), moe_off(a->x.data, r * C),
			       moe_off(a->pre.data, r * F), moe_off(a->h.data, r * F),
			       moe_coff(w1, (size_t)e * F * C), moe_coff(w2, (size_t)e * C * F),
			       moe_off(dw1, (size_t)e * F * C), moe_off(db1, (size_t)e * F),
			       moe_off(dw2, (size_t)e * C * F), moe_off(db2, (size_t)e * C), n, C,
			       F);
		r += (size_t)n;
	}
	moe_permute_bwd(k, s, a, dx, sc->dx.data, cnt);
	moe_router_bwd(k, s, a, sc, dx, aux_scale, x, wr, dwr);
}
