/* moe_internal: what the files of the MoE block (models/moe*.c) share and nothing else
 * includes: the experts a block runs, pointer offsets that keep dry-run's NULL, and the
 * two functions one file calls in another (moe_fwd's routing, moe_bwd's compact path). */
#ifndef MODELS_MOE_INTERNAL_H
#define MODELS_MOE_INTERNAL_H

#include "moe.h"

/* The experts the block runs. */
static inline int moe_held(const struct moe_shape *s)
{
	return s->El ? s->El : s->E;
}

/* p + n, or NULL in dry-run (no arithmetic on a null pointer). */
static inline float *moe_off(float *p, size_t n)
{
	return p ? p + n : NULL;
}

static inline const float *moe_coff(const float *p, size_t n)
{
	return p ? p + n : NULL;
}

/* moe_router.c: top-k and capacity on the router's probabilities of the whole
 * micro-batch (execute mode only): each token's choices, the slot each got (or -1), the
 * slots' tokens and f_e. */
void moe_route_local(const struct moe_shape *s, struct moe_acts *a);

/* moe_permute.c: moe_bwd on compact rows (moe_compact_fwd's forward): unpermute's
 * backward, each held expert's, permute's, then the router's. */
void moe_compact_bwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
		     struct moe_scratch *sc, float *dx, const float *dout, float aux_scale,
		     const float *x, const float *wr, const float *w1, const float *w2, float *dwr,
		     float *dw1, float *db1, float *dw2, float *db2);

#endif
