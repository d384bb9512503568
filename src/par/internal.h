/* par/internal: what the files of par/ share and nothing outside par/ includes: short
 * names for a layer's weights and gradients, the hooks, and the strategies' tables. */
#ifndef PEMU_PAR_INTERNAL_H
#define PEMU_PAR_INTERNAL_H

#include <string.h>

#include "dropout.h"
#include "par/layer.h"

#define D(t)        ((t).data)
#define PW(m, l, i) ((m)->p[2 + (l)*LP_N + (i)].w)
#define PG(m, l, i) ((m)->p[2 + (l)*LP_N + (i)].g)

/* Clears t (nothing in dry-run). */
static inline void par_zero(struct tensor *t)
{
	if (t->data)
		memset(t->data, 0, t->n * sizeof *t->data);
}

/* Offset rows into a (rows, n) buffer, NULL in dry-run. */
static inline float *par_rows_at(float *p, size_t row, size_t n)
{
	return p ? p + row * n : NULL;
}

/* About to read unit u's weights (the use hook). */
static inline int par_use(struct par_model *m, int u)
{
	return m->use && !(m->quiet & PAR_QUIET_USE) ? m->use(m->hook_ctx, u) : 0;
}

/* Parameter i's gradient is final (the grad hook). */
static inline int par_ready(struct par_model *m, int i)
{
	return m->hook && !(m->quiet & PAR_QUIET_READY) ? m->hook(m->hook_ctx, i) : 0;
}

/* A linear layer's weight gradient from its output gradient dy (M, N) and input x
 * (M, K): now, or (weight 0: the input pass of a split backward) dy kept in st for the
 * weight pass (par/layer.c). */
int par_weight_grad(struct par_model *m, int now, struct tensor *st, const char *name, float *dw,
		    float *db, const float *dy, const float *x, int M, int K, int N);
/* The same for a column-parallel layer, whose input gradient's collective follows: with
 * now, the GEMM is left in w for the region's exit to run under that collective
 * (par/layer.c, Megatron's order). */
int par_weight_grad_late(struct par_model *m, struct par_work *w, int now, struct tensor *st,
			 const char *name, float *dw, float *db, const float *dy, const float *x,
			 int M, int K, int N);

/* Hidden dropout (models/dropout.h, par/drop.c). par_drop_rows: which tokens the rows
 * [row0, row0 + Ml) of cut c are in a's batch (a part's sequences after the parts
 * before it). par_drop_add: out = res + branch through site s's dropout of layer l
 * (plain residual_fwd with p = 0), the mask into mask. par_drop_grad: the branch's
 * gradient rows, w->dres through mask into w->ddrop (dres itself with p = 0). */
struct drop_rows par_drop_rows(const struct par_model *m, const struct par_acts *a,
			       const struct par_tp *c);
void par_drop_add(struct par_model *m, const struct par_acts *a, const struct par_tp *c, int l,
		  enum drop_site s, float *out, struct tensor *mask, const float *res,
		  const float *branch);
const float *par_drop_grad(struct par_model *m, struct par_work *w, const struct par_tp *c,
			   const struct tensor *mask);
struct dropout par_dropout(const struct par_model *m, int l, enum drop_site s);
/* Attention dropout's keys of layer l for a's batch on cut c: the part's sequences, this
 * rank's first head among the layer's (c->r of c->t ranks, c->NHl heads each), the
 * positions left to the attention (NULL: a whole sequence's). */
struct attn_drop par_attn_drop(const struct par_model *m, const struct par_acts *a,
			       const struct par_tp *c, int l);

/* A MoE layer's routing of x (its ln2 rows) with router weights wr into a: the model's
 * own (moe_route), or where the micro-batch's tokens are spread over ranks (cp, or each
 * rank's own rows over tp x cp) the micro-batch's, its counts exchanged over that group
 * (par/moe_route.c). 0 or the collective's error. */
int par_moe_route(struct par_model *m, const struct par_tp *c, struct par_work *w,
		  struct moe_acts *a, const float *x, const float *wr);
/* Under tp the router is replicated and each rank's gradient of it is partial (partial
 * expert outputs, or, its own rows routed, its own tokens; par_moe_aux_scale says who
 * adds the aux loss's): the router gradient of a micro-batch, written into w->drouter,
 * is summed over the group here before it joins the accumulated one (nothing with t = 1,
 * where it went there). */
int par_moe_router_sum(struct par_model *m, const struct par_tp *c, struct par_work *w, int l);
/* The scale of the aux loss's gradient in a MoE layer's backward of scale: the rank's
 * whole share when it routes its own tokens, rank 0's alone when the tokens are the tp
 * group's, undoing the device loop's division by cp (par/moe_route.c). */
float par_moe_aux_scale(const struct par_model *m, const struct par_tp *c, float scale);
/* The floats of the routing's counts, par_work.route_cnt (route_n > 1). */
size_t par_moe_route_floats(const struct par_model *m);

/* The tables (par/layer.h). */
extern const struct par_attn par_attn_heads, par_attn_flash; /* par/attn.c */
extern const struct par_mlp par_mlp_dense, par_mlp_chunked;  /* par/mlp.c */
extern const struct par_mlp par_mlp_moe;                     /* par/mlp.c */
extern const struct par_region par_region_tp;                /* par/tp.c */
extern const struct par_region par_region_sp;                /* par/sp.c */
extern const struct par_region par_region_rows;              /* par/ep.c */

#endif
