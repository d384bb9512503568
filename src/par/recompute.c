/* par/recompute: activation recomputation (Korthikanti et al. 2022, arXiv 2205.05198):
 * what a layer keeps between forward and backward; see par/recompute.h. */
#include "par/recompute.h"

#include "par/internal.h"

void par_recompute_drop(struct par_model *m, struct par_acts *a, int l)
{
	struct gpt_layer_acts *la = par_la(a, l);

	if (m->pc.recompute == PAR_RECOMPUTE_SELECTIVE) {
		if (!m->plan[l].attn->refwd)
			return; /* nothing to run again: nothing to drop */
		tensor_free(&m->k, &la->att);
	} else if (m->pc.recompute == PAR_RECOMPUTE_FULL) {
		struct moe_acts host = la->moe;
		struct tensor keep = la->res3;

		la->res3 = (struct tensor){0};
		la->moe.slot_token = la->moe.choice = la->moe.slot = NULL;
		la->moe.frac = NULL;
		gpt_layer_acts_free(&m->k, la);
		la->res3 = keep;
		la->moe.slot_token = host.slot_token;
		la->moe.choice = host.choice;
		la->moe.slot = host.slot;
		la->moe.frac = host.frac;
	}
}

int par_recompute_regrow(struct par_model *m, struct par_acts *a, int l)
{
	if (m->pc.recompute == PAR_RECOMPUTE_NONE)
		return 0;
	return par_acts_layer(m, a, l, GPT_ACTS_ALL | par_acts_flags(m));
}

int par_recompute_bwd(struct par_model *m, struct par_work *w, struct par_acts *a, int l)
{
	const struct par_attn *at = m->plan[l].attn;
	float aux = a->aux_loss; /* the loss is the first forward's */
	int rc = 0;

	if (m->pc.recompute == PAR_RECOMPUTE_FULL) {
		rc = par_layer_fwd_all(m, w, a, l);
		a->aux_loss = aux;
	} else if (m->pc.recompute == PAR_RECOMPUTE_SELECTIVE && at->refwd) {
		at->refwd(m, w, par_la(a, l));
	}
	return rc;
}
