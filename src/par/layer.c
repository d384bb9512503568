/* par/layer: the pieces of a layer, the ends of the model and the plain executor; see
 * par/layer.h. */
#include "par/layer.h"

#include "coll.h"
#include "par/internal.h"
#include "linear.h"
#include "ops.h"
#include "par/overlap.h"
#include "par/recompute.h"
#include "par/tp.h"
#include "par/tpo.h"
#include "util.h"

const float *par_layer_input(const struct par_acts *a, int l)
{
	if (l == a->l0)
		return D(a->enc) ? D(a->enc) + a->enc_off : NULL;
	return l == a->cut ? D(a->cutbuf) : D(par_la(a, l - 1)->res3);
}

/* Mixed degrees without sequence parallelism (par/tp.h): after the last of the first
 * layers, the parts of the batch gathered over the merge group into the next layer's
 * input; in backward, this rank's part of that input's gradient, and at the bottom the
 * parts' gradients gathered again for the embeddings. */
static int cut_gather(struct par_model *m, struct par_acts *a, int l)
{
	size_t n = (size_t)m->plan[l].tp->Ml * (size_t)m->cfg.hidden;

	if (a->cut != l + 1 || m->rerun)
		return 0;
	return coll_all_gather(m->k.d, m->merge, D(par_la(a, l)->res3), D(a->cutbuf), n);
}

static void cut_split(struct par_model *m, struct par_work *w, struct par_acts *a, int l)
{
	const struct par_tp *c = m->plan[l].tp;
	size_t n = (size_t)c->Ml * (size_t)m->cfg.hidden;

	if (a->cut == l + 1 && D(w->dres))
		memmove(D(w->dres), D(w->dres) + (size_t)c->part * n, n * sizeof(float));
}

static int bottom_gather(struct par_model *m, struct par_work *w, int l)
{
	const struct par_tp *c = m->plan[l].tp;
	size_t n = (size_t)c->Ml * (size_t)m->cfg.hidden;
	int rc;

	if (l > 0 || c->parts == 1 || c->sp)
		return 0;
	if ((rc = coll_all_gather(m->k.d, m->merge, D(w->dres), D(w->dln), n)))
		return rc;
	if (D(w->dres))
		memcpy(D(w->dres), D(w->dln), (size_t)m->Ml * m->cfg.hidden * sizeof(float));
	return 0;
}

int par_weight_grad(struct par_model *m, int now, struct tensor *st, const char *name, float *dw,
		    float *db, const float *dy, const float *x, int M, int K, int N)
{
	int rc;

	if (now) {
		linear_bwd_weight(&m->k, dw, db, 1, dy, x, M, K, N);
		return 0;
	}
	if ((rc = tensor_alloc(&m->k, st, MEM_ACT, (size_t)M * N, name)))
		return rc;
	if (st->data && dy)
		memcpy(st->data, dy, (size_t)M * N * sizeof *dy);
	return 0;
}

static void late_gemm(struct par_model *m, const struct par_late *g)
{
	linear_bwd_weight(&m->k, g->dw, g->db, g->bias, g->dy, g->x, g->M, g->K, g->N);
}

/* The weight gradient (linear_bwd_weight's arguments) now, with now or in Megatron's order
 * before 2022, else left in w->late for exit_late to run under the input gradient's
 * collective. */
static void late_or_now(struct par_model *m, struct par_work *w, int now, float *dw, float *db,
			int bias, const float *dy, const float *x, int M, int K, int N)
{
	struct par_late g = {.on = 1,
			     .dw = dw,
			     .db = db,
			     .dy = dy,
			     .x = x,
			     .bias = bias,
			     .M = M,
			     .K = K,
			     .N = N};

	if (now || m->pc.sync_dgrad)
		late_gemm(m, &g);
	else
		w->late = g;
}

int par_weight_grad_late(struct par_model *m, struct par_work *w, int now, struct tensor *st,
			 const char *name, float *dw, float *db, const float *dy, const float *x,
			 int M, int K, int N)
{
	if (!now)
		return par_weight_grad(m, now, st, name, dw, db, dy, x, M, K, N);
	late_or_now(m, w, 0, dw, db, 1, dy, x, M, K, N);
	return 0;
}

float *par_ln_rows(const struct par_model *m, const struct par_tp *c, struct tensor *ln)
{
	return m->ln_rows ? D(*ln) : par_rows_at(D(*ln), (size_t)c->row0, (size_t)m->cfg.hidden);
}

float *par_ln_whole(const struct par_model *m, struct par_work *w, struct tensor *ln)
{
	return m->ln_rows ? D(w->lnw) : D(*ln);
}

int par_ln_gather(struct par_model *m, const struct par_region *rg, const struct par_tp *c,
		  struct par_work *w, struct tensor *ln, int post)
{
	int was = w->post, rc;

	if (!m->ln_rows)
		return 0;
	w->post = post;
	rc = rg->enter(m, c, w, D(*ln), D(w->lnw), (size_t)m->cfg.hidden);
	w->post = was;
	return rc;
}

int par_ln_wait(struct par_model *m, struct par_work *w)
{
	return m->ln_rows ? par_work_wait(m, w) : 0;
}

/* The exit of a column-parallel layer's backward, the input gradient partial summed into
 * local (the region's exit), in Megatron-LM's order
 * (LinearWithGradAccumulationAndAsyncCommunication.backward, megatron/core/
 * tensor_parallel/layers.py; Transformer Engine's linear layers alike): the all-reduce,
 * or the reduce-scatter under sequence parallelism, goes on the wire before the weight
 * gradient's GEMM left in w->late, which runs under it; then it is waited for. Oases's
 * executor (w->post) runs the GEMM first and posts the exit at the piece's end, for the
 * next piece to wait for; without such a GEMM (a split backward's input pass; the chunked
 * and MoE MLPs, whose weight gradients come with their input's) the exit alone. */
static int exit_late(struct par_model *m, const struct par_region *rg, const struct par_tp *c,
		     struct par_work *w, float *partial, float *local, size_t C, const float **out)
{
	struct par_late g = w->late;
	int rc;

	w->late.on = 0;
	if (g.on && w->post) /* Oases's: the GEMM, then the exit posted at the piece's end */
		late_gemm(m, &g);
	if (!g.on || w->post)
		return rg->exit(m, c, w, partial, local, C, out);
	w->post = 1;
	rc = rg->exit(m, c, w, partial, local, C, out);
	w->post = 0;
	if (rc)
		return rc;
	late_gemm(m, &g);
	return par_work_wait(m, w);
}

/* ------------------------------------------------------------------------------------ */
/* Posting                                                                              */

int par_work_wait(struct par_model *m, struct par_work *w)
{
	int rc;

	if (!w || !w->req)
		return 0;
	rc = coll_wait(m->k.d, w->req);
	w->req = NULL;
	if (m->inflight == w)
		m->inflight = NULL;
	return rc;
}

int par_post_slot(struct par_model *m, struct par_work *w, struct coll_req ***req)
{
	int rc;

	*req = NULL;
	if (!w->post)
		return 0;
	EMU_ASSERT(!w->req); /* a piece posts at most one, at its end */
	if ((rc = par_work_wait(m, m->inflight)))
		return rc;
	m->inflight = w;
	*req = &w->req;
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* The pieces                                                                           */

int par_layer_fwd(struct par_model *m, struct par_work *w, struct par_acts *a, int l,
		  enum par_piece p)
{
	const struct kctx *k = &m->k;
	const struct par_plan *pl = &m->plan[l];
	const struct par_tp *c = pl->tp;
	struct gpt_layer_acts *la = par_la(a, l);
	int BT = c->B * m->T, C = m->cfg.hidden, C3 = 3 * C / c->t, Cl = C / c->t, rc;
	const float *x = par_layer_input(a, l); /* (Ml, h) */

	switch (p) {
	case PAR_PRE: /* ln1 on this rank's rows, made whole (f) */
		layernorm_fwd(k, par_ln_rows(m, c, &la->ln1), D(la->ln1_mean), D(la->ln1_rstd), x,
			      PW(m, l, LP_LN1W), PW(m, l, LP_LN1B), c->Ml, C);
		if (pl->tpo) /* gathered by qkv's ring (par/tpo.h) */
			return 0;
		return pl->region->enter(m, c, w, par_ln_rows(m, c, &la->ln1),
					 par_ln_whole(m, w, &la->ln1), (size_t)C);
	case PAR_QKV: /* qkv (B T, 3h/t), this rank's heads */
		if (pl->tpo)
			return par_tpo_ag(m, c, PAR_TPO_QKV_FPROP, 0, par_ln_rows(m, c, &la->ln1),
					  par_ln_whole(m, w, &la->ln1), (size_t)C, D(la->qkv),
					  PW(m, l, LP_QKVW), PW(m, l, LP_QKVB), C3);
		linear_fwd(k, D(la->qkv), par_ln_whole(m, w, &la->ln1), PW(m, l, LP_QKVW),
			   PW(m, l, LP_QKVB), 1, BT, C, C3);
		return 0;
	case PAR_ATTN: {
		struct attn_drop d = par_attn_drop(m, a, c, l);

		return pl->attn->fwd(m, c, w, la, &d);
	}
	case PAR_PROJ: /* row-parallel proj (B T, h) partial, summed by g into w->sum */
		if (pl->tpo)
			return par_tpo_rs(m, c, w, PAR_TPO_PROJ_FPROP, D(la->atty),
					  PW(m, l, LP_PROJW), PW(m, l, LP_PROJB), Cl, (size_t)C,
					  D(w->tmp), D(w->tmpl), &w->sum);
		linear_fwd(k, D(w->tmp), D(la->atty), PW(m, l, LP_PROJW), PW(m, l, LP_PROJB), 1, BT,
			   Cl, C);
		return pl->region->exit(m, c, w, D(w->tmp), D(w->tmpl), (size_t)C, &w->sum);
	case PAR_MID: /* res2 = x + the attention's branch (dropped out); ln2 made whole (f) */
		par_drop_add(m, a, c, l, DROP_ATTN, D(la->res2), &la->mask2, x, w->sum);
		layernorm_fwd(k, par_ln_rows(m, c, &la->ln2), D(la->ln2_mean), D(la->ln2_rstd),
			      D(la->res2), PW(m, l, LP_LN2W), PW(m, l, LP_LN2B), c->Ml, C);
		if (pl->tpo_mlp) /* gathered by fc's ring */
			return 0;
		return pl->mlp_region->enter(m, c, w, par_ln_rows(m, c, &la->ln2),
					     par_ln_whole(m, w, &la->ln2), (size_t)C);
	case PAR_MLP: /* the MLP's partial sums, summed by g into w->sum */
		if ((rc = pl->mlp->fwd(m, c, w, la, l, &a->aux_loss)) || pl->tpo_mlp)
			return rc; /* (fc2's pipeline summed it) */
		return pl->mlp_region->exit(m, c, w, D(w->tmp), D(w->tmpl), (size_t)C, &w->sum);
	case PAR_OUT: /* res3 = res2 + the MLP's branch (dropped out) */
		par_drop_add(m, a, c, l, DROP_MLP, D(la->res3), &la->mask3, D(la->res2), w->sum);
		return cut_gather(m, a, l);
	default:
		EMU_ASSERT(0);
		return 0;
	}
}

int par_layer_bwd(struct par_model *m, struct par_work *w, struct par_acts *a, int l,
		  enum par_piece p, float scale, int weight)
{
	const struct kctx *k = &m->k;
	const struct par_plan *pl = &m->plan[l];
	const struct par_tp *c = pl->tp;
	struct gpt_layer_acts *la = par_la(a, l);
	struct par_stash *st = par_stash_at(a, l);
	int BT = c->B * m->T, C = m->cfg.hidden, C3 = 3 * C / c->t, Cl = C / c->t, rc;

	switch (p) {
	case PAR_OUT: /* the output's gradient rows (through dropout) for the row-parallel fc2 */
		cut_split(m, w, a, l);
		w->gsrc = par_drop_grad(m, w, c, &la->mask3);
		if (pl->tpo_mlp) { /* gathered by fc2's input-gradient ring */
			par_tpo_rows(w);
			return 0;
		}
		return pl->mlp_region->rows(m, c, w);
	case PAR_MLP: /* d ln2, summed (the backward of f) into w->dl */
		par_zero(&w->dln);
		if ((rc = pl->mlp->bwd(m, c, w, la, l, scale, weight, st)))
			return rc;
		par_tpo_bulk(m, pl->tpo_mlp ? PAR_TPO_FC1_WGRAD : -1);
		rc = exit_late(m, pl->mlp_region, c, w, D(w->dln), D(w->dlocal), (size_t)C, &w->dl);
		par_tpo_bulk(m, -1);
		return rc;
	case PAR_MID: /* ln2's backward into dres, then its rows for proj */
		layernorm_bwd(k, D(w->dres), PG(m, l, LP_LN2W), PG(m, l, LP_LN2B), w->dl,
			      D(la->res2), PW(m, l, LP_LN2W), D(la->ln2_mean), D(la->ln2_rstd),
			      c->Ml, C);
		w->gsrc = par_drop_grad(m, w, c, &la->mask2);
		if (pl->tpo) { /* gathered by proj's input-gradient ring */
			par_tpo_rows(w);
			return 0;
		}
		return pl->region->rows(m, c, w);
	case PAR_PROJ: /* d atty (B T, h/t) */
		par_zero(&w->datty);
		if (!pl->tpo)
			linear_bwd_input(k, D(w->datty), w->g, PW(m, l, LP_PROJW), BT, Cl, C);
		else if ((rc = par_tpo_ag(m, c, PAR_TPO_PROJ_DGRAD, 1, w->gsrc, D(w->gfull),
					  (size_t)C, D(w->datty), PW(m, l, LP_PROJW), NULL, Cl)))
			return rc;
		return par_weight_grad(m, weight, &st->gproj, "stash d proj", PG(m, l, LP_PROJW),
				       PG(m, l, LP_PROJB), w->g, D(la->atty), BT, Cl, C);
	case PAR_ATTN: {
		struct attn_drop d = par_attn_drop(m, a, c, l);

		return pl->attn->bwd(m, c, w, la, &d);
	}
	case PAR_QKV: /* d ln1 from d qkv, summed (the backward of f) into w->dl; ln1 gathered
		       * again under the input gradient's GEMM, for the weight gradient */
		par_tpo_bulk(m, pl->tpo ? PAR_TPO_QKV_DGRAD : -1); /* TE's bulk method's SMs */
		if ((rc = par_ln_gather(m, pl->region, c, w, &la->ln1, 1)))
			return rc;
		par_zero(&w->dln);
		linear_bwd_input(k, D(w->dln), D(w->dqkv), PW(m, l, LP_QKVW), BT, C, C3);
		if ((rc = par_ln_wait(m, w)) ||
		    (rc = par_weight_grad_late(m, w, weight, &st->dqkv, "stash d qkv",
					       PG(m, l, LP_QKVW), PG(m, l, LP_QKVB), D(w->dqkv),
					       par_ln_whole(m, w, &la->ln1), BT, C, C3)))
			return rc;
		par_tpo_bulk(m, pl->tpo ? PAR_TPO_QKV_WGRAD : -1);
		rc = exit_late(m, pl->region, c, w, D(w->dln), D(w->dlocal), (size_t)C, &w->dl);
		par_tpo_bulk(m, -1);
		return rc;
	case PAR_PRE: /* ln1's backward into dres */
		layernorm_bwd(k, D(w->dres), PG(m, l, LP_LN1W), PG(m, l, LP_LN1B), w->dl,
			      par_layer_input(a, l), PW(m, l, LP_LN1W), D(la->ln1_mean),
			      D(la->ln1_rstd), c->Ml, C);
		return bottom_gather(m, w, l);
	default:
		EMU_ASSERT(0);
		return 0;
	}
}

static void stash_free(const struct kctx *k, struct par_stash *st)
{
	tensor_free(k, &st->gproj);
	tensor_free(k, &st->dqkv);
	tensor_free(k, &st->gfc2);
	tensor_free(k, &st->dfc);
}

void par_layer_bwd_weight(struct par_model *m, struct par_acts *a, int l)
{
	const struct kctx *k = &m->k;
	const struct par_tp *c = m->plan[l].tp;
	struct gpt_layer_acts *la = par_la(a, l);
	struct par_stash *st = par_stash_at(a, l);
	int BT = c->B * m->T, C = m->cfg.hidden, C3 = 3 * C / c->t, Cl = C / c->t;

	EMU_ASSERT(!m->ln_rows); /* (a split backward keeps ln1 and ln2 whole) */

	if (m->plan[l].mlp->bwd_weight)
		m->plan[l].mlp->bwd_weight(m, c, la, l, st);
	linear_bwd_weight(k, PG(m, l, LP_PROJW), PG(m, l, LP_PROJB), 1, D(st->gproj), D(la->atty),
			  BT, Cl, C);
	linear_bwd_weight(k, PG(m, l, LP_QKVW), PG(m, l, LP_QKVB), 1, D(st->dqkv), D(la->ln1), BT,
			  C, C3);
	stash_free(k, st);
}

void par_stash_free(struct par_model *m, struct par_stash *st)
{
	stash_free(&m->k, st);
}

/* ------------------------------------------------------------------------------------ */
/* The ends                                                                             */

void par_set_batch(struct par_model *m, struct par_acts *a, const int *tokens, const int *targets)
{
	int BT = m->B * m->T, s = m->T * m->cp;

	if (!kctx_math(&m->k))
		return;
	for (int i = 0; i < BT; i++) { /* this rank's rows of each sequence (par/cp.h) */
		int b = i / m->T, t = m->pos[i % m->T];

		a->tokens[i] = tokens[b * s + t];
		a->targets[i] = targets[b * s + t];
	}
	for (int i = 0; i < BT; i++) {
		int t = a->targets[i];

		a->ltargets[i] = t >= m->v0 && t < m->v0 + m->Vl ? t - m->v0 : -1;
	}
}

float par_part_loss(const struct par_model *m, const struct par_acts *a, int head)
{
	int BT = m->B * m->T;
	double s = 0;

	if (!kctx_math(&m->k))
		return 0;
	for (int i = 0; head && i < BT; i++)
		s += a->losses.data[i];
	return (float)(s / BT) + a->aux_loss;
}

int par_embed_fwd(struct par_model *m, struct par_work *w, struct par_acts *a)
{
	int rc = par_use(m, PAR_UNIT_EMB(m));

	return rc ? rc : par_tp_embed_fwd(m, w, a);
}

int par_embed_bwd(struct par_model *m, struct par_work *w, struct par_acts *a)
{
	int rc;

	if ((rc = par_tp_embed_bwd(m, w, a)) || (rc = par_ready(m, 1)) || (rc = par_ready(m, 0)))
		return rc;
	return 0;
}

int par_head_fwd(struct par_model *m, struct par_work *w, struct par_acts *a, const float *x)
{
	const struct kctx *k = &m->k;
	const struct par_tp *c = &m->tpv[PAR_TPV_MODEL];
	int C = m->cfg.hidden, rc;

	if ((rc = par_use(m, PAR_UNIT_LNF(m))))
		return rc;
	/* the final LayerNorm's output kept as a layer's are (par_ln_rows): the output
	 * layer is column-parallel, and Megatron's saves its input's rows under sp too */
	layernorm_fwd(k, par_ln_rows(m, c, &a->lnf), D(a->lnf_mean), D(a->lnf_rstd), x,
		      m->p[m->np - 2].w, m->p[m->np - 1].w, m->Ml, C);
	if ((rc = m->ends->enter(m, c, w, par_ln_rows(m, c, &a->lnf), par_ln_whole(m, w, &a->lnf),
				 (size_t)C)) ||
	    (rc = par_use(m, PAR_UNIT_EMB(m))))
		return rc;
	return par_tp_logits_loss(m, w, a, par_ln_whole(m, w, &a->lnf));
}

int par_head_bwd(struct par_model *m, struct par_work *w, struct par_acts *a, const float *x,
		 float scale)
{
	const struct kctx *k = &m->k;
	const struct par_tp *c = &m->tpv[PAR_TPV_MODEL];
	int BT = m->B * m->T, C = m->cfg.hidden, V = m->Vl, rc;
	const float *dl;

	if ((rc = par_use(m, PAR_UNIT_EMB(m))))
		return rc;
	par_zero(&w->dlogits);
	crossentropy_bwd(k, m->pc.ce, D(w->dlogits), D(a->probs),
			 m->tp == 1 ? a->targets : a->ltargets, scale / (float)BT, BT, V);
	par_zero(&w->dln);
	/* the LayerNorm's rows gathered again under the input gradient's GEMM */
	if ((rc = par_ln_gather(m, m->ends, c, w, &a->lnf, 1)))
		return rc;
	linear_bwd_input(k, D(w->dln), D(w->dlogits), m->p[0].w, BT, C, V);
	if ((rc = par_ln_wait(m, w)))
		return rc;
	/* (now under Oases's executor: the ends as its schedule has them, par/overlap.h) */
	late_or_now(m, w, m->nsub > 1, m->p[0].g, NULL, 0, D(w->dlogits),
		    par_ln_whole(m, w, &a->lnf), BT, C, V);
	if ((rc = exit_late(m, m->ends, c, w, D(w->dln), D(w->dlocal), (size_t)C, &dl)) ||
	    (rc = par_use(m, PAR_UNIT_LNF(m))))
		return rc;
	par_zero(&w->dres);
	layernorm_bwd(k, D(w->dres), m->p[m->np - 2].g, m->p[m->np - 1].g, dl, x, m->p[m->np - 2].w,
		      D(a->lnf_mean), D(a->lnf_rstd), m->Ml, C);
	if ((rc = par_ready(m, m->np - 2)) || (rc = par_ready(m, m->np - 1)))
		return rc;
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* The plain executor                                                                   */

int par_layer_use(struct par_model *m, int u)
{
	return par_use(m, u);
}

int par_layer_ready(struct par_model *m, int l, int i0, int i1)
{
	int rc = 0;

	for (int i = i0; i < i1 && !rc; i++)
		rc = par_ready(m, 2 + l * LP_N + i);
	return rc;
}

int par_layer_fwd_all(struct par_model *m, struct par_work *w, struct par_acts *a, int l)
{
	int rc;

	for (int p = PAR_PRE; p < PAR_NPIECES; p++)
		if ((rc = par_layer_fwd(m, w, a, l, (enum par_piece)p)))
			return rc;
	return 0;
}

int par_forward_part(struct par_model *m, struct par_acts *a, const int *tokens, const int *targets,
		     float *loss)
{
	struct par_work *w = &m->work[0];
	int head = a->l1 == m->cfg.num_layers, rc;

	if (a->nsub)
		return par_overlap_forward(m, a, tokens, targets, loss);
	*loss = 0;
	a->aux_loss = 0;
	if (a->l0 == 0 || head)
		par_set_batch(m, a, tokens, targets);
	if (a->l0 == 0 && (rc = par_embed_fwd(m, w, a)))
		return rc;
	for (int l = a->l0; l < a->l1; l++) {
		if ((rc = par_use(m, l)) || (rc = par_recompute_regrow(m, a, l)) ||
		    (rc = par_layer_fwd_all(m, w, a, l)))
			return rc;
		par_recompute_drop(m, a, l);
	}
	if (head && (rc = par_head_fwd(m, w, a, par_layer_input(a, a->l1))))
		return rc;
	*loss = par_part_loss(m, a, head);
	return 0;
}

/* The weight pass of a split backward: every layer's stashed output gradients, of
 * every sub-batch. */
static int weight_pass(struct par_model *m, struct par_acts *a)
{
	int rc;

	for (int l = a->l1 - 1; l >= a->l0; l--) {
		for (int s = 0; s < par_nsub(a); s++) {
			par_layer_bwd_weight(m, par_sub(a, s), l);
			par_recompute_drop(m, par_sub(a, s), l);
		}
		for (int i = 0; i < LP_N; i++)
			if ((rc = par_ready(m, 2 + l * LP_N + i)))
				return rc;
	}
	return 0;
}

int par_backward_part(struct par_model *m, struct par_acts *a, float scale, int input, int weight)
{
	struct par_work *w = &m->work[0];
	int rc;

	if (!input)
		return weight_pass(m, a);
	if (a->nsub)
		return par_overlap_backward(m, a, scale, weight);
	if (a->l1 == m->cfg.num_layers) {
		if ((rc = par_ready(m, -1)) ||
		    (rc = par_head_bwd(m, w, a, par_layer_input(a, a->l1), scale)))
			return rc;
	} else if (D(w->dres)) {
		memcpy(D(w->dres), D(a->dout), (size_t)m->Ml * m->cfg.hidden * sizeof(float));
	}
	for (int l = a->l1 - 1; l >= a->l0; l--) {
		if ((rc = par_use(m, l)) || (rc = par_recompute_regrow(m, a, l)) ||
		    (rc = par_recompute_bwd(m, w, a, l)))
			return rc;
		for (int p = PAR_NPIECES - 1; p >= PAR_PRE; p--)
			if ((rc = par_layer_bwd(m, w, a, l, (enum par_piece)p, scale, weight)))
				return rc;
		for (int i = 0; weight && i < LP_N; i++)
			if ((rc = par_ready(m, 2 + l * LP_N + i)))
				return rc;
		if (weight)
			par_recompute_drop(m, a, l);
	}
	if (a->l0 > 0)
		return 0; /* w->dres: the gradient of the input, for the previous stage */
	return par_embed_bwd(m, w, a);
}

int par_forward(struct par_model *m, const int *tokens, const int *targets, float *loss)
{
	return par_forward_part(m, &m->own, tokens, targets, loss);
}

int par_backward(struct par_model *m, float scale)
{
	return par_backward_part(m, &m->own, scale, 1, 1);
}
