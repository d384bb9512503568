/* par/mlp: the MLP of a layer, a table per kind (par/layer.h). Tensor parallelism cuts
 * each as Megatron does: fc column-parallel, (B T, f/t) this rank's units; fc2
 * row-parallel, its output (B T, h) a partial sum that the region's exit completes.
 *   dense    fc, GeLU, fc2, keeping fc and fc.gelu (B T, f/t) for backward
 *   chunked  HelixPipe's chunked MLP (Zhang et al. 2025, arXiv 2507.00394, section 4.3):
 *            the same over chunks of rows, only one chunk's fc and fc.gelu alive (work
 *            memory) and none of it kept: backward computes each chunk's fc again
 *   moe      the MoE block of models/moe.h (Shazeer et al. 2017, arXiv 1701.06538: a
 *            softmax router sending each token to its top-k experts; the Switch
 *            Transformer, Fedus et al. 2021, arXiv 2101.03961: the capacity factor and
 *            the load-balancing loss), each expert's MLP cut like the dense one, the
 *            router replicated */
#include "par/internal.h"
#include "linear.h"
#include "moe.h"
#include "ops.h"
#include "coll.h"
#include "par/tp.h"
#include "par/tpo.h"

/* fc and GeLU, kept for backward. */
static int dense_refwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		       struct gpt_layer_acts *la, int l)
{
	int BT = c->B * m->T, C = m->cfg.hidden, F = c->Fl;

	linear_fwd(&m->k, D(la->fch), par_ln_whole(m, w, &la->ln2), PW(m, l, LP_FCW),
		   PW(m, l, LP_FCB), 1, BT, C, F);
	gelu_fwd(&m->k, D(la->fch_gelu), D(la->fch), (size_t)BT * F);
	return 0;
}

/* The MLP's partial sums in w->tmp; under --tp-comm-overlap (par/tpo.h) with ln2's
 * gathering fused into fc and fc2's reduce-scatter into fc2, summed into w->sum. */
static int dense_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la, int l, float *aux)
{
	int BT = c->B * m->T, C = m->cfg.hidden, F = c->Fl, rc;

	(void)aux;
	if (!m->plan[l].tpo_mlp) {
		dense_refwd(m, c, w, la, l);
		linear_fwd(&m->k, D(w->tmp), D(la->fch_gelu), PW(m, l, LP_FC2W), PW(m, l, LP_FC2B),
			   1, BT, F, C);
		return 0;
	}
	if ((rc = par_tpo_ag(m, c, PAR_TPO_FC1_FPROP, 0, par_ln_rows(m, c, &la->ln2),
			     par_ln_whole(m, w, &la->ln2), (size_t)C, D(la->fch), PW(m, l, LP_FCW),
			     PW(m, l, LP_FCB), F)))
		return rc;
	gelu_fwd(&m->k, D(la->fch_gelu), D(la->fch), (size_t)BT * F);
	return par_tpo_rs(m, c, w, PAR_TPO_FC2_FPROP, D(la->fch_gelu), PW(m, l, LP_FC2W),
			  PW(m, l, LP_FC2B), F, (size_t)C, D(w->tmp), D(w->tmpl), &w->sum);
}

static int dense_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la, int l, float scale, int weight,
		     struct par_stash *st)
{
	const struct kctx *k = &m->k;
	int BT = c->B * m->T, C = m->cfg.hidden, F = c->Fl, rc;

	(void)scale;
	par_zero(&w->dfch_gelu);
	if (!m->plan[l].tpo_mlp)
		linear_bwd_input(k, D(w->dfch_gelu), w->g, PW(m, l, LP_FC2W), BT, F, C);
	else if ((rc = par_tpo_ag(m, c, PAR_TPO_FC2_DGRAD, 1, w->gsrc, D(w->gfull), (size_t)C,
				  D(w->dfch_gelu), PW(m, l, LP_FC2W), NULL, F)))
		return rc;
	if ((rc = par_weight_grad(m, weight, &st->gfc2, "stash d fc2", PG(m, l, LP_FC2W),
				  PG(m, l, LP_FC2B), w->g, D(la->fch_gelu), BT, F, C)))
		return rc;
	par_zero(&w->dfch);
	gelu_bwd(k, D(w->dfch), D(la->fch), D(w->dfch_gelu), (size_t)BT * F);
	/* ln2 gathered again under fc's input gradient (Megatron's sequence parallelism);
	 * under --tp-comm-overlap on the SMs TE's bulk method leaves, until PAR_MLP's exit */
	par_tpo_bulk(m, m->plan[l].tpo_mlp ? PAR_TPO_FC1_DGRAD : -1);
	if ((rc = par_ln_gather(m, m->plan[l].mlp_region, c, w, &la->ln2, 1)))
		return rc;
	linear_bwd_input(k, D(w->dln), D(w->dfch), PW(m, l, LP_FCW), BT, C, F);
	if ((rc = par_ln_wait(m, w)))
		return rc;
	return par_weight_grad_late(m, w, weight, &st->dfc, "stash d fc", PG(m, l, LP_FCW),
				    PG(m, l, LP_FCB), D(w->dfch), par_ln_whole(m, w, &la->ln2), BT,
				    C, F);
}

static void dense_bwd_weight(struct par_model *m, const struct par_tp *c, struct gpt_layer_acts *la,
			     int l, struct par_stash *st)
{
	int BT = c->B * m->T, C = m->cfg.hidden, F = c->Fl;

	linear_bwd_weight(&m->k, PG(m, l, LP_FC2W), PG(m, l, LP_FC2B), 1, D(st->gfc2),
			  D(la->fch_gelu), BT, F, C);
	linear_bwd_weight(&m->k, PG(m, l, LP_FCW), PG(m, l, LP_FCB), 1, D(st->dfc), D(la->ln2), BT,
			  C, F);
}

/* The rows of a chunk: (BT + chunks - 1) / chunks, the last one shorter. */
static int chunk_rows(const struct par_model *m, const struct par_tp *c)
{
	return (c->B * m->T + m->pc.mlp_chunks - 1) / m->pc.mlp_chunks;
}

static int chunked_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		       struct gpt_layer_acts *la, int l, float *aux)
{
	const struct kctx *k = &m->k;
	int BT = c->B * m->T, C = m->cfg.hidden, F = c->Fl, rows = chunk_rows(m, c);

	(void)aux;
	for (int r = 0; r < BT; r += rows) {
		int n = BT - r < rows ? BT - r : rows;

		linear_fwd(k, D(w->fch_c),
			   par_rows_at(par_ln_whole(m, w, &la->ln2), (size_t)r, (size_t)C),
			   PW(m, l, LP_FCW), PW(m, l, LP_FCB), 1, n, C, F);
		gelu_fwd(k, D(w->fchg_c), D(w->fch_c), (size_t)n * F);
		linear_fwd(k, par_rows_at(D(w->tmp), (size_t)r, (size_t)C), D(w->fchg_c),
			   PW(m, l, LP_FC2W), PW(m, l, LP_FC2B), 1, n, F, C);
	}
	return 0;
}

/* Per chunk: fc and GeLU again, then the fc2 and fc backward, weights included. */
static int chunked_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		       struct gpt_layer_acts *la, int l, float scale, int weight,
		       struct par_stash *st)
{
	const struct kctx *k = &m->k;
	int BT = c->B * m->T, C = m->cfg.hidden, F = c->Fl, rows = chunk_rows(m, c), rc;

	(void)scale;
	(void)weight; /* run_check refuses zero-bubble's split with the chunked MLP */
	(void)st;
	if ((rc = par_ln_gather(m, m->plan[l].mlp_region, c, w, &la->ln2, 0)))
		return rc;
	for (int r = 0; r < BT; r += rows) {
		int n = BT - r < rows ? BT - r : rows;
		const float *ln2 = par_rows_at(par_ln_whole(m, w, &la->ln2), (size_t)r, (size_t)C);
		const float *gr = w->g ? w->g + (size_t)r * C : NULL;

		linear_fwd(k, D(w->fch_c), ln2, PW(m, l, LP_FCW), PW(m, l, LP_FCB), 1, n, C, F);
		gelu_fwd(k, D(w->fchg_c), D(w->fch_c), (size_t)n * F);
		par_zero(&w->dfch_gelu);
		linear_bwd_input(k, D(w->dfch_gelu), gr, PW(m, l, LP_FC2W), n, F, C);
		linear_bwd_weight(k, PG(m, l, LP_FC2W), PG(m, l, LP_FC2B), 1, gr, D(w->fchg_c), n,
				  F, C);
		par_zero(&w->dfch);
		gelu_bwd(k, D(w->dfch), D(w->fch_c), D(w->dfch_gelu), (size_t)n * F);
		linear_bwd_input(k, par_rows_at(D(w->dln), (size_t)r, (size_t)C), D(w->dfch),
				 PW(m, l, LP_FCW), n, C, F);
		linear_bwd_weight(k, PG(m, l, LP_FCW), PG(m, l, LP_FCB), 1, D(w->dfch), ln2, n, C,
				  F);
	}
	return 0;
}

/* The block of models/moe.h, or under context parallelism the micro-batch's routing
 * (par/moe_route.c) and the experts on the rows kept. */
static int moe_fwd_piece(struct par_model *m, const struct par_tp *c, struct par_work *w,
			 struct gpt_layer_acts *la, int l, float *aux)
{
	int rc;

	if (m->cp == 1) {
		*aux += moe_fwd(&m->k, &c->moe, &la->moe, D(w->tmp), par_ln_whole(m, w, &la->ln2),
				PW(m, l, LP_ROUTER), PW(m, l, LP_FCW), PW(m, l, LP_FCB),
				PW(m, l, LP_FC2W), PW(m, l, LP_FC2B));
		return 0;
	}
	if ((rc = par_moe_route(m, c, w, &la->moe, par_ln_whole(m, w, &la->ln2),
				PW(m, l, LP_ROUTER))))
		return rc;
	*aux += moe_compact_fwd(&m->k, &c->moe, &la->moe, D(w->tmp), par_ln_whole(m, w, &la->ln2),
				PW(m, l, LP_FCW), PW(m, l, LP_FCB), PW(m, l, LP_FC2W),
				PW(m, l, LP_FC2B));
	return 0;
}

/* The routing and the experts' intermediates again: the whole block, whose output
 * (in w->tmp) goes unused, its aux loss counted once already. */
static int moe_refwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la, int l)
{
	float aux = 0;

	return moe_fwd_piece(m, c, w, la, l, &aux);
}

/* The router is replicated and sees partial expert outputs: rank 0 alone adds the aux
 * loss, and this micro-batch's router gradient is summed over the group before it joins
 * the accumulated one. The experts' weight gradients come with their input backward,
 * split or not. */
static int moe_bwd_piece(struct par_model *m, const struct par_tp *c, struct par_work *w,
			 struct gpt_layer_acts *la, int l, float scale, int weight,
			 struct par_stash *st)
{
	float *dr = c->t == 1 ? PG(m, l, LP_ROUTER) : D(w->drouter);
	int rc;

	(void)weight;
	(void)st;
	if ((rc = par_ln_gather(m, m->plan[l].mlp_region, c, w, &la->ln2, 0)))
		return rc;
	par_zero(&w->drouter);
	moe_bwd(&m->k, &c->moe, &la->moe, &w->moe_scratch, D(w->dln), w->g,
		par_moe_aux_scale(m, c, scale), par_ln_whole(m, w, &la->ln2), PW(m, l, LP_ROUTER),
		PW(m, l, LP_FCW), PW(m, l, LP_FC2W), dr, PG(m, l, LP_FCW), PG(m, l, LP_FCB),
		PG(m, l, LP_FC2W), PG(m, l, LP_FC2B));
	return par_moe_router_sum(m, c, w, l);
}

int par_moe_router_sum(struct par_model *m, const struct par_tp *c, struct par_work *w, int l)
{
	size_t nr = m->p[2 + l * LP_N + LP_ROUTER].n;
	float *dr = D(w->drouter);
	int rc, wire;

	if (c->t == 1)
		return 0;
	/* after the collective in flight: one at a time (par_post_slot); a gradient, so at
	 * the gradients' width */
	if ((rc = par_work_wait(m, m->inflight)))
		return rc;
	wire = par_grad_wire(m);
	rc = coll_all_reduce(m->k.d, c->g, dr, dr, nr, COLL_SUM);
	coll_set_wire_bytes(m->k.d, wire);
	if (rc)
		return rc;
	add_acc(&m->k, PG(m, l, LP_ROUTER), dr, nr);
	return 0;
}

const struct par_mlp par_mlp_dense = {"dense MLP", dense_fwd, dense_bwd, dense_bwd_weight,
				      dense_refwd};
const struct par_mlp par_mlp_chunked = {"chunked MLP", chunked_fwd, chunked_bwd, NULL, NULL};
const struct par_mlp par_mlp_moe = {"MoE", moe_fwd_piece, moe_bwd_piece, NULL, moe_refwd};
