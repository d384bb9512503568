/* par/attn: the attention of this rank's heads, a table per kind (par/layer.h):
 *   heads   causal softmax attention, the (B, a/t, T, T) scores kept for backward (with
 *           attention dropout also its mask, bytes, and the dropped probabilities P')
 *   flash   memory-efficient attention (Dao et al. 2022, arXiv 2205.14135): blocks of
 *           queries, only the log-sum-exp (B, a/t, T) kept, scores recomputed in
 *           backward, attention dropout's mask drawn again; so selective recomputation
 *           has nothing left to drop
 * Tensor parallelism cuts attention by heads, which needs no communication: qkv
 * (B T, 3h/t) holds the q, k, v of this rank's a/t heads, atty (B T, h/t) their output;
 * the dropout's keys name those heads by their global index (d->head0 on). */
#include "attention.h"
#include "par/internal.h"

/* This rank's heads over whole sequences, through d's dropout if p > 0. */
static struct attn_view view(const struct par_model *m, const struct par_tp *c,
			     struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct attn_view a = attention_qkv_view(D(la->atty), D(la->att), D(la->qkv), c->B, m->T,
						c->NHl, 0, c->NHl, m->cfg.hidden / m->cfg.heads);

	if (d->p > 0) {
		a.drop = d;
		a.mask = (unsigned char *)D(la->amask);
		a.attd = D(la->attd);
	}
	return a;
}

/* d qkv's q, k and v parts, or NULL in dry-run. */
static float *part(struct par_work *w, const struct par_tp *c, const struct par_model *m, int i)
{
	return D(w->dqkv) ? D(w->dqkv) + (size_t)i * (size_t)(m->cfg.hidden / c->t) : NULL;
}

static int heads_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct attn_view a = view(m, c, la, d);

	(void)w;
	attention_fwd_view(&m->k, &a);
	return 0;
}

static int heads_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct attn_view a = view(m, c, la, d);

	par_zero(&w->dqkv);
	attention_bwd_view(&m->k, &a, part(w, c, m, 0), part(w, c, m, 1), part(w, c, m, 2),
			   D(w->att_scratch), D(w->datty));
	return 0;
}

static int flash_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct attn_view a = view(m, c, la, d);

	a.att = NULL; /* la->att holds the lse */
	a.mask = NULL;
	a.attd = NULL;
	attention_flash_fwd_view(&m->k, &a, D(la->att), 0, D(w->att_scratch));
	return 0;
}

static int flash_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la, const struct attn_drop *d)
{
	struct attn_view a = view(m, c, la, d);

	a.att = NULL;
	a.mask = NULL;
	a.attd = NULL;
	par_zero(&w->dqkv);
	attention_flash_bwd_view(&m->k, &a, D(la->att), 0, part(w, c, m, 0), part(w, c, m, 1),
				 part(w, c, m, 2), D(w->att_scratch), D(w->datty));
	return 0;
}

const struct par_attn par_attn_heads = {"attention", heads_fwd, heads_bwd, heads_fwd};
const struct par_attn par_attn_flash = {"memory-efficient attention", flash_fwd, flash_bwd, NULL};
