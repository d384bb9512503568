/* par/cp_whole: context parallelism's comm types whose attention sees whole sequences,
 * the keys in position order (par/cp.h): all_gather, every rank's K and V gathered
 * (Megatron-Core's --cp-comm-type all_gather), and a2a, Ulysses (Jacobs et al. 2023,
 * DeepSpeed-Ulysses, arXiv 2309.14509): all-to-alls between sequence- and head-sharded
 * q, k, v, each rank the whole sequences of its head group. Shapes as in par/cp.c. */
#include "coll.h"
#include "par/cp.h"
#include "par/cp_internal.h"

/* ------------------------------------------------------------------------------------ */
/* all_gather                                                                           */

/* Every rank's K and V (B T, 2C), gathered into w->kv[1] in rank order, then into w->dkv[0]
 * (B, s, 2C) in position order. */
static int gather_kv(const struct cp *g, struct par_work *w, const float *qkv)
{
	size_t n = (size_t)g->B * g->T * 2 * g->C;
	int rc;

	cp_kv_pack(g, D(w->kv[0]), qkv);
	if ((rc = coll_all_gather(g->k->d, g->g, D(w->kv[0]), D(w->kv[1]), n)))
		return rc;
	sum_charge(g->k, "cp.kv order", 1, (double)((size_t)g->n * n));
	for (int j = 0; j < g->n; j++)
		for (int b = 0; b < g->B; b++)
			for (int h = 0; h < 2; h++) {
				size_t src = ((size_t)j * g->B + b) * g->T + (size_t)h * g->ch;
				size_t dst = (size_t)b * g->s +
					     (size_t)par_cp_position(g->s, g->n, j, h * g->ch, 0);

				cp_rows_copy(g->k, cp_at(D(w->dkv[0]), dst * 2 * g->C), 2 * g->C,
					     cp_at(D(w->kv[1]), src * 2 * g->C), 2 * g->C,
					     (size_t)g->ch, 2 * g->C, 0);
			}
	return 0;
}

/* Chunk h of my queries against every key before it (in w->dkv[0], position order). */
static struct attn_view gather_view(struct cp *g, const float *qkv, float *out, const float *kvpos,
				    int h)
{
	int p = par_cp_position(g->s, g->n, g->r, h * g->ch, 0);
	struct attn_view a =
		cp_view(g, qkv, out, kvpos, 2 * g->C, g->s, h * g->ch, g->ch, 0, p + g->ch, p);

	cp_drop_at(g, &a, 0, h * g->ch, NULL);
	return a;
}

int cp_gather_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct cp g = cp_of(m, c, w, d);
	int rc = gather_kv(&g, w, D(la->qkv));

	for (int h = 0; h < 2 && !rc; h++) {
		struct attn_view a = gather_view(&g, D(la->qkv), D(la->atty), D(w->dkv[0]), h);

		attention_flash_fwd_view(&m->k, &a, cp_at(D(la->att), (size_t)h * g.ch), g.T,
					 g.scratch);
	}
	return rc;
}

int cp_gather_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct cp g = cp_of(m, c, w, d);
	size_t C = (size_t)g.C, n = (size_t)g.B * g.T * 2 * C;
	float *dq = D(w->dqkv), *dkv = D(w->dkv[1]);
	int rc;

	par_zero(&w->dqkv);
	par_zero(&w->dkv[1]);
	if ((rc = gather_kv(&g, w, D(la->qkv))))
		return rc;
	for (int h = 0; h < 2; h++) {
		struct attn_view a = gather_view(&g, D(la->qkv), D(la->atty), D(w->dkv[0]), h);
		size_t q = (size_t)h * g.ch;

		attention_flash_bwd_view(&m->k, &a, cp_at(D(la->att), q), g.T, cp_at(dq, q * 3 * C),
					 dkv, cp_at(dkv, C), g.scratch, cp_at(D(w->datty), q * C));
	}
	/* dK, dV by position back into rank order, each rank's summed into it */
	sum_charge(&m->k, "cp.dkv order", 1, (double)((size_t)g.n * n));
	for (int j = 0; j < g.n; j++)
		for (int b = 0; b < g.B; b++)
			for (int h = 0; h < 2; h++) {
				size_t dst = ((size_t)j * g.B + b) * g.T + (size_t)h * g.ch;
				size_t src = (size_t)b * g.s +
					     (size_t)par_cp_position(g.s, g.n, j, h * g.ch, 0);

				cp_rows_copy(&m->k, cp_at(D(w->kv[1]), dst * 2 * C), 2 * g.C,
					     cp_at(dkv, src * 2 * C), 2 * g.C, (size_t)g.ch,
					     2 * g.C, 0);
			}
	if ((rc = coll_reduce_scatter(m->k.d, g.g, D(w->kv[1]), D(w->kv[0]), n, COLL_SUM)))
		return rc;
	sum_charge(&m->k, "cp.dkv add", 2, (double)n);
	cp_rows_copy(&m->k, cp_at(dq, C), 3 * g.C, D(w->kv[0]), 2 * g.C, (size_t)g.B * g.T, 2 * g.C,
		     1);
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* a2a: Ulysses                                                                         */

/* The all-to-all between sequence- and head-sharded layouts of w columns a head group
 * (3 of them interleaved for q, k, v if parts is 3): forward (to_heads) my rows' columns
 * of head group j go to rank j, which places them at their positions; back, the rows of
 * rank j's positions go to it, which places them at its head group's columns. seq (B,
 * T, parts nh hs) is this rank's rows, heads (B, s, parts nh hs / n) its head group's
 * whole sequences; send and recv are (B T parts nh hs) each. */
static int ulysses_a2a(const struct cp *g, float *seq, float *heads, float *send, float *recv,
		       int parts, int to_heads)
{
	int wg = g->C / g->n, ls = parts * g->C, lh = parts * wg;
	size_t blk = (size_t)g->B * g->T * lh; /* a rank's block */
	int rc;

	sum_charge(g->k, "cp.a2a pack", 1, (double)((size_t)g->n * blk));
	for (int j = 0; j < g->n; j++) /* pack block j */
		for (int b = 0; b < g->B; b++)
			for (int i = 0; i < g->T; i += g->ch) {
				size_t row = (size_t)b * g->T + (size_t)i;
				float *dst = cp_at(send, j * blk + row * lh);

				for (int p = 0; p < parts; p++) {
					size_t col = (size_t)p * g->C + (size_t)j * wg;
					size_t pos = (size_t)b * g->s +
						     (size_t)par_cp_position(g->s, g->n, j, i, 0);

					if (to_heads)
						cp_rows_copy(g->k, cp_at(dst, (size_t)p * wg), lh,
							     cp_at(seq, row * ls + col), ls,
							     (size_t)g->ch, wg, 0);
					else
						cp_rows_copy(
							g->k, cp_at(dst, (size_t)p * wg), lh,
							cp_at(heads, pos * lh + (size_t)p * wg), lh,
							(size_t)g->ch, wg, 0);
				}
			}
	if ((rc = coll_all_to_all(g->k->d, g->g, send, recv, blk)))
		return rc;
	sum_charge(g->k, "cp.a2a unpack", 1, (double)((size_t)g->n * blk));
	for (int j = 0; j < g->n; j++) /* unpack block j */
		for (int b = 0; b < g->B; b++)
			for (int i = 0; i < g->T; i += g->ch) {
				size_t row = (size_t)b * g->T + (size_t)i;
				const float *src = cp_at(recv, j * blk + row * lh);
				size_t pos = (size_t)b * g->s +
					     (size_t)par_cp_position(g->s, g->n, j, i, 0);

				if (to_heads)
					cp_rows_copy(g->k, cp_at(heads, pos * lh), lh, src, lh,
						     (size_t)g->ch, lh, 0);
				else
					for (int p = 0; p < parts; p++)
						cp_rows_copy(
							g->k,
							cp_at(seq, row * ls + (size_t)p * g->C +
									   (size_t)j * wg),
							ls, cp_at((float *)src, (size_t)p * wg), lh,
							(size_t)g->ch, wg, 0);
			}
	return 0;
}

/* My head group's nh heads of whole sequences (qkv (B, s, 3 nh hs), out (B, s, nh hs)):
 * the tp rank's heads from the group's first, nh a cp rank; positions are indices. */
static struct attn_view ulysses_view(struct cp *g, float *out, const float *qkv, int nh)
{
	struct attn_view a = attention_qkv_view(out, NULL, qkv, g->B, g->s, nh, 0, nh, g->hs);

	if (g->d->p > 0) {
		g->dd[0] = *g->d;
		if (!g->local)
			g->dd[0].head0 += g->r * nh;
		a.drop = &g->dd[0];
	}
	return a;
}

int cp_ulysses_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct cp g = cp_of(m, c, w, d);
	int nh = g.nh / g.n, rc;
	struct attn_view a;

	/* q, k, v of my head group, whole sequences, in place of my rows in la->qkv (they
	 * are packed to send before it is written) */
	if ((rc = ulysses_a2a(&g, D(la->qkv), D(la->qkv), D(w->kv[0]), D(w->kv[1]), 3, 1)))
		return rc;
	a = ulysses_view(&g, D(w->dkv[1]), D(la->qkv), nh);
	attention_flash_fwd_view(&m->k, &a, D(la->att), 0, g.scratch);
	return ulysses_a2a(&g, D(la->atty), D(w->dkv[1]), D(w->kv[0]), D(w->kv[1]), 1, 0);
}

int cp_ulysses_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct cp g = cp_of(m, c, w, d);
	int nh = g.nh / g.n, rc;
	size_t half = w->dkv[1].n / 2, Ch = (size_t)nh * g.hs; /* (B, s, C / n) twice: out, d out */
	float *dq = D(w->dkv[0]);
	struct attn_view a;
	float *outh = D(w->dkv[1]), *douth = cp_at(D(w->dkv[1]), half);

	if ((rc = ulysses_a2a(&g, D(la->atty), outh, D(w->kv[0]), D(w->kv[1]), 1, 1)) ||
	    (rc = ulysses_a2a(&g, D(w->datty), douth, D(w->kv[0]), D(w->kv[1]), 1, 1)))
		return rc;
	par_zero(&w->dkv[0]);
	a = ulysses_view(&g, outh, D(la->qkv), nh);
	attention_flash_bwd_view(&m->k, &a, D(la->att), 0, dq, cp_at(dq, Ch), cp_at(dq, 2 * Ch),
				 g.scratch, douth);
	return ulysses_a2a(&g, D(w->dqkv), D(w->dkv[0]), D(w->kv[0]), D(w->kv[1]), 3, 0);
}
