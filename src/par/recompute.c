/* par/recompute: activation recomputation (Korthikanti et al. 2022, arXiv 2205.05198;
 * Oases, Li et al. 2023, arXiv 2305.16121): what a layer keeps between forward and
 * backward; see par/recompute.h. */
#include "par/recompute.h"

#include "ops.h"
#include "par/internal.h"

/* Frees layer la's activations but the kept ones (NULL-terminated) and the MoE layers'
 * routing bookkeeping, which lives in host memory. */
static void drop_but(struct par_model *m, struct gpt_layer_acts *la, struct tensor *const *keep)
{
	struct moe_acts host = la->moe;
	struct tensor saved[10]; /* the most a keep list holds */
	int n = 0;

	for (; keep[n]; n++) {
		saved[n] = *keep[n];
		*keep[n] = (struct tensor){0};
	}
	la->moe.slot_token = la->moe.choice = la->moe.slot = la->moe.rows = NULL;
	la->moe.frac = la->moe.psum = NULL;
	gpt_layer_acts_free(&m->k, la);
	while (n--)
		*keep[n] = saved[n];
	la->moe.slot_token = host.slot_token;
	la->moe.choice = host.choice;
	la->moe.slot = host.slot;
	la->moe.frac = host.frac;
	la->moe.psum = host.psum;
	la->moe.rows = host.rows;
}

void par_recompute_drop(struct par_model *m, struct par_acts *a, int l)
{
	struct gpt_layer_acts *la = par_la(a, l);

	switch (m->pc.recompute) {
	case PAR_RECOMPUTE_SELECTIVE:
		if (m->plan[l].attn->refwd) { /* else nothing to run again: nothing to drop */
			tensor_free(&m->k, &la->att); /* and attention dropout's, drawn again */
			tensor_free(&m->k, &la->amask);
			tensor_free(&m->k, &la->attd);
		}
		return;
	case PAR_RECOMPUTE_FULL: {
		struct tensor *const keep[] = {&la->res3, NULL};

		drop_but(m, la, keep);
		return;
	}
	case PAR_RECOMPUTE_OASES: {
		/* what the region's collectives made: the summed branches in res2 and res3 (and
		 * the hidden dropout's masks, which a rerun would not remake);
		 * under sequence parallelism the gathered LayerNorm outputs too, with their
		 * statistics (of this rank's rows) */
		struct tensor *const tp_keep[] = {&la->res2, &la->res3, &la->mask2, &la->mask3,
						  NULL};
		struct tensor *const sp_keep[] = {&la->res2,     &la->res3,     &la->ln1,
						  &la->ln1_mean, &la->ln1_rstd, &la->ln2,
						  &la->ln2_mean, &la->ln2_rstd, &la->mask2,
						  &la->mask3,    NULL};

		drop_but(m, la, m->plan[l].tp->sp ? sp_keep : tp_keep);
		return;
	}
	default:
		return;
	}
}

int par_recompute_regrow(struct par_model *m, struct par_acts *a, int l)
{
	if (m->pc.recompute == PAR_RECOMPUTE_NONE)
		return 0;
	return par_acts_layer(m, a, l, GPT_ACTS_ALL | par_acts_flags(m));
}

/* Oases's recomputation: the layer's compute between its collectives, none of them. */
static int oases_refwd(struct par_model *m, struct par_work *w, struct par_acts *a, int l)
{
	const struct kctx *k = &m->k;
	const struct par_plan *pl = &m->plan[l];
	const struct par_tp *c = pl->tp;
	struct gpt_layer_acts *la = par_la(a, l);
	int C = m->cfg.hidden, rc;
	size_t r0 = (size_t)c->row0;
	struct attn_drop d = par_attn_drop(m, a, c, l);

	if (!c->sp) /* ln1 and ln2 from the kept input and res2: all rows, no f to run */
		layernorm_fwd(k, par_rows_at(D(la->ln1), r0, (size_t)C), D(la->ln1_mean),
			      D(la->ln1_rstd), par_layer_input(a, l), PW(m, l, LP_LN1W),
			      PW(m, l, LP_LN1B), c->Ml, C);
	if ((rc = par_layer_fwd(m, w, a, l, PAR_QKV)))
		return rc;
	if ((rc = pl->attn->fwd(m, c, w, la, &d)))
		return rc;
	if (!c->sp)
		layernorm_fwd(k, par_rows_at(D(la->ln2), r0, (size_t)C), D(la->ln2_mean),
			      D(la->ln2_rstd), D(la->res2), PW(m, l, LP_LN2W), PW(m, l, LP_LN2B),
			      c->Ml, C);
	return pl->mlp->refwd ? pl->mlp->refwd(m, c, w, la, l) : 0;
}

int par_recompute_bwd(struct par_model *m, struct par_work *w, struct par_acts *a, int l)
{
	const struct par_attn *at = m->plan[l].attn;
	float aux = a->aux_loss; /* the loss is the first forward's */
	int rc = 0;

	switch (m->pc.recompute) {
	case PAR_RECOMPUTE_FULL:
		m->rerun = 1;
		rc = par_layer_fwd_all(m, w, a, l);
		m->rerun = 0;
		a->aux_loss = aux;
		return rc;
	case PAR_RECOMPUTE_SELECTIVE: {
		struct attn_drop d = par_attn_drop(m, a, m->plan[l].tp, l);

		return at->refwd ? at->refwd(m, m->plan[l].tp, w, par_la(a, l), &d) : 0;
	}
	case PAR_RECOMPUTE_OASES:
		return oases_refwd(m, w, a, l);
	default:
		return 0;
	}
}
