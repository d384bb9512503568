/* par/sp: sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198), its region
 * and its partial gradients; see par/sp.h. */
#include "par/sp.h"

#include "coll.h"
#include "par/internal.h"
#include "par/tp.h"

int par_sp_partial(const struct par_model *m, int i)
{
	int np = gpt_num_tensors(&m->cfg), w = (i - 2) % LP_N;

	if (!m->sp)
		return 0;
	if (i == 1 || i >= np - 2) /* wpe, lnf */
		return 1;
	return i >= 2 && (w == LP_LN1W || w == LP_LN1B || w == LP_LN2W || w == LP_LN2B);
}

/* f: every rank's rows gathered into buf (B T, C), this rank's from rows. */
static int sp_enter(struct par_model *m, const struct par_tp *c, struct par_work *w,
		    const float *rows, float *buf, size_t C)
{
	size_t n = (size_t)c->Ml * C;
	struct coll_req **req;
	int rc;

	if ((rc = par_post_slot(m, w, &req)))
		return rc;
	return req ? coll_iall_gather(m->k.d, c->g, rows, buf, n, req)
		   : coll_all_gather(m->k.d, c->g, rows, buf, n);
}

/* g: partial (B T, C) reduce-scattered into local (Ml, C), this rank's rows. */
static int sp_exit(struct par_model *m, const struct par_tp *c, struct par_work *w, float *partial,
		   float *local, size_t C, const float **out)
{
	size_t n = (size_t)c->Ml * C;
	struct coll_req **req;
	int rc;

	*out = local;
	if ((rc = par_post_slot(m, w, &req)))
		return rc;
	return req ? coll_ireduce_scatter(m->k.d, c->g, partial, local, n, COLL_SUM, req)
		   : coll_reduce_scatter(m->k.d, c->g, partial, local, n, COLL_SUM);
}

/* The residual gradient's rows (Ml, h) of every rank gathered into (B T, h). */
static int sp_rows(struct par_model *m, const struct par_tp *c, struct par_work *w)
{
	size_t n = (size_t)c->Ml * (size_t)m->cfg.hidden;
	struct coll_req **req;
	int rc;

	w->g = D(w->gfull);
	if ((rc = par_post_slot(m, w, &req)))
		return rc;
	return req ? coll_iall_gather(m->k.d, c->g, w->gsrc, D(w->gfull), n, req)
		   : coll_all_gather(m->k.d, c->g, w->gsrc, D(w->gfull), n);
}

const struct par_region par_region_sp = {"sequence-parallel all-gather / reduce-scatter", sp_enter,
					 sp_exit, sp_rows};
