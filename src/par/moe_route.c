/* par/moe_route: a MoE layer's routing when a micro-batch's tokens are spread over ranks
 * (models/moe.h's moe_choose and moe_keep): over the cp group, each rank holding two
 * chunks of each sequence (one, contiguous); and, when the experts go over ep ranks that
 * span the tensor-parallel group (par/ep.h), over the tp x cp group, each rank routing
 * its own sequence-parallel rows.
 *
 * The serial model gives an expert's slots to the micro-batch's first choices in token
 * order, then to its second choices, and takes f_e and P_e of the load-balancing loss
 * over the whole micro-batch. So a rank must know how many choices of each expert come
 * before its own. Its rows are cut into runs, pieces of one cp chunk each, whose tokens
 * are consecutive in the micro-batch; each rank counts its choices per choice rank j, run
 * and expert, and sums each expert's probability over its tokens; one all-gather over the
 * group brings every rank's counts and sums (k runs E + E numbers a rank, tagged as cp's
 * traffic, or ep's without cp). Every rank knows where every rank's runs sit in the
 * micro-batch (the layout is fixed), so each sums, for each of its runs, the counts of
 * the runs before it: a choice then has the serial model's place among its expert's, the
 * same choices are kept, f_e has the same bits (models/moe_router.c) and P_e the group's sum.
 * The capacity is the micro-batch's (moe_shape.cap_all); each rank's experts run on the
 * rows it kept, compact. Megatron-Core computes the capacity from each rank's own
 * tokens instead (and all-reduces the counts for the aux loss alone), which keeps other
 * tokens than one GPU would.
 *
 * With the loss and f_e, P_e the micro-batch's, every rank holds the whole aux loss; its
 * gradient coeff E f_e / Mall a probability goes to the rank's own tokens, at the scale
 * par_moe_aux_scale gives (the device loop divides a cp rank's backward by cp). */
#include <stdlib.h>

#include "coll.h"
#include "moe.h"
#include "par/cp.h"
#include "par/internal.h"

/* The rows of a cp chunk: a sequence's T rows are two chunks, or one (contiguous). */
static int chunk_rows(const struct par_model *m)
{
	return m->pc.cp_contiguous ? m->T : m->T / 2;
}

/* Member q's rows of the group's cp-local micro-batch (B T rows): its tp rank's
 * sequence-parallel share when each rank routes its own, else all; and its cp rank. */
static void member_rows(const struct par_model *m, const struct par_tp *c, int q, int *lo, int *hi,
			int *cpr)
{
	int tp = m->ep_rows ? m->tp : 1, BT = c->B * m->T;

	*lo = q % tp * (BT / tp);
	*hi = *lo + BT / tp;
	*cpr = q / tp;
}

/* Member q's runs: the pieces of its rows cut at the chunks' edges, each's first token's
 * index in the micro-batch (b s + its position) into start and its length into len (if
 * not NULL); returns how many. */
static int member_runs(const struct par_model *m, const struct par_tp *c, int q, int *start,
		       int *len)
{
	int lo, hi, cpr, ch = chunk_rows(m), n = 0, s = m->cfg.seq_len;

	member_rows(m, c, q, &lo, &hi, &cpr);
	for (int k = lo / ch; k * ch < hi; k++, n++) {
		int a = k * ch > lo ? k * ch : lo, b = (k + 1) * ch < hi ? (k + 1) * ch : hi;

		if (start)
			start[n] = a / m->T * s +
				   par_cp_position(s, m->cp, cpr, a % m->T, m->pc.cp_contiguous);
		if (len)
			len[n] = b - a;
	}
	return n;
}

/* The most runs any member has: the length of each member's count block. */
static int max_runs(const struct par_model *m, const struct par_tp *c)
{
	int most = 0;

	for (int q = 0; q < m->route_n; q++) {
		int n = member_runs(m, c, q, NULL, NULL);

		most = n > most ? n : most;
	}
	return most;
}

size_t par_moe_route_floats(const struct par_model *m)
{
	const struct par_tp *c = &m->tpv[PAR_TPV_MODEL];
	size_t per =
		(size_t)m->cfg.moe_top_k * (size_t)max_runs(m, c) * (size_t)m->cfg.num_experts +
		(size_t)m->cfg.num_experts;

	return per * ((size_t)m->route_n + 1);
}

/* A run of the micro-batch: its first token's index, and where its counts are. */
struct run {
	int start;
	const float *cnt; /* [K][R][E] block of its member, at the run's u: j R E + e */
};

static int by_start(const void *a, const void *b)
{
	const struct run *x = a, *y = b;

	return (x->start > y->start) - (x->start < y->start);
}

/* From every member's counts (recv: member q's block at q per, [K][R][E] then its sums
 * [E]), the choices before each of this rank's runs into base ([K][nruns][E]), each
 * expert's choices in all and the micro-batch's probability sums in psum. */
static void places(const struct par_model *m, const struct par_tp *c, const float *recv, int R,
		   size_t per, const int *mine, int nruns, int *base, int *all, double *psum)
{
	int E = c->moe.E, K = c->moe.k, n = 0;
	struct run *runs = emu_xcalloc((size_t)m->route_n * R, sizeof *runs);
	int *start = emu_xcalloc((size_t)R, sizeof *start);
	int *sum = emu_xcalloc((size_t)E, sizeof *sum);

	for (int e = 0; e < E; e++) {
		psum[e] = 0;
		all[e] = 0;
	}
	for (int q = 0; q < m->route_n; q++) {
		int nq = member_runs(m, c, q, start, NULL);

		/* (the bug: this rank's counts alone) */
		if (m->pc.bug == PAR_BUG_MOE_ROUTE && q != m->route_r)
			continue;
		for (int u = 0; u < nq; u++)
			runs[n++] = (struct run){start[u], recv + q * per + (size_t)u * E};
		for (int e = 0; e < E; e++)
			psum[e] += recv[q * per + (size_t)K * R * E + e];
	}
	qsort(runs, (size_t)n, sizeof *runs, by_start);
	/* the j-th choices come after every (j-1)-th one: a run's place is the choices of
	 * the passes before, then of the runs before it in this pass */
	for (int j = 0; j < K; j++)
		for (int i = 0; i < n; i++) {
			const float *cnt = runs[i].cnt + (size_t)j * R * E;

			for (int u = 0; u < nruns; u++)
				if (mine[u] == runs[i].start)
					for (int e = 0; e < E; e++)
						base[((size_t)j * nruns + u) * E + e] = sum[e];
			for (int e = 0; e < E; e++)
				sum[e] += (int)cnt[e];
		}
	for (int e = 0; e < E; e++)
		all[e] = sum[e];
	free(runs);
	free(start);
	free(sum);
}

int par_moe_route(struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct moe_acts *a, const float *x, const float *wr)
{
	const struct moe_shape *s = &c->moe;
	int E = s->E, K = s->k, R, nruns, rc, old;
	size_t per;
	float *buf = D(w->route_cnt);
	int *cnt, *base, *all, *start, *len;

	if (m->route_n == 1) {
		moe_route(&m->k, s, a, x, wr);
		return 0;
	}
	R = max_runs(m, c);
	per = (size_t)K * R * E + (size_t)E;
	start = emu_xcalloc(2 * (size_t)R, sizeof *start);
	len = start + R;
	nruns = member_runs(m, c, m->route_r, start, len);
	cnt = emu_xcalloc(2 * (size_t)K * nruns * E + (size_t)E, sizeof *cnt);
	base = cnt + (size_t)K * nruns * E;
	all = base + (size_t)K * nruns * E;
	moe_choose(&m->k, s, a, x, wr, nruns, len, cnt);
	if (buf) { /* (counts exact in floats: fewer than 2^24 tokens a micro-batch) */
		for (size_t i = 0; i < per; i++)
			buf[i] = 0;
		for (int j = 0; j < K; j++)
			for (int u = 0; u < nruns; u++)
				for (int e = 0; e < E; e++)
					buf[((size_t)j * R + u) * E + e] =
						(float)cnt[((size_t)j * nruns + u) * E + e];
		for (int e = 0; e < E; e++)
			buf[(size_t)K * R * E + e] = (float)a->psum[e];
	}
	old = coll_set_tag(m->k.d, m->cp > 1 ? PAR_TRAFFIC_CP : PAR_TRAFFIC_EP);
	rc = coll_all_gather(m->k.d, m->routeg, buf, buf ? buf + per : NULL, per);
	coll_set_tag(m->k.d, old);
	if (!rc && kctx_math(&m->k)) {
		places(m, c, buf + per, R, per, start, nruns, base, all, a->psum);
		moe_keep(s, a, nruns, len, base, all);
	}
	free(cnt);
	free(start);
	return rc;
}

float par_moe_aux_scale(const struct par_model *m, const struct par_tp *c, float scale)
{
	/* the tokens replicated over tp: rank 0 alone; a cp rank's backward divided by cp */
	if (!m->ep_rows && c->r != 0)
		return 0.0f;
	return scale * (float)m->cp;
}
