/* par/ep: expert parallelism's MoE tables, alltoall and allgather; see par/ep.h. Shapes
 * per rank, for one micro-batch: M = B T tokens (c->moe), E experts of which El = E / n
 * are this rank's ([e0, e0 + El)), cap slots an expert, C the hidden size, F an
 * expert's width; R = E cap rows bound everything an expert-side buffer holds (n ranks
 * send an expert at most cap rows each). The layer keeps, in la->moe: the routing, and
 * x, pre, h (R rows) the rows this rank's experts ran, expert by expert; y (R rows) the
 * outputs: back on the token's rank in permuted order (alltoall), or on the expert's
 * (allgather). */
#include "par/ep.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "moe.h"
#include "par/internal.h"

/* p + n, or NULL in dry-run. */
static float *at(float *p, size_t n)
{
	return p ? p + n : NULL;
}

struct ep {
	struct par_model *m;
	const struct kctx *k;
	struct emu_group *g;
	int n, r;      /* the group's size, this rank's place */
	int E, El, e0; /* experts, this rank's, the first of them */
	int C, F;      /* hidden, an expert's width */
	const struct moe_shape *s;
	int l; /* the layer */
};

static struct ep ep_of(struct par_model *m, const struct par_tp *c, int l)
{
	struct ep g = {.m = m, .k = &m->k, .g = m->epg, .n = m->ep, .r = m->epr, .l = l};

	g.E = m->cfg.num_experts;
	g.El = g.E / g.n;
	g.e0 = g.r * g.El;
	g.C = m->cfg.hidden;
	g.F = c->moe.F;
	g.s = &c->moe;
	return g;
}

/* Local expert e's weights and gradients. */
static const float *w_at(const struct ep *g, int i, int e)
{
	const float *w = PW(g->m, g->l, i);
	size_t per = i == LP_FCW || i == LP_FC2W ? (size_t)g->F * g->C
		     : i == LP_FCB               ? (size_t)g->F
						 : (size_t)g->C;

	return w ? w + (size_t)e * per : NULL;
}

static float *g_at(const struct ep *g, int i, int e)
{
	float *d = PG(g->m, g->l, i);
	size_t per = i == LP_FCW || i == LP_FC2W ? (size_t)g->F * g->C
		     : i == LP_FCB               ? (size_t)g->F
						 : (size_t)g->C;

	return d ? d + (size_t)e * per : NULL;
}

/* The rows the layer's MoE block routes: the group's ln2 (B T, h), or under ep_rows this
 * rank's own (Ml, h), which the layer's LayerNorm wrote and the rows region leaves. */
static const float *ln2_rows(const struct par_model *m, const struct par_tp *c, struct par_work *w,
			     struct gpt_layer_acts *la)
{
	return m->ep_rows ? par_ln_rows(m, c, &la->ln2) : par_ln_whole(m, w, &la->ln2);
}

/* Runs f with the calls tagged as expert parallelism's. */
#define TAGGED(call)                                                                               \
	do {                                                                                       \
		int old_ = coll_set_tag(m->k.d, PAR_TRAFFIC_EP);                                   \
		rc = (call);                                                                       \
		coll_set_tag(m->k.d, old_);                                                        \
	} while (0)

/* The router's backward from the gates' gradients in w->moe_scratch.dprobs, into d ln2
 * and the router's gradient; with the experts cut over tp, par_moe_router_sum's way. */
static int router_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		      struct gpt_layer_acts *la, int l, float scale)
{
	int rc;

	/* (the group's ln2, gathered again under Megatron's sequence parallelism) */
	if (!m->ep_rows && (rc = par_ln_gather(m, m->plan[l].mlp_region, c, w, &la->ln2, 0)))
		return rc;
	par_zero(&w->drouter);
	moe_router_bwd(&m->k, &c->moe, &la->moe, &w->moe_scratch, D(w->dln),
		       par_moe_aux_scale(m, c, scale), ln2_rows(m, c, w, la), PW(m, l, LP_ROUTER),
		       c->t == 1 ? PG(m, l, LP_ROUTER) : D(w->drouter));
	return par_moe_router_sum(m, c, w, l);
}

/* ------------------------------------------------------------------------------------ */
/* alltoall                                                                             */

/* The rows of the exchange, from the counts: cnt[E] what this rank sends to each expert,
 * rcv[n El] what it receives from each rank for each of its experts. In elements of C,
 * into send[n] and recv[n] (for all-to-all-v). */
static void splits(const struct ep *g, const int *cnt, const int *rcv, size_t *send, size_t *recv)
{
	for (int j = 0; j < g->n; j++) {
		send[j] = recv[j] = 0;
		for (int e = 0; e < g->El; e++) {
			send[j] += (size_t)cnt[j * g->El + e] * (size_t)g->C;
			recv[j] += (size_t)rcv[j * g->El + e] * (size_t)g->C;
		}
	}
}

/* The counts exchange: each rank tells each other how many rows it sends each of its
 * experts (an all-to-all of El counts a rank); in dry-run every count is the uniform one. */
static int exchange_counts(const struct ep *g, struct par_work *w, const int *cnt, int *rcv)
{
	struct par_model *m = g->m;
	float *buf = D(w->ep_meta);
	int rc;

	if (buf)
		for (int e = 0; e < g->E; e++)
			buf[e] = (float)cnt[e];
	TAGGED(coll_all_to_all(g->k->d, g->g, buf, at(buf, (size_t)g->E), (size_t)g->El));
	for (int i = 0; i < g->n * g->El; i++)
		rcv[i] = buf ? (int)buf[g->E + i] : moe_uniform_rows(g->s, g->e0 + i % g->El);
	return rc;
}

/* Rows between source-major (for each rank, each of my experts: rcv rows) and
 * expert-major (for each of my experts, each rank) order, of C floats; to_expert says
 * which way. */
static void regroup(const struct ep *g, float *dst, const float *src, const int *rcv, int C,
		    int to_expert)
{
	size_t total = 0;

	for (int i = 0; i < g->n * g->El; i++)
		total += (size_t)rcv[i];
	sum_charge(g->k, "moe.ep.regroup", 1, (double)(total * (size_t)C));
	if (!dst || !src)
		return;
	for (int e = 0, xo = 0; e < g->El; e++)
		for (int i = 0; i < g->n; i++) {
			size_t so =
				0; /* rank i's block starts after ranks < i, and its experts < e */

			for (int i2 = 0; i2 < g->n; i2++)
				for (int e2 = 0; e2 < g->El; e2++)
					if (i2 < i || (i2 == i && e2 < e))
						so += (size_t)rcv[i2 * g->El + e2];
			for (int r = 0; r < rcv[i * g->El + e]; r++, xo++) {
				const float *a = src + (to_expert ? so + r : (size_t)xo) * C;
				float *b = dst + (to_expert ? (size_t)xo : so + r) * C;

				for (int c = 0; c < C; c++)
					b[c] = a[c];
			}
		}
}

/* The rows each of my experts got, from every rank. */
static int expert_rows(const struct ep *g, const int *rcv, int e)
{
	int n = 0;

	for (int i = 0; i < g->n; i++)
		n += rcv[i * g->El + e];
	return n;
}

/* The rows this rank tells each expert it sends: its permutation's counts cnt, but for
 * the bug's (par_bug), which moves a row of expert 1 to expert 0. Into a new array. */
static int *sent_counts(const struct ep *g, const int *cnt)
{
	int *sent = emu_xcalloc((size_t)g->E, sizeof *sent);

	memcpy(sent, cnt, (size_t)g->E * sizeof *sent);
	if (g->m->pc.bug == PAR_BUG_EP_SPLIT && g->E > 1 && sent[1] > 0 && sent[0] < g->s->cap) {
		sent[0]++;
		sent[1]--;
	}
	return sent;
}

static int a2a_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, int l, float *aux)
{
	struct ep g = ep_of(m, c, l);
	struct moe_acts *a = &la->moe;
	int *cnt = a->rows, *rcv = a->rows + g.E, *sent, rc;
	size_t *send = emu_xcalloc(2 * (size_t)g.n, sizeof *send), *recv = send + g.n;
	size_t xo = 0;

	if ((rc = par_moe_route(m, c, w, a, ln2_rows(m, c, w, la), PW(m, l, LP_ROUTER))))
		goto out;
	*aux += moe_aux(g.s, a);
	moe_permute(&m->k, g.s, a, D(w->ep[0]), ln2_rows(m, c, w, la), cnt);
	sent = sent_counts(&g, cnt);
	rc = exchange_counts(&g, w, sent, rcv);
	splits(&g, sent, rcv, send, recv);
	free(sent);
	if (rc)
		goto out;
	TAGGED(coll_all_to_all_v(m->k.d, g.g, D(w->ep[0]), send, D(w->ep[1]), recv));
	if (rc)
		goto out;
	regroup(&g, D(a->x), D(w->ep[1]), rcv, g.C, 1);
	for (int e = 0; e < g.El; e++) { /* my experts on the rows they got */
		int n = expert_rows(&g, rcv, e);

		moe_expert_fwd(&m->k, at(D(w->ep[0]), xo * g.C), at(D(a->pre), xo * g.F),
			       at(D(a->h), xo * g.F), at(D(a->x), xo * g.C), w_at(&g, LP_FCW, e),
			       w_at(&g, LP_FCB, e), w_at(&g, LP_FC2W, e), w_at(&g, LP_FC2B, e), n,
			       g.C, g.F);
		xo += (size_t)n;
	}
	regroup(&g, D(w->ep[1]), D(w->ep[0]), rcv, g.C, 0);
	TAGGED(coll_all_to_all_v(m->k.d, g.g, D(w->ep[1]), recv, D(a->y), send));
	if (!rc)
		moe_unpermute(&m->k, g.s, a, D(w->tmp), D(a->y), cnt);
out:
	free(send);
	return rc;
}

static int a2a_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		   struct gpt_layer_acts *la, int l, float scale, int weight, struct par_stash *st)
{
	struct ep g = ep_of(m, c, l);
	struct moe_acts *a = &la->moe;
	int *cnt = a->rows, *rcv = a->rows + g.E, *sent, rc;
	size_t *send = emu_xcalloc(2 * (size_t)g.n, sizeof *send), *recv = send + g.n;
	size_t xo = 0;

	(void)weight;
	(void)st;
	sent = sent_counts(&g, cnt);
	splits(&g, sent, rcv, send, recv);
	free(sent);
	par_zero(&w->moe_scratch.dprobs);
	moe_unpermute_bwd(&m->k, g.s, a, D(w->ep[0]), D(w->moe_scratch.dprobs), w->g, D(a->y), cnt);
	TAGGED(coll_all_to_all_v(m->k.d, g.g, D(w->ep[0]), send, D(w->ep[1]), recv));
	if (rc)
		goto out;
	regroup(&g, D(w->ep[2]), D(w->ep[1]), rcv, g.C, 1);
	for (int e = 0; e < g.El; e++) {
		int n = expert_rows(&g, rcv, e);

		moe_expert_bwd(&m->k, at(D(w->ep[0]), xo * g.C), D(w->ep_dh), D(w->ep_dpre),
			       at(D(w->ep[2]), xo * g.C), at(D(a->x), xo * g.C),
			       at(D(a->pre), xo * g.F), at(D(a->h), xo * g.F), w_at(&g, LP_FCW, e),
			       w_at(&g, LP_FC2W, e), g_at(&g, LP_FCW, e), g_at(&g, LP_FCB, e),
			       g_at(&g, LP_FC2W, e), g_at(&g, LP_FC2B, e), n, g.C, g.F);
		xo += (size_t)n;
	}
	regroup(&g, D(w->ep[1]), D(w->ep[0]), rcv, g.C, 0);
	TAGGED(coll_all_to_all_v(m->k.d, g.g, D(w->ep[1]), recv, D(w->ep[0]), send));
	if (rc)
		goto out;
	moe_permute_bwd(&m->k, g.s, a, D(w->dln), D(w->ep[0]), cnt);
	rc = router_bwd(m, c, w, la, l, scale);
out:
	free(send);
	return rc;
}

/* ------------------------------------------------------------------------------------ */
/* allgather                                                                            */

/* The routing of every rank's tokens, gathered: for rank i's token t and choice j, at
 * (i M + t) k + j, the expert (or -1 if dropped) and the gate, as 2 floats. */
static int gather_routing(const struct ep *g, struct par_work *w, const struct moe_acts *a)
{
	struct par_model *m = g->m;
	size_t mk = (size_t)g->s->M * g->s->k;
	float *meta = D(w->ep_meta);
	int rc;

	if (meta)
		for (size_t i = 0; i < mk; i++) {
			int e = a->choice[i];

			meta[2 * i] = a->slot[i] < 0 ? -1.0f : (float)e;
			meta[2 * i + 1] = a->probs.data[(i / g->s->k) * g->E + e];
		}
	TAGGED(coll_all_gather(g->k->d, g->g, meta, at(meta, 2 * mk), 2 * mk));
	return rc;
}

/* The gathered choices of my expert e, one by one: calls fn with the gathered token's row
 * and the choice's gate, in gathered order (rank, token, choice); returns the count. In
 * dry-run, the uniform rows of each rank. */
static int for_expert(const struct ep *g, const struct par_work *w, int e,
		      void (*fn)(void *, int row, float gate), void *ctx)
{
	const float *meta = D(w->ep_meta);
	size_t mk = (size_t)g->s->M * g->s->k;
	int n = 0;

	if (!meta)
		return g->n * moe_uniform_rows(g->s, g->e0 + e);
	meta += 2 * mk;
	for (size_t i = 0; i < (size_t)g->n * mk; i++)
		if (meta[2 * i] == (float)(g->e0 + e)) {
			if (fn)
				fn(ctx, (int)(i / (size_t)g->s->k), meta[2 * i + 1]);
			n++;
		}
	return n;
}

/* Collects expert rows (gather: rows of src into dst) or spreads them back (scatter:
 * gate times the rows of src added into dst's tokens); dot: each row's d out . y into
 * dp (M n, E) at the expert's column. */
struct rows {
	float *dst;
	const float *src, *y;
	float *dp;
	int C, E, e, i, mode;
};
enum { ROWS_GATHER, ROWS_SCATTER, ROWS_DY, ROWS_ADD };

static void rows_fn(void *ctx, int row, float gate)
{
	struct rows *r = ctx;
	size_t C = (size_t)r->C;
	float *d = r->dst +
		   (r->mode == ROWS_GATHER || r->mode == ROWS_DY ? (size_t)r->i : (size_t)row) * C;
	const float *s =
		r->src +
		(r->mode == ROWS_GATHER || r->mode == ROWS_DY ? (size_t)row : (size_t)r->i) * C;

	switch (r->mode) {
	case ROWS_GATHER:
		for (size_t c = 0; c < C; c++)
			d[c] = s[c];
		break;
	case ROWS_SCATTER:
		for (size_t c = 0; c < C; c++)
			d[c] += gate * s[c];
		break;
	case ROWS_DY: { /* d y = gate d out; d gate = d out . y */
		const float *y = r->y + (size_t)r->i * C;
		float dot = 0;

		for (size_t c = 0; c < C; c++) {
			d[c] = gate * s[c];
			dot += s[c] * y[c];
		}
		r->dp[(size_t)row * r->E + r->e] += dot;
		break;
	}
	default: /* ROWS_ADD */
		for (size_t c = 0; c < C; c++)
			d[c] += s[c];
	}
	r->i++;
}

/* Runs fn's mode over my expert e's gathered rows starting at row i0 of the expert side. */
static int expert_pass(const struct ep *g, const struct par_work *w, int e, int mode, float *dst,
		       const float *src, const float *y, float *dp, size_t i0)
{
	struct rows r = {dst, src, y, dp, g->C, g->E, g->e0 + e, (int)i0, mode};

	return for_expert(g, w, e, dst && src ? rows_fn : NULL, &r);
}

static int ag_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct gpt_layer_acts *la, int l, float *aux)
{
	struct ep g = ep_of(m, c, l);
	struct moe_acts *a = &la->moe;
	size_t M = (size_t)g.s->M, xo = 0;
	int rc;

	if ((rc = par_moe_route(m, c, w, a, ln2_rows(m, c, w, la), PW(m, l, LP_ROUTER))))
		return rc;
	*aux += moe_aux(g.s, a);
	if ((rc = gather_routing(&g, w, a)))
		return rc;
	TAGGED(coll_all_gather(m->k.d, g.g, ln2_rows(m, c, w, la), D(w->ep[0]), M * g.C));
	if (rc)
		return rc;
	par_zero(&w->ep[1]); /* the outputs of every rank's tokens, my experts' part */
	for (int e = 0; e < g.El; e++) {
		int n = expert_pass(&g, w, e, ROWS_GATHER, at(D(a->x), xo * g.C), D(w->ep[0]), NULL,
				    NULL, 0);

		sum_charge(g.k, "moe.ep.gather", 1, (double)((size_t)n * g.C));
		moe_expert_fwd(&m->k, at(D(a->y), xo * g.C), at(D(a->pre), xo * g.F),
			       at(D(a->h), xo * g.F), at(D(a->x), xo * g.C), w_at(&g, LP_FCW, e),
			       w_at(&g, LP_FCB, e), w_at(&g, LP_FC2W, e), w_at(&g, LP_FC2B, e), n,
			       g.C, g.F);
		expert_pass(&g, w, e, ROWS_SCATTER, D(w->ep[1]), at(D(a->y), xo * g.C), NULL, NULL,
			    0);
		sum_charge(g.k, "moe.ep.combine", 1, (double)((size_t)n * g.C));
		xo += (size_t)n;
	}
	TAGGED(coll_reduce_scatter(m->k.d, g.g, D(w->ep[1]), D(w->tmp), M * g.C, COLL_SUM));
	return rc;
}

static int ag_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct gpt_layer_acts *la, int l, float scale, int weight, struct par_stash *st)
{
	struct ep g = ep_of(m, c, l);
	struct moe_acts *a = &la->moe;
	size_t M = (size_t)g.s->M, xo = 0;
	float *dp = D(w->ep[3]); /* (n M, E): the gates' gradients, my experts' columns */
	int rc;

	(void)weight;
	(void)st;
	if ((rc = gather_routing(&g, w, a)))
		return rc;
	TAGGED(coll_all_gather(m->k.d, g.g, w->g, D(w->ep[0]), M * g.C)); /* d out, gathered */
	if (rc)
		return rc;
	par_zero(&w->ep[1]); /* d in of every rank's tokens, my experts' part */
	par_zero(&w->ep[3]);
	for (int e = 0; e < g.El; e++) {
		float *dy = at(D(w->ep[2]), xo * g.C);
		int n = expert_pass(&g, w, e, ROWS_DY, D(w->ep[2]), D(w->ep[0]), D(a->y), dp, xo);

		sum_charge(g.k, "moe.ep.combine.bwd", 1, (double)(2 * (size_t)n * g.C));
		moe_expert_bwd(&m->k, D(w->ep[4]), D(w->ep_dh), D(w->ep_dpre), dy,
			       at(D(a->x), xo * g.C), at(D(a->pre), xo * g.F),
			       at(D(a->h), xo * g.F), w_at(&g, LP_FCW, e), w_at(&g, LP_FC2W, e),
			       g_at(&g, LP_FCW, e), g_at(&g, LP_FCB, e), g_at(&g, LP_FC2W, e),
			       g_at(&g, LP_FC2B, e), n, g.C, g.F);
		expert_pass(&g, w, e, ROWS_ADD, D(w->ep[1]), D(w->ep[4]), NULL, NULL, 0);
		sum_charge(g.k, "moe.ep.scatter.bwd", 1, (double)((size_t)n * g.C));
		xo += (size_t)n;
	}
	/* each rank's tokens get the sums over every rank's experts: into d ln2 (zero
	 * before the MLP's backward) and the router's d probs, to which the aux loss adds */
	TAGGED(coll_reduce_scatter(m->k.d, g.g, D(w->ep[1]), D(w->dln), M * g.C, COLL_SUM));
	if (rc)
		return rc;
	TAGGED(coll_reduce_scatter(m->k.d, g.g, dp, D(w->moe_scratch.dprobs), M * g.E, COLL_SUM));
	if (rc)
		return rc;
	return router_bwd(m, c, w, la, l, scale);
}

/* ------------------------------------------------------------------------------------ */
/* Each rank's own rows                                                                 */

/* With the experts over ep ranks that span the tp group (ep_rows), a MoE layer's MLP takes
 * the rank's sequence-parallel rows where ln2's LayerNorm wrote them and gives its output
 * rows whole: no gather before it, no reduce-scatter after. Backward likewise, from the
 * residual gradient's rows. */
static int rows_enter(struct par_model *m, const struct par_tp *c, struct par_work *w,
		      const float *rows, float *buf, size_t C)
{
	(void)m;
	(void)c;
	(void)w;
	(void)rows;
	(void)buf;
	(void)C;
	return 0;
}

static int rows_exit(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     float *partial, float *local, size_t C, const float **out)
{
	(void)m;
	(void)c;
	(void)w;
	(void)local;
	(void)C;
	*out = partial;
	return 0;
}

static int rows_rows(struct par_model *m, const struct par_tp *c, struct par_work *w)
{
	(void)m;
	(void)c;
	w->g = w->gsrc;
	return 0;
}

const struct par_region par_region_rows = {"each rank's own rows", rows_enter, rows_exit,
					   rows_rows};

/* ------------------------------------------------------------------------------------ */

static const struct par_mlp alltoall = {"MoE over ep (alltoall)", a2a_fwd, a2a_bwd, NULL, NULL};
static const struct par_mlp allgather = {"MoE over ep (allgather)", ag_fwd, ag_bwd, NULL, NULL};

const struct par_mlp *par_ep_mlp(const struct par_model *m)
{
	return m->pc.ep_dispatch == PAR_EP_ALLGATHER ? &allgather : &alltoall;
}

int par_ep_alloc_work(struct par_model *m, struct par_work *w)
{
	const struct moe_shape *s = &m->moe;
	size_t C = (size_t)s->C, G = (size_t)m->ep * s->M;
	/* the rows a rank's experts can receive (par/model.c); and what an expert can
	 * get: ep cap, or ep M */
	size_t R = (size_t)s->rows;
	size_t ecap = (size_t)m->ep * s->cap;
	int rc = 0;

#define A(t, n, name)                                                                              \
	do {                                                                                       \
		if (!rc)                                                                           \
			rc = tensor_alloc(&m->k, (t), MEM_WORK, (n), (name));                      \
	} while (0)
	if (m->pc.ep_dispatch == PAR_EP_ALLTOALL) {
		A(&w->ep[0], R * C, "ep rows");
		A(&w->ep[1], R * C, "ep rows exchanged");
		A(&w->ep[2], R * C, "ep rows regrouped");
	} else {
		A(&w->ep[0], G * C, "ep tokens gathered");
		A(&w->ep[1], G * C, "ep outputs of every rank's tokens");
		A(&w->ep[2], R * C, "ep expert rows");
		A(&w->ep[3], G * (size_t)s->E, "ep gates' gradients");
		A(&w->ep[4], ecap * C, "ep expert d in");
	}
	A(&w->ep_dh, ecap * (size_t)s->F, "ep expert d fc.gelu");
	A(&w->ep_dpre, ecap * (size_t)s->F, "ep expert d fc");
	/* the counts' all-to-all (E each way), or this rank's routing and everyone's */
	A(&w->ep_meta, 2 * ((size_t)s->E + (size_t)s->M * s->k + G * (size_t)s->k), "ep routing");
#undef A
	return rc;
}
