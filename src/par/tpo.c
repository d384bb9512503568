/* par/tpo: Transformer Engine's tensor-parallel communication overlap (--tp-comm-overlap);
 * see par/tpo.h. */
#include "par/tpo.h"

#include "clock.h"
#include "coll.h"
#include "linear.h"

int par_tpo_ag(struct par_model *m, const struct par_tp *c, int dgrad, const float *rows,
	       float *whole, size_t C, float *out, const float *W, const float *b, int N)
{
	struct emu_dev *d = m->k.d;
	int t = c->t, next = emu_group_dev(c->g, (c->r + 1) % t);
	int prev = emu_group_dev(c->g, (c->r + t - 1) % t), rc = 0;
	int ce = coll_use_copy_engines(d, 1);
	size_t n = (size_t)c->Ml * C;

	if (whole && rows != par_rows_at(whole, (size_t)c->row0, C))
		memcpy(par_rows_at(whole, (size_t)c->row0, C), rows, n * sizeof *rows);
	for (int i = 0; i < t && !rc; i++) {
		int j = (c->r - i + t) % t, up = (j + t - 1) % t; /* in hand, coming next */
		const float *x = par_rows_at(whole, (size_t)j * c->Ml, C);
		float *y = par_rows_at(out, (size_t)j * c->Ml, (size_t)N);
		struct coll_req *rq[2] = {NULL, NULL};

		if (i < t - 1 && !(rc = coll_isend(d, next, x, n, &rq[0])))
			rc = coll_irecv(d, prev, par_rows_at(whole, (size_t)up * c->Ml, C), n,
					&rq[1]);
		if (!rc && dgrad)
			linear_bwd_input(&m->k, y, x, W, c->Ml, N, (int)C);
		else if (!rc)
			linear_fwd(&m->k, y, x, W, b, 1, c->Ml, (int)C, N);
		for (int k = 0; k < 2; k++) { /* (what was posted, also after a failure) */
			int rc2 = coll_wait(d, rq[k]);

			rc = rc ? rc : rc2;
		}
	}
	coll_use_copy_engines(d, ce);
	return rc;
}

/* Chunk s's first column of C cut in TPO_SPLITS (or C, if fewer). */
static size_t split_at(size_t C, int s)
{
	size_t ns = C < TPO_SPLITS ? C : TPO_SPLITS;

	return C * (size_t)s / ns;
}

int par_tpo_rs(struct par_model *m, const struct par_tp *c, struct par_work *w, const float *in,
	       const float *W, const float *b, int K, size_t C, float *partial, float *local,
	       const float **out)
{
	struct emu_dev *d = m->k.d;
	int ns = C < TPO_SPLITS ? (int)C : TPO_SPLITS, BT = c->B * m->T, margin, rc = 0;
	size_t Ml = (size_t)c->Ml;
	struct coll_req *rq[TPO_SPLITS] = {NULL};
	float *rs = D(w->tpo_rs);

	*out = local;
	margin = emu_set_sm_margin(d, TPO_SMS);
	for (int s = 0; s < ns && !rc; s++) {
		size_t c0 = split_at(C, s), nc = split_at(C, s + 1) - c0;

		linear_fwd(&m->k, partial ? partial + (size_t)BT * c0 : NULL, in,
			   W ? W + c0 * (size_t)K : NULL, b ? b + c0 : NULL, 1, BT, K, (int)nc);
		rc = coll_ireduce_scatter(d, c->g, partial ? partial + (size_t)BT * c0 : NULL,
					  rs ? rs + Ml * c0 : NULL, Ml * nc, COLL_SUM, &rq[s]);
	}
	emu_set_sm_margin(d, margin);
	for (int s = 0; s < ns; s++) {
		int rc2 = coll_wait(d, rq[s]);

		rc = rc ? rc : rc2;
	}
	for (int s = 0; !rc && rs && local && s < ns; s++) { /* chunk s's columns into local */
		size_t c0 = split_at(C, s), nc = split_at(C, s + 1) - c0;

		for (size_t i = 0; i < Ml; i++)
			memcpy(local + i * C + c0, rs + Ml * c0 + i * nc, nc * sizeof *rs);
	}
	return rc;
}

void par_tpo_rows(struct par_work *w)
{
	w->g = D(w->gfull);
}

void par_tpo_bulk(struct par_model *m, int on)
{
	emu_set_sm_margin(m->k.d, on ? TPO_SMS : 0);
}
