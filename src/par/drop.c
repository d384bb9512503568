/* par/drop: which dropout masks a rank draws, hidden and attention. A mask is a pure
 * function of (seed, layer, site, the token's place in the run, column or head; models/
 * dropout.h), so each rank keys its own rows, batch part and heads by where they sit in
 * the serial model, and every layout draws the serial model's masks. See par/internal.h. */
#include "dropout.h"
#include "par/internal.h"
#include "ops.h"

struct dropout par_dropout(const struct par_model *m, int l, enum drop_site s)
{
	return (struct dropout){m->cfg.hidden_dropout, m->pc.seed, dropout_site(l, s)};
}

struct drop_rows par_drop_rows(const struct par_model *m, const struct par_acts *a,
			       const struct par_tp *c)
{
	if (m->pc.bug == PAR_BUG_DROPOUT_LOCAL) /* (for tests: what verify must catch) */
		return (struct drop_rows){a->seq0, m->T, m->cfg.seq_len, 0, NULL};
	return (struct drop_rows){a->seq0 + (uint64_t)c->part * (uint64_t)c->B, m->T,
				  m->cfg.seq_len, c->row0, m->pos};
}

void par_drop_add(struct par_model *m, const struct par_acts *a, const struct par_tp *c, int l,
		  enum drop_site s, float *out, struct tensor *mask, const float *res,
		  const float *branch)
{
	struct dropout d = par_dropout(m, l, s);
	struct drop_rows r = par_drop_rows(m, a, c);

	if (d.p > 0)
		dropout_add_fwd(&m->k, out, (unsigned char *)D(*mask), res, branch, &d, &r, c->Ml,
				m->cfg.hidden);
	else
		residual_fwd(&m->k, out, res, branch, (size_t)c->Ml * m->cfg.hidden);
}

const float *par_drop_grad(struct par_model *m, struct par_work *w, const struct par_tp *c,
			   const struct tensor *mask)
{
	float p = m->cfg.hidden_dropout;

	if (p <= 0)
		return D(w->dres);
	dropout_bwd(&m->k, D(w->ddrop), D(w->dres), (const unsigned char *)D(*mask), p,
		    (size_t)c->Ml * m->cfg.hidden);
	return D(w->ddrop);
}

struct attn_drop par_attn_drop(const struct par_model *m, const struct par_acts *a,
			       const struct par_tp *c, int l)
{
	struct attn_drop d = {.p = m->cfg.attention_dropout,
			      .seed = m->pc.seed,
			      .layer = l,
			      .seq0 = a->seq0 + (uint64_t)c->part * (uint64_t)c->B,
			      .S = m->cfg.seq_len,
			      .head0 = c->r * c->NHl};

	if (m->pc.bug == PAR_BUG_ATTN_DROPOUT_LOCAL) /* (for tests: the rank's own heads) */
		d.head0 = 0;
	return d;
}
