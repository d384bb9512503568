/* par/recompute: activation recomputation (Korthikanti et al. 2022, arXiv 2205.05198,
 * section 5; Chen et al. 2016, arXiv 1604.06174 for the full form). Between a layer's
 * forward and its backward:
 *   none       everything the layer's backward reads is kept
 *   selective  all but the attention scores (B, a/t, T, T), which the attention's forward
 *              computes again in backward (memory-efficient attention keeps none anyway)
 *   full       only the layer's output, the next layer's input: the whole layer's forward
 *              runs again in backward, its tensor-parallel collectives included
 * The MoE layers' routing bookkeeping (host memory) stays. HelixPipe's own form, without
 * attention, is pipe/helix.c's. */
#ifndef PEMU_PAR_RECOMPUTE_H
#define PEMU_PAR_RECOMPUTE_H

#include "par/model.h"

/* After layer l's forward (or its last use in backward): gives back what the mode does
 * not keep. */
void par_recompute_drop(struct par_model *m, struct par_acts *a, int l);
/* Before layer l's forward or backward: allocates again what drop gave back (nothing
 * without recomputation). 0 or EMU_EOOM. */
int par_recompute_regrow(struct par_model *m, struct par_acts *a, int l);
/* Before layer l's backward, once regrown: runs again what made what was given back. */
int par_recompute_bwd(struct par_model *m, struct par_work *w, struct par_acts *a, int l);

#endif
