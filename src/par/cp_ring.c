/* par/cp_ring: context parallelism's ring attention, --cp-comm-type p2p (Liu, Zaharia and
 * Abbeel 2023, Ring Attention, arXiv 2310.01889; par/cp.h): K and V go round the cp group
 * by posted sends and receives, each step's block of attention computed while the next
 * block travels, the blocks' outputs merged by their log-sum-exp; backward sends the
 * partial dK, dV round after them. Shapes as in par/cp.c. */
#include "coll.h"
#include "par/cp_internal.h"

/* A send to peer (recv: a receive from it) as Transformer Engine's ring posts it
 * (flash_attn_p2p_communicate): one by one, or batched for cp 2 before Blackwell, on
 * PyTorch's communicator of the pair either way (pipe/stage.c's pipe_stage_comm has the
 * why): 2 ranks. */
static int ring_p2p(struct emu_dev *d, int peer, int recv, float *buf, size_t n,
		    struct coll_req **rq)
{
	int pair[2] = {emu_dev_id(d), peer}, rc;
	struct coll_p2p_comm was = coll_set_p2p_comm(d, coll_comm_of(d, pair, 2));

	rc = recv ? coll_irecv(d, peer, buf, n, rq) : coll_isend(d, peer, buf, n, rq);
	coll_set_p2p_comm(d, was);
	return rc;
}

/* Posts step i's KV exchange: the block in hand to the next rank, the next block from
 * the previous one. */
static int ring_post(const struct cp *g, struct par_work *w, int i, struct coll_req **rq)
{
	size_t n = (size_t)g->B * g->T * 2 * g->C;
	int rc;

	rq[0] = rq[1] = NULL;
	if (i == g->n - 1)
		return 0;
	if ((rc = ring_p2p(g->k->d, g->next, 0, D(w->kv[i % 2]), n, &rq[0])))
		return rc;
	return ring_p2p(g->k->d, g->prev, 1, D(w->kv[(i + 1) % 2]), n, &rq[1]);
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
		a = i <= g->r ? cp_view(g, qkv, out, kv, 2 * g->C, g->T, 0, g->T, 0, g->T, g->T)
			      : none;
	else if (i <= g->r) /* the sender's first chunk is before both of mine */
		a = cp_view(g, qkv, out, kv, 2 * g->C, g->T, 0, g->T, 0, g->ch, g->ch);
	else /* the sender's chunks are both after my first and before my second */
		a = cp_view(g, qkv, out, kv, 2 * g->C, g->T, g->ch, g->ch, 0, g->T, g->T);
	if (a.Tq)
		cp_drop_at(g, &a, 0, !g->contiguous && i > g->r ? g->ch : 0, kpos);
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
	const float *kv = cp_at((float *)qkv, (size_t)g->C);

	if (g->contiguous) {
		*lo = cp_view(g, qkv, out, kv, 3 * g->C, g->T, 0, g->T, 0, g->T, 0);
		*hi = (struct attn_view){.Tq = 0};
		cp_drop_at(g, lo, 0, 0, g->pos);
		return;
	}
	*lo = cp_view(g, qkv, out, kv, 3 * g->C, g->T, 0, g->ch, 0, g->ch, 0);
	*hi = cp_view(g, qkv, out, kv, 3 * g->C, g->T, g->ch, g->ch, 0, g->T, g->ch);
	cp_drop_at(g, lo, 0, 0, g->pos);
	cp_drop_at(g, hi, 1, g->ch, g->pos);
}

int cp_ring_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct cp g = cp_of(m, c, w, d);
	float *qkv = D(la->qkv), *out = D(la->atty), *lse = D(la->att);
	struct coll_req *rq[2] = {NULL, NULL};
	int rc = 0;

	cp_kv_pack(&g, D(w->kv[0]), qkv);
	for (int i = 0; i < g.n && !rc; i++) {
		if ((rc = ring_post(&g, w, i, rq)))
			break;
		if (i == 0) { /* my own block */
			struct attn_view lo, hi;

			ring_own(&g, qkv, out, &lo, &hi);
			attention_flash_fwd_view(&m->k, &lo, lse, g.T, g.scratch);
			if (hi.Tq)
				attention_flash_fwd_view(&m->k, &hi, cp_at(lse, (size_t)g.ch), g.T,
							 g.scratch);
		} else {
			struct attn_view a = ring_block(&g, qkv, D(w->bout), D(w->kv[i % 2]), i);
			size_t q = block_row(&g, i);

			if (a.Tq) {
				attention_flash_fwd_view(&m->k, &a, cp_at(D(w->blse), q), g.T,
							 g.scratch);
				a.out = cp_at(out, q * g.C);
				attention_lse_merge(&m->k, &a, cp_at(lse, q), g.T,
						    cp_at(D(w->bout), q * g.C),
						    cp_at(D(w->blse), q));
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
int cp_ring_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
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
	cp_kv_pack(&g, D(w->kv[0]), qkv);
	for (int i = 0; i < g.n && !rc; i++) {
		float *P = D(w->dkv[i % 2]);

		if ((rc = ring_post(&g, w, i, rq)))
			break;
		if (i == 0) {
			struct attn_view lo, hi;

			ring_own(&g, qkv, out, &lo, &hi);
			attention_flash_bwd_view(&m->k, &lo, lse, g.T, dq, cp_at(dq, C),
						 cp_at(dq, 2 * C), g.scratch, dy);
			if (hi.Tq)
				attention_flash_bwd_view(&m->k, &hi, cp_at(lse, (size_t)g.ch), g.T,
							 cp_at(dq, (size_t)g.ch * 3 * C),
							 cp_at(dq, C), cp_at(dq, 2 * C), g.scratch,
							 cp_at((float *)dy, g.ch * C));
		} else {
			struct attn_view a = ring_block(&g, qkv, out, D(w->kv[i % 2]), i);
			size_t q = block_row(&g, i);

			if ((rc = wait_one(&m->k, &ds[i % 2]))) /* P's send two steps ago */
				break;
			par_zero(&w->dkv[i % 2]);
			if (a.Tq) /* else nothing of mine sees it: its partial passes on */
				attention_flash_bwd_view(&m->k, &a, cp_at(lse, q), g.T,
							 cp_at(dq, q * 3 * C), P, cp_at(P, C),
							 g.scratch, cp_at((float *)dy, q * C));
			if (i >= 2) { /* the block's partial from the ranks before me */
				if ((rc = wait_one(&m->k, &drecv)))
					break;
				sum_charge(&m->k, "cp.dkv add", 2, (double)nkv);
				cp_rows_copy(&m->k, P, 2 * g.C, R, 2 * g.C, rows, 2 * g.C, 1);
			}
			if ((rc = ring_p2p(m->k.d, g.next, 0, P, nkv, &ds[i % 2])) ||
			    (rc = ring_p2p(m->k.d, g.prev, 1, R, nkv, &drecv)))
				break;
		}
		rc = wait2(&m->k, rq);
	}
	if (!rc && g.n > 1) { /* my block's partial, round the ring: add it to my own */
		rc = wait_one(&m->k, &drecv);
		if (!rc) {
			sum_charge(&m->k, "cp.dkv add", 2, (double)nkv);
			cp_rows_copy(&m->k, cp_at(dq, C), 3 * g.C, R, 2 * g.C, rows, 2 * g.C, 1);
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
