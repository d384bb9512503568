/* par/cp: context parallelism's attention, by comm type; see par/cp.h. Shapes per rank,
 * for one (micro-)batch of B sequences: T = s / cp rows a sequence in two chunks of
 * ch = T / 2 rows, C = h / t the columns of this rank's nh = a / t heads of hs each;
 * qkv (B, T, 3C), atty (B, T, C), lse (B, nh, T) in la->att.
 *
 * Attention dropout (models/dropout.h) keys each probability by its query's and key's
 * global positions: a view's queries are rows of this rank's (m->pos), its keys rows of
 * the rank that sent them (the ring: m->pos_all of the sender, in the balanced chunk
 * order), or of the sequence in position order (all-gather, Ulysses); Ulysses's heads
 * are this rank's head group of the tp rank's. */
#include "par/cp.h"

#include "attention.h"
#include "clock.h"
#include "coll.h"
#include "par/internal.h"

int par_cp_position(int s, int cp, int r, int i, int contiguous)
{
	int ch = s / (2 * cp);

	if (contiguous)
		return r * (s / cp) + i;
	return (i < ch ? r : 2 * cp - 1 - r) * ch + i % ch;
}

/* p + off, or NULL in dry-run. */
static float *at(float *p, size_t off)
{
	return p ? p + off : NULL;
}

/* This rank's place in the ring and the shapes it computes. */
struct cp {
	const struct kctx *k;
	struct emu_group *g;
	int n, r, prev, next; /* the group's size, this rank's place, its neighbours' ids */
	int contiguous;       /* the layout: chunk r of n, else chunks r and 2n - 1 - r */
	int B, T, ch, s;      /* sequences, rows a sequence, rows a chunk, the whole sequence */
	int C, nh, hs;        /* local columns, heads, head size */
	float *scratch;
	const int *pos, *pos_all;  /* my rows' positions, every rank's (par_model) */
	const struct attn_drop *d; /* the layer's attention dropout (p 0: none) */
	struct attn_drop dd[2];    /* its keys placed for the views in use */
	int local;                 /* PAR_BUG_ATTN_DROPOUT_LOCAL: keyed by local positions */
};

static struct cp cp_of(struct par_model *m, const struct par_tp *c, struct par_work *w,
		       const struct attn_drop *d)
{
	struct cp g = {.k = &m->k, .g = m->cpg, .n = m->cp, .r = m->cpr};

	g.contiguous = m->pc.cp_contiguous;
	g.prev = emu_group_dev(g.g, (g.r + g.n - 1) % g.n);
	g.next = emu_group_dev(g.g, (g.r + 1) % g.n);
	g.B = c->B;
	g.T = m->T;
	g.ch = m->T / 2;
	g.s = m->T * m->cp;
	g.C = m->cfg.hidden / c->t;
	g.nh = c->NHl;
	g.hs = m->cfg.hidden / m->cfg.heads;
	g.scratch = D(w->att_scratch);
	g.pos = m->pos;
	g.pos_all = m->pos_all;
	g.d = d;
	g.local = m->pc.bug == PAR_BUG_ATTN_DROPOUT_LOCAL;
	return g;
}

/* View a's dropout, in slot of g: its queries at rows [q, ...) of mine, its keys at
 * positions kpos (NULL: their index, the sequence in position order). */
static void drop_at(struct cp *g, struct attn_view *a, int slot, int q, const int *kpos)
{
	if (g->d->p <= 0)
		return;
	g->dd[slot] = *g->d;
	g->dd[slot].qpos = g->local ? NULL : g->pos + q;
	g->dd[slot].kpos = g->local ? NULL : kpos;
	a->drop = &g->dd[slot];
}

/* Rows [q, q + nq) of each local sequence's queries (in qkv, ld 3C) against key rows
 * [kr, kr + nk) of kv (K at kv, V at kv + C, ld ldkv, rows a sequence kvT), out at the
 * queries' rows of out (ld C); q0: the queries' offset past the first key (0 the causal
 * diagonal, nk or more all visible). */
static struct attn_view view(const struct cp *g, const float *qkv, float *out, const float *kv,
			     int ldkv, int kvT, int q, int nq, int kr, int nk, int q0)
{
	struct attn_view a = {.B = g->B, .Tq = nq, .Tk = nk, .q0 = q0, .h1 = g->nh, .hs = g->hs};
	size_t C = (size_t)g->C;

	a.q = at((float *)qkv, (size_t)q * 3 * C);
	a.ldq = 3 * g->C;
	a.bsq = (size_t)g->T * 3 * C;
	a.k = at((float *)kv, (size_t)kr * ldkv);
	a.v = at((float *)kv, (size_t)kr * ldkv + C);
	a.ldk = a.ldv = ldkv;
	a.bsk = (size_t)kvT * ldkv;
	a.out = at(out, (size_t)q * C);
	a.ldo = g->C;
	a.bso = (size_t)g->T * C;
	return a;
}

/* Copies n rows of w floats from src (ld ls) to dst (ld ld), adding if add; the caller
 * charges the kernel (charge) once for all the rows it moves. */
static void rows_copy(const struct kctx *k, float *dst, int ld, const float *src, int ls, size_t n,
		      int w, int add)
{
	if (!kctx_math(k))
		return;
	for (size_t i = 0; i < n; i++) {
		float *d = dst + i * (size_t)ld;
		const float *x = src + i * (size_t)ls;

		for (int j = 0; j < w; j++)
			d[j] = add ? d[j] + x[j] : x[j];
	}
}

/* A memory-bound kernel moving n elements (reading them, and the destination too if it
 * adds). */
static void charge(const struct kctx *k, const char *name, size_t n, int add)
{
	emu_compute(k->d, name, add ? (double)n : 0, (add ? 3.0 : 2.0) * (double)n * k->ab);
}

/* This rank's K and V, (B T, 2C), from qkv. */
static void kv_pack(const struct cp *g, float *kv, const float *qkv)
{
	size_t rows = (size_t)g->B * g->T;

	charge(g->k, "cp.kv pack", rows * 2 * g->C, 0);
	rows_copy(g->k, kv, 2 * g->C, at((float *)qkv, (size_t)g->C), 3 * g->C, rows, 2 * g->C, 0);
}

/* ------------------------------------------------------------------------------------ */
/* p2p: the ring                                                                        */

/* Posts step i's KV exchange: the block in hand to the next rank, the next block from
 * the previous one. */
static int ring_post(const struct cp *g, struct par_work *w, int i, struct coll_req **rq)
{
	size_t n = (size_t)g->B * g->T * 2 * g->C;
	int rc;

	rq[0] = rq[1] = NULL;
	if (i == g->n - 1)
		return 0;
	if ((rc = coll_isend(g->k->d, g->next, D(w->kv[i % 2]), n, &rq[0])))
		return rc;
	return coll_irecv(g->k->d, g->prev, D(w->kv[(i + 1) % 2]), n, &rq[1]);
}

static int wait2(const struct kctx *k, struct coll_req **rq)
{
	int rc = 0, rc2;

	for (int j = 0; j < 2; j++)
		if (rq[j] && (rc2 = coll_wait(k->d, rq[j])) && !rc)
			rc = rc2;
	rq[0] = rq[1] = NULL;
	return rc;
}

/* Step i's block (i > 0): which query rows see which rows of the KV in hand, and how;
 * Tq 0 if none (the contiguous layout, a sender after me). */
static struct attn_view ring_block(struct cp *g, const float *qkv, float *out, const float *kv,
				   int i)
{
	struct attn_view none = {.Tq = 0}, a;
	const int *kpos = g->pos_all + (size_t)((g->r + g->n - i) % g->n) * (size_t)g->T;

	if (g->contiguous) /* the sender's chunk is before mine, or after it: seen whole, or not */
		a = i <= g->r ? view(g, qkv, out, kv, 2 * g->C, g->T, 0, g->T, 0, g->T, g->T)
			      : none;
	else if (i <= g->r) /* the sender's first chunk is before both of mine */
		a = view(g, qkv, out, kv, 2 * g->C, g->T, 0, g->T, 0, g->ch, g->ch);
	else /* the sender's chunks are both after my first and before my second */
		a = view(g, qkv, out, kv, 2 * g->C, g->T, g->ch, g->ch, 0, g->T, g->T);
	if (a.Tq)
		drop_at(g, &a, 0, !g->contiguous && i > g->r ? g->ch : 0, kpos);
	return a;
}

/* The first query row of step i's block. */
static size_t block_row(const struct cp *g, int i)
{
	return g->contiguous || i <= g->r ? 0 : (size_t)g->ch;
}

/* My own block (step 0): the causal diagonal of each of my chunks, and in the balanced
 * layout my second chunk against my first: views lo and hi (hi.Tq 0 if contiguous). */
static void ring_own(struct cp *g, const float *qkv, float *out, struct attn_view *lo,
		     struct attn_view *hi)
{
	const float *kv = at((float *)qkv, (size_t)g->C);

	if (g->contiguous) {
		*lo = view(g, qkv, out, kv, 3 * g->C, g->T, 0, g->T, 0, g->T, 0);
		*hi = (struct attn_view){.Tq = 0};
		drop_at(g, lo, 0, 0, g->pos);
		return;
	}
	*lo = view(g, qkv, out, kv, 3 * g->C, g->T, 0, g->ch, 0, g->ch, 0);
	*hi = view(g, qkv, out, kv, 3 * g->C, g->T, g->ch, g->ch, 0, g->T, g->ch);
	drop_at(g, lo, 0, 0, g->pos);
	drop_at(g, hi, 1, g->ch, g->pos);
}

static int ring_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		    struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct cp g = cp_of(m, c, w, d);
	float *qkv = D(la->qkv), *out = D(la->atty), *lse = D(la->att);
	struct coll_req *rq[2] = {NULL, NULL};
	int rc = 0;

	kv_pack(&g, D(w->kv[0]), qkv);
	for (int i = 0; i < g.n && !rc; i++) {
		if ((rc = ring_post(&g, w, i, rq)))
			break;
		if (i == 0) { /* my own block */
			struct attn_view lo, hi;

			ring_own(&g, qkv, out, &lo, &hi);
			attention_flash_fwd_view(&m->k, &lo, lse, g.T, g.scratch);
			if (hi.Tq)
				attention_flash_fwd_view(&m->k, &hi, at(lse, (size_t)g.ch), g.T,
							 g.scratch);
		} else {
			struct attn_view a = ring_block(&g, qkv, D(w->bout), D(w->kv[i % 2]), i);
			size_t q = block_row(&g, i);

			if (a.Tq) {
				attention_flash_fwd_view(&m->k, &a, at(D(w->blse), q), g.T,
							 g.scratch);
				a.out = at(out, q * g.C);
				attention_lse_merge(&m->k, &a, at(lse, q), g.T,
						    at(D(w->bout), q * g.C), at(D(w->blse), q));
			}
		}
		rc = wait2(&m->k, rq);
	}
	if (rc)
		wait2(&m->k, rq);
	return rc;
}

/* Waits for *r if posted, and forgets it: 0 or the wait's error. */
static int wait_one(const struct kctx *k, struct coll_req **r)
{
	int rc = *r ? coll_wait(k->d, *r) : 0;

	*r = NULL;
	return rc;
}

/* Backward: K, V go round again as in forward; step i >= 1 computes the block's dK, dV
 * into a fresh buffer (dkv[i % 2], once its send of step i - 2 is done), then adds the
 * partial of that block which arrived meanwhile from the previous rank (dkv[2], posted a
 * step earlier: the wait comes after the compute, which hides the hop, as
 * TransformerEngine orders it) and sends the sum on. After step cp - 1 the partial of my
 * own block arrives, and joins my own dK, dV. */
static int ring_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		    struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct cp g = cp_of(m, c, w, d);
	float *qkv = D(la->qkv), *out = D(la->atty), *lse = D(la->att), *dq = D(w->dqkv);
	float *R = D(w->dkv[2]);
	const float *dy = D(w->datty);
	struct coll_req *rq[2] = {NULL, NULL}, *ds[2] = {NULL, NULL}, *drecv = NULL;
	size_t nkv = (size_t)g.B * g.T * 2 * g.C, C = (size_t)g.C, rows = (size_t)g.B * g.T;
	int rc = 0;

	par_zero(&w->dqkv);
	kv_pack(&g, D(w->kv[0]), qkv);
	for (int i = 0; i < g.n && !rc; i++) {
		float *P = D(w->dkv[i % 2]);

		if ((rc = ring_post(&g, w, i, rq)))
			break;
		if (i == 0) {
			struct attn_view lo, hi;

			ring_own(&g, qkv, out, &lo, &hi);
			attention_flash_bwd_view(&m->k, &lo, lse, g.T, dq, at(dq, C), at(dq, 2 * C),
						 g.scratch, dy);
			if (hi.Tq)
				attention_flash_bwd_view(&m->k, &hi, at(lse, (size_t)g.ch), g.T,
							 at(dq, (size_t)g.ch * 3 * C), at(dq, C),
							 at(dq, 2 * C), g.scratch,
							 at((float *)dy, g.ch * C));
		} else {
			struct attn_view a = ring_block(&g, qkv, out, D(w->kv[i % 2]), i);
			size_t q = block_row(&g, i);

			if ((rc = wait_one(&m->k, &ds[i % 2]))) /* P's send two steps ago */
				break;
			par_zero(&w->dkv[i % 2]);
			if (a.Tq) /* else nothing of mine sees it: its partial passes on */
				attention_flash_bwd_view(&m->k, &a, at(lse, q), g.T,
							 at(dq, q * 3 * C), P, at(P, C), g.scratch,
							 at((float *)dy, q * C));
			if (i >= 2) { /* the block's partial from the ranks before me */
				if ((rc = wait_one(&m->k, &drecv)))
					break;
				charge(&m->k, "cp.dkv add", nkv, 1);
				rows_copy(&m->k, P, 2 * g.C, R, 2 * g.C, rows, 2 * g.C, 1);
			}
			if ((rc = coll_isend(m->k.d, g.next, P, nkv, &ds[i % 2])) ||
			    (rc = coll_irecv(m->k.d, g.prev, R, nkv, &drecv)))
				break;
		}
		rc = wait2(&m->k, rq);
	}
	if (!rc && g.n > 1) { /* my block's partial, round the ring: add it to my own */
		rc = wait_one(&m->k, &drecv);
		if (!rc) {
			charge(&m->k, "cp.dkv add", nkv, 1);
			rows_copy(&m->k, at(dq, C), 3 * g.C, R, 2 * g.C, rows, 2 * g.C, 1);
		}
	}
	/* whatever is still posted (all of it only on an error path) */
	wait2(&m->k, rq);
	for (int j = 0; j < 2; j++) {
		int rc2 = wait_one(&m->k, &ds[j]);

		rc = rc ? rc : rc2;
	}
	wait_one(&m->k, &drecv);
	return rc;
}

/* ------------------------------------------------------------------------------------ */
/* all_gather                                                                           */

/* Every rank's K and V (B T, 2C), gathered into w->kv[1] in rank order, then into w->dkv[0]
 * (B, s, 2C) in position order. */
static int gather_kv(const struct cp *g, struct par_work *w, const float *qkv)
{
	size_t n = (size_t)g->B * g->T * 2 * g->C;
	int rc;

	kv_pack(g, D(w->kv[0]), qkv);
	if ((rc = coll_all_gather(g->k->d, g->g, D(w->kv[0]), D(w->kv[1]), n)))
		return rc;
	charge(g->k, "cp.kv order", (size_t)g->n * n, 0);
	for (int j = 0; j < g->n; j++)
		for (int b = 0; b < g->B; b++)
			for (int h = 0; h < 2; h++) {
				size_t src = ((size_t)j * g->B + b) * g->T + (size_t)h * g->ch;
				size_t dst = (size_t)b * g->s +
					     (size_t)par_cp_position(g->s, g->n, j, h * g->ch, 0);

				rows_copy(g->k, at(D(w->dkv[0]), dst * 2 * g->C), 2 * g->C,
					  at(D(w->kv[1]), src * 2 * g->C), 2 * g->C, (size_t)g->ch,
					  2 * g->C, 0);
			}
	return 0;
}

/* Chunk h of my queries against every key before it (in w->dkv[0], position order). */
static struct attn_view gather_view(struct cp *g, const float *qkv, float *out, const float *kvpos,
				    int h)
{
	int p = par_cp_position(g->s, g->n, g->r, h * g->ch, 0);
	struct attn_view a =
		view(g, qkv, out, kvpos, 2 * g->C, g->s, h * g->ch, g->ch, 0, p + g->ch, p);

	drop_at(g, &a, 0, h * g->ch, NULL);
	return a;
}

static int gather_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		      struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct cp g = cp_of(m, c, w, d);
	int rc = gather_kv(&g, w, D(la->qkv));

	for (int h = 0; h < 2 && !rc; h++) {
		struct attn_view a = gather_view(&g, D(la->qkv), D(la->atty), D(w->dkv[0]), h);

		attention_flash_fwd_view(&m->k, &a, at(D(la->att), (size_t)h * g.ch), g.T,
					 g.scratch);
	}
	return rc;
}

static int gather_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
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

		attention_flash_bwd_view(&m->k, &a, at(D(la->att), q), g.T, at(dq, q * 3 * C), dkv,
					 at(dkv, C), g.scratch, at(D(w->datty), q * C));
	}
	/* dK, dV by position back into rank order, each rank's summed into it */
	charge(&m->k, "cp.dkv order", (size_t)g.n * n, 0);
	for (int j = 0; j < g.n; j++)
		for (int b = 0; b < g.B; b++)
			for (int h = 0; h < 2; h++) {
				size_t dst = ((size_t)j * g.B + b) * g.T + (size_t)h * g.ch;
				size_t src = (size_t)b * g.s +
					     (size_t)par_cp_position(g.s, g.n, j, h * g.ch, 0);

				rows_copy(&m->k, at(D(w->kv[1]), dst * 2 * C), 2 * g.C,
					  at(dkv, src * 2 * C), 2 * g.C, (size_t)g.ch, 2 * g.C, 0);
			}
	if ((rc = coll_reduce_scatter(m->k.d, g.g, D(w->kv[1]), D(w->kv[0]), n, COLL_SUM)))
		return rc;
	charge(&m->k, "cp.dkv add", n, 1);
	rows_copy(&m->k, at(dq, C), 3 * g.C, D(w->kv[0]), 2 * g.C, (size_t)g.B * g.T, 2 * g.C, 1);
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

	charge(g->k, "cp.a2a pack", (size_t)g->n * blk, 0);
	for (int j = 0; j < g->n; j++) /* pack block j */
		for (int b = 0; b < g->B; b++)
			for (int i = 0; i < g->T; i += g->ch) {
				size_t row = (size_t)b * g->T + (size_t)i;
				float *dst = at(send, j * blk + row * lh);

				for (int p = 0; p < parts; p++) {
					size_t col = (size_t)p * g->C + (size_t)j * wg;
					size_t pos = (size_t)b * g->s +
						     (size_t)par_cp_position(g->s, g->n, j, i, 0);

					if (to_heads)
						rows_copy(g->k, at(dst, (size_t)p * wg), lh,
							  at(seq, row * ls + col), ls,
							  (size_t)g->ch, wg, 0);
					else
						rows_copy(g->k, at(dst, (size_t)p * wg), lh,
							  at(heads, pos * lh + (size_t)p * wg), lh,
							  (size_t)g->ch, wg, 0);
				}
			}
	if ((rc = coll_all_to_all(g->k->d, g->g, send, recv, blk)))
		return rc;
	charge(g->k, "cp.a2a unpack", (size_t)g->n * blk, 0);
	for (int j = 0; j < g->n; j++) /* unpack block j */
		for (int b = 0; b < g->B; b++)
			for (int i = 0; i < g->T; i += g->ch) {
				size_t row = (size_t)b * g->T + (size_t)i;
				const float *src = at(recv, j * blk + row * lh);
				size_t pos = (size_t)b * g->s +
					     (size_t)par_cp_position(g->s, g->n, j, i, 0);

				if (to_heads)
					rows_copy(g->k, at(heads, pos * lh), lh, src, lh,
						  (size_t)g->ch, lh, 0);
				else
					for (int p = 0; p < parts; p++)
						rows_copy(g->k,
							  at(seq, row * ls + (size_t)p * g->C +
									  (size_t)j * wg),
							  ls, at((float *)src, (size_t)p * wg), lh,
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

static int ulysses_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
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

static int ulysses_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		       struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct cp g = cp_of(m, c, w, d);
	int nh = g.nh / g.n, rc;
	size_t half = w->dkv[1].n / 2, Ch = (size_t)nh * g.hs; /* (B, s, C / n) twice: out, d out */
	float *dq = D(w->dkv[0]);
	struct attn_view a;
	float *outh = D(w->dkv[1]), *douth = at(D(w->dkv[1]), half);

	if ((rc = ulysses_a2a(&g, D(la->atty), outh, D(w->kv[0]), D(w->kv[1]), 1, 1)) ||
	    (rc = ulysses_a2a(&g, D(w->datty), douth, D(w->kv[0]), D(w->kv[1]), 1, 1)))
		return rc;
	par_zero(&w->dkv[0]);
	a = ulysses_view(&g, outh, D(la->qkv), nh);
	attention_flash_bwd_view(&m->k, &a, D(la->att), 0, dq, at(dq, Ch), at(dq, 2 * Ch),
				 g.scratch, douth);
	return ulysses_a2a(&g, D(w->dqkv), D(w->dkv[0]), D(w->kv[0]), D(w->kv[1]), 3, 0);
}

/* ------------------------------------------------------------------------------------ */

typedef int (*attn_fn)(struct par_model *m, const struct par_tp *c, struct par_work *w,
		       struct gpt_layer_acts *la, const struct attn_drop *d);

/* f, its collectives tagged as context parallelism's (the report's by-strategy bytes). */
static int tagged(attn_fn f, struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct gpt_layer_acts *la, const struct attn_drop *d)
{
	int old = coll_set_tag(m->k.d, PAR_TRAFFIC_CP), rc = f(m, c, w, la, d);

	coll_set_tag(m->k.d, old);
	return rc;
}

#define TAGGED(f)                                                                                  \
	static int f##_tagged(struct par_model *m, const struct par_tp *c, struct par_work *w,     \
			      struct gpt_layer_acts *la, const struct attn_drop *d)                \
	{                                                                                          \
		return tagged(f, m, c, w, la, d);                                                  \
	}
TAGGED(ring_fwd)
TAGGED(ring_bwd)
TAGGED(gather_fwd)
TAGGED(gather_bwd)
TAGGED(ulysses_fwd)
TAGGED(ulysses_bwd)
#undef TAGGED

static const struct par_attn ring = {"ring attention (cp p2p)", ring_fwd_tagged, ring_bwd_tagged,
				     NULL};
static const struct par_attn gather = {"all-gather attention (cp all_gather)", gather_fwd_tagged,
				       gather_bwd_tagged, NULL};
static const struct par_attn ulysses = {"Ulysses attention (cp a2a)", ulysses_fwd_tagged,
					ulysses_bwd_tagged, NULL};

const struct par_attn *par_cp_attn(const struct par_model *m)
{
	switch (m->pc.cp_comm) {
	case PAR_CP_ALL_GATHER:
		return &gather;
	case PAR_CP_A2A:
		return &ulysses;
	default:
		return &ring;
	}
}

int par_cp_keys(const struct par_model *m)
{
	return m->pc.cp_comm == PAR_CP_P2P ? m->T : m->T * m->cp;
}

int par_cp_alloc_work(struct par_model *m, struct par_work *w)
{
	const struct kctx *k = &m->k;
	size_t bt = (size_t)m->B * m->T, C = (size_t)m->cfg.hidden / (size_t)m->tp;
	size_t n = (size_t)m->cp;
	int rc = 0;

#define A(t, cnt, name)                                                                            \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_alloc(k, (t), MEM_WORK, (cnt), (name));                        \
	} while (0)
	switch (m->pc.cp_comm) {
	case PAR_CP_P2P:
		A(&w->kv[0], bt * 2 * C, "cp kv in hand");
		A(&w->kv[1], bt * 2 * C, "cp kv arriving");
		A(&w->dkv[0], bt * 2 * C, "cp dkv partial");
		A(&w->dkv[1], bt * 2 * C, "cp dkv partial, the other");
		A(&w->dkv[2], bt * 2 * C, "cp dkv partial arriving");
		A(&w->bout, bt * C, "cp block out");
		A(&w->blse, bt * (size_t)m->NHl, "cp block lse");
		break;
	case PAR_CP_ALL_GATHER:
		A(&w->kv[0], bt * 2 * C, "cp kv");
		A(&w->kv[1], n * bt * 2 * C, "cp kv gathered");
		A(&w->dkv[0], n * bt * 2 * C, "cp kv by position");
		A(&w->dkv[1], n * bt * 2 * C, "cp dkv by position");
		break;
	case PAR_CP_A2A:
		A(&w->kv[0], bt * 3 * C, "cp a2a send");
		A(&w->kv[1], bt * 3 * C, "cp a2a recv");
		A(&w->dkv[0], bt * 3 * C, "cp d qkv by heads");
		A(&w->dkv[1], bt * 2 * C, "cp out, d out by heads");
		break;
	}
#undef A
	return rc;
}
