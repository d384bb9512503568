/* moe_router: the MoE block's routing (moe.h): the capacity, the router's probabilities,
 * each token's top-k choices and the slots they get (also for a micro-batch spread over
 * ranks: choose and keep), the load-balancing aux loss, and the router's backward. */
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "linear.h"
#include "moe_internal.h"
#include "ops.h"
#include "util.h"

int moe_capacity(double capacity_factor, int M, int k, int E)
{
	int cap = (int)floor(capacity_factor * (double)M * k / E);

	if (capacity_factor <= 0)
		return M; /* dropless: an expert gets each token at most once */
	return cap < 1 ? 1 : cap;
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

void moe_route_local(const struct moe_shape *s, struct moe_acts *a)
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
		moe_route_local(s, a);
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
