/* par/moe_route: a MoE layer's routing when context parallelism spreads its micro-batch
 * over the cp group (models/moe.h's moe_choose and moe_keep).
 *
 * The serial model gives an expert's slots to the micro-batch's first choices in token
 * order, then to its second choices, and counts f_e of the load-balancing loss over the
 * whole micro-batch. A cp rank holds two chunks of each sequence (one, contiguous), so it
 * must know how many choices of each expert come before its own. Each rank counts its
 * choices by choice rank j, run (one of its chunks of one sequence) and expert; one
 * all-gather over the cp group brings every rank's counts (k runs E numbers a rank, tagged
 * as cp's traffic); and each rank sums, for each of its runs, the counts of the runs
 * before it in the micro-batch's order. A choice then has the same place among its
 * expert's as in the serial model, so the same choices are kept, and f_e has the same
 * bits (models/moe.c). The capacity is the micro-batch's (moe_shape.cap_all), and each
 * rank's experts run on the rows it kept, compact. Megatron-Core computes the capacity
 * from each rank's own tokens instead, which keeps other tokens than one GPU would.
 *
 * P_e stays local. A rank's aux loss, coeff E sum_e f_e (its tokens' sum of p_te) / M
 * with its own M = B s / cp, is cp times its share of the micro-batch's, and its
 * gradient coeff E f_e / M is cp times the serial one's; the device loop divides each
 * rank's loss and backward by cp, so the group's sums are the serial model's value and
 * gradient with no rescaling here. */
#include <stdlib.h>

#include "coll.h"
#include "moe.h"
#include "par/cp.h"
#include "par/internal.h"

/* The runs of a rank's rows: two chunks a sequence, or one (contiguous). */
static int halves(const struct par_model *m)
{
	return m->pc.cp_contiguous ? 1 : 2;
}

size_t par_moe_route_floats(const struct par_model *m)
{
	size_t runs = (size_t)m->B * (size_t)halves(m);

	return (size_t)m->cfg.moe_top_k * runs * (size_t)m->cfg.num_experts * ((size_t)m->cp + 1);
}

/* From every rank's counts (recv: rank q's at q K nruns E), the choices before each of
 * this rank's runs into base, and each expert's in all. */
static void places(const struct par_model *m, const struct moe_shape *s, const float *recv,
		   int nruns, int *base, int *all)
{
	int E = s->E, K = s->k, B = nruns / halves(m), len = m->T / halves(m);
	int G = m->cp * halves(m), seq = m->cfg.seq_len, n = K * B * G;
	size_t per = (size_t)K * nruns * E;
	int *tot = emu_xcalloc((size_t)n * E, sizeof *tot);

	/* the micro-batch's counts in its order: (j, sequence, chunk), each E (the bug: this
	 * rank's alone) */
	for (int q = 0; q < m->cp; q++) {
		if (m->pc.bug == PAR_BUG_CP_ROUTE && q != m->cpr)
			continue;
		for (int j = 0; j < K; j++)
			for (int u = 0; u < nruns; u++) {
				int g = par_cp_position(seq, m->cp, q, u % halves(m) * len,
							m->pc.cp_contiguous) /
					len;
				const float *c = recv + q * per + (size_t)(j * nruns + u) * E;
				int *t = tot + ((size_t)(j * B + u / halves(m)) * G + g) * E;

				for (int e = 0; e < E; e++)
					t[e] = (int)c[e];
			}
	}
	/* exclusive prefix sums, in place: tot[i] becomes the choices before run i */
	for (int e = 0; e < E; e++) {
		int sum = 0;

		for (int i = 0; i < n; i++) {
			int c = tot[(size_t)i * E + e];

			tot[(size_t)i * E + e] = sum;
			sum += c;
		}
		all[e] = sum;
	}
	for (int j = 0; j < K; j++)
		for (int u = 0; u < nruns; u++) {
			int g = par_cp_position(seq, m->cp, m->cpr, u % halves(m) * len,
						m->pc.cp_contiguous) /
				len;

			for (int e = 0; e < E; e++)
				base[(size_t)(j * nruns + u) * E + e] =
					tot[((size_t)(j * B + u / halves(m)) * G + g) * E + e];
		}
	free(tot);
}

int par_moe_route(struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct moe_acts *a, const float *x, const float *wr)
{
	const struct moe_shape *s = &c->moe;
	int nruns = c->B * halves(m), E = s->E, K = s->k, math = kctx_math(&m->k), rc, old;
	size_t per = (size_t)K * nruns * E;
	float *buf = D(w->route_cnt);
	int *cnt, *base, *all;

	if (m->cp == 1) {
		moe_route(&m->k, s, a, x, wr);
		return 0;
	}
	cnt = emu_xcalloc(2 * per + (size_t)E, sizeof *cnt);
	base = cnt + per;
	all = base + per;
	moe_choose(&m->k, s, a, x, wr, nruns, cnt);
	for (size_t i = 0; buf && i < per; i++)
		buf[i] = (float)cnt[i]; /* (exact: fewer than 2^24 tokens a micro-batch) */
	old = coll_set_tag(m->k.d, PAR_TRAFFIC_CP);
	rc = coll_all_gather(m->k.d, m->cpg, buf, buf ? buf + per : NULL, per);
	coll_set_tag(m->k.d, old);
	if (!rc && math) {
		places(m, s, buf + per, nruns, base, all);
		moe_keep(s, a, nruns, base, all, s->M * m->cp);
	}
	free(cnt);
	return rc;
}
