/* par/attn: the attention of this rank's heads, a table per kind (par/layer.h):
 *   heads   causal softmax attention, the (B, a/t, T, T) scores kept for backward
 *   flash   memory-efficient attention (Dao et al. 2022, arXiv 2205.14135): blocks of
 *           queries, only the log-sum-exp (B, a/t, T) kept, scores recomputed in
 *           backward; so selective recomputation has nothing left to drop
 * Tensor parallelism cuts attention by heads, which needs no communication: qkv
 * (B T, 3h/t) holds the q, k, v of this rank's a/t heads, atty (B T, h/t) their output. */
#include "attention.h"
#include "par/internal.h"

static int heads_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la)
{
	(void)w;
	attention_fwd(&m->k, D(la->atty), D(la->att), D(la->qkv), c->B, m->T, c->NHl, 0, c->NHl,
		      m->cfg.hidden / m->cfg.heads);
	return 0;
}

static int heads_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la)
{
	par_zero(&w->dqkv);
	attention_bwd(&m->k, D(w->dqkv), D(w->att_scratch), D(w->datty), D(la->att), D(la->qkv),
		      c->B, m->T, c->NHl, 0, c->NHl, m->cfg.hidden / m->cfg.heads);
	return 0;
}

static int flash_fwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la)
{
	attention_flash_fwd(&m->k, D(la->atty), D(la->att), D(la->qkv), c->B, m->T, c->NHl, 0,
			    c->NHl, m->cfg.hidden / m->cfg.heads, D(w->att_scratch));
	return 0;
}

static int flash_bwd(struct par_model *m, const struct par_tp *c, struct par_work *w,
		     struct gpt_layer_acts *la)
{
	par_zero(&w->dqkv);
	attention_flash_bwd(&m->k, D(w->dqkv), D(w->att_scratch), D(w->datty), D(la->atty),
			    D(la->att), D(la->qkv), c->B, m->T, c->NHl, 0, c->NHl,
			    m->cfg.hidden / m->cfg.heads);
	return 0;
}

const struct par_attn par_attn_heads = {"attention", heads_fwd, heads_bwd, heads_fwd};
const struct par_attn par_attn_flash = {"memory-efficient attention", flash_fwd, flash_bwd, NULL};
