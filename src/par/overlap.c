/* par/overlap: Oases's overlapped tensor parallelism (Li et al. 2023, arXiv 2305.16121):
 * two sub-batches through the layer pieces, interleaved at their collectives; see
 * par/overlap.h. */
#include "par/overlap.h"

#include "par/internal.h"
#include "par/recompute.h"
#include "trace.h"

/* One sub-batch's place in its part of the model. */
struct lane {
	int s;              /* which sub-batch */
	struct par_acts *a; /* its activations */
	struct par_work *w; /* its scratch */
	int l, k;           /* its layer and the next step in it */
	float aux;          /* its aux loss before a full recomputation */
};

/* Forward of lane ln's pieces from where it is, until one posts or the part ends. */
static int fwd_run(struct par_model *m, struct lane *ln)
{
	while (ln->l < ln->a->l1) {
		int l = ln->l, rc;

		if (ln->k == 0 &&
		    ((rc = par_use(m, l)) || (rc = par_recompute_regrow(m, ln->a, l))))
			return rc;
		if ((rc = par_work_wait(m, ln->w)) ||
		    (rc = par_layer_fwd(m, ln->w, ln->a, l, (enum par_piece)ln->k)))
			return rc;
		if (++ln->k == PAR_NPIECES) {
			par_recompute_drop(m, ln->a, l);
			ln->l++;
			ln->k = 0;
		}
		if (ln->w->req)
			return 0;
	}
	return 0;
}

/* Backward of lane ln's layers from where it is, until a piece posts or the part ends.
 * A layer's steps: PAR_NPIECES of recomputation (the forward pieces again under full
 * recomputation, with their collectives; else the policy's all at step 0), then its
 * backward pieces, out first. */
static int bwd_run(struct par_model *m, struct lane *ln, float scale, int weight)
{
	while (ln->l >= ln->a->l0) {
		int l = ln->l, k = ln->k, rc = 0;

		if (k == 0) {
			if ((rc = par_use(m, l)) || (rc = par_recompute_regrow(m, ln->a, l)))
				return rc;
			ln->aux = ln->a->aux_loss; /* the loss is the first forward's */
		}
		if ((rc = par_work_wait(m, ln->w)))
			return rc;
		if (k >= PAR_NPIECES)
			rc = par_layer_bwd(m, ln->w, ln->a, l,
					   (enum par_piece)(2 * PAR_NPIECES - 1 - k), scale,
					   weight);
		else if (m->pc.recompute == PAR_RECOMPUTE_FULL) {
			m->rerun = 1;
			rc = par_layer_fwd(m, ln->w, ln->a, l, (enum par_piece)k);
			m->rerun = 0;
		} else if (k == 0)
			rc = par_recompute_bwd(m, ln->w, ln->a, l);
		if (rc)
			return rc;
		if (k == PAR_NPIECES - 1)
			ln->a->aux_loss = ln->aux;
		if (++ln->k == 2 * PAR_NPIECES) {
			for (int i = 0; weight && i < LP_N; i++)
				if ((rc = par_ready(m, 2 + l * LP_N + i)))
					return rc;
			if (weight)
				par_recompute_drop(m, ln->a, l);
			ln->l--;
			ln->k = 0;
		}
		if (ln->w->req)
			return 0;
	}
	return 0;
}

static int done(const struct lane *ln, int bwd)
{
	return bwd ? ln->l < ln->a->l0 : ln->l >= ln->a->l1;
}

/* Sub-batch s runs: the hooks it does not tell (only the first reads a unit first,
 * only the last finishes a gradient) are quiet, and its ops go in trace lane s + 1. */
static void enter(struct par_model *m, int s)
{
	m->quiet = (s > 0 ? PAR_QUIET_USE : 0u) | (s < m->nsub - 1 ? PAR_QUIET_READY : 0u);
	trace_set_lane(m->k.d, s + 1);
}

static void leave(struct par_model *m)
{
	m->quiet = 0;
	trace_set_lane(m->k.d, 0);
}

/* Runs the lanes in turn, each to its next posted collective, until all are through the
 * part, then waits for what is still on the wire. */
static int interleave(struct par_model *m, struct lane *ln, int bwd, float scale, int weight)
{
	int rc = 0, left = m->nsub;

	for (int s = 0; s < m->nsub; s++)
		ln[s].w->post = 1;
	while (!rc && left)
		for (int s = 0; s < m->nsub && !rc; s++) {
			if (done(&ln[s], bwd))
				continue;
			enter(m, s);
			rc = bwd ? bwd_run(m, &ln[s], scale, weight) : fwd_run(m, &ln[s]);
			leave(m);
			left -= done(&ln[s], bwd);
		}
	for (int s = 0; s < m->nsub; s++) {
		int rc2 = par_work_wait(m, ln[s].w);

		rc = rc ? rc : rc2;
		ln[s].w->post = 0;
	}
	return rc;
}

static void lanes_init(struct par_model *m, struct par_acts *a, struct lane *ln, int bwd)
{
	for (int s = 0; s < m->nsub; s++)
		ln[s] = (struct lane){s, par_sub(a, s), &m->work[s], bwd ? a->l1 - 1 : a->l0, 0, 0};
}

int par_overlap_forward(struct par_model *m, struct par_acts *a, const int *tokens,
			const int *targets, float *loss)
{
	int head = a->l1 == m->cfg.num_layers, rows = m->B * m->T, rc;
	struct lane ln[PAR_NSUB];

	*loss = 0;
	lanes_init(m, a, ln, 0);
	for (int s = 0; s < m->nsub; s++) {
		struct par_acts *sub = ln[s].a;

		sub->aux_loss = 0;
		if (a->l0 == 0 || head)
			par_set_batch(m, sub, tokens + (size_t)s * rows,
				      targets + (size_t)s * rows);
		enter(m, s);
		rc = a->l0 == 0 ? par_embed_fwd(m, ln[s].w, sub) : 0;
		leave(m);
		if (rc)
			return rc;
	}
	if ((rc = interleave(m, ln, 0, 0, 0)))
		return rc;
	for (int s = 0; s < m->nsub; s++) {
		struct par_acts *sub = ln[s].a;

		enter(m, s);
		rc = head ? par_head_fwd(m, ln[s].w, sub, par_layer_input(sub, a->l1)) : 0;
		leave(m);
		if (rc)
			return rc;
		*loss += par_part_loss(m, sub, head) / (float)m->nsub;
	}
	return 0;
}

int par_overlap_backward(struct par_model *m, struct par_acts *a, float scale, int weight)
{
	int head = a->l1 == m->cfg.num_layers, rc;
	float sc = scale / (float)m->nsub;
	size_t nx = (size_t)m->Ml * (size_t)m->cfg.hidden;
	struct lane ln[PAR_NSUB];

	lanes_init(m, a, ln, 1);
	if (head && (rc = par_ready(m, -1)))
		return rc;
	for (int s = 0; s < m->nsub; s++) {
		struct par_acts *sub = ln[s].a;

		rc = 0;
		enter(m, s);
		if (head)
			rc = par_head_bwd(m, ln[s].w, sub, par_layer_input(sub, a->l1), sc);
		else if (D(ln[s].w->dres))
			memcpy(D(ln[s].w->dres), D(sub->dout), nx * sizeof(float));
		leave(m);
		if (rc)
			return rc;
	}
	if ((rc = interleave(m, ln, 1, sc, weight)) || a->l0 > 0)
		return rc;
	for (int s = 0; s < m->nsub && !rc; s++) {
		enter(m, s);
		rc = par_embed_bwd(m, ln[s].w, ln[s].a);
		leave(m);
	}
	return rc;
}
