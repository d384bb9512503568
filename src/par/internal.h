/* par/internal: what the files of par/ share and nothing outside par/ includes: short
 * names for a layer's weights and gradients, the hooks, and the strategies' tables. */
#ifndef PEMU_PAR_INTERNAL_H
#define PEMU_PAR_INTERNAL_H

#include <string.h>

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

/* The tables (par/layer.h). */
extern const struct par_attn par_attn_heads, par_attn_flash; /* par/attn.c */
extern const struct par_mlp par_mlp_dense, par_mlp_chunked;  /* par/mlp.c */
extern const struct par_mlp par_mlp_moe;                     /* par/mlp.c */
extern const struct par_region par_region_tp;                /* par/tp.c */
extern const struct par_region par_region_sp;                /* par/sp.c */

#endif
