/* par_dp: data parallelism and ZeRO's first stage over the flat gradient buffer of a
 * tensor-parallel model (par_tp.h).
 *
 * Buckets (PyTorch DDP, Li et al. 2020, arXiv 2006.15704): consecutive parameters, in the
 * order backward finishes them, are grouped until a bucket holds --bucket-size bytes. In
 * the last micro-batch of a step, a bucket's all-reduce is posted on the comm stream as
 * soon as backward has finished its last parameter, so communication overlaps the rest of
 * backward; the step waits for every bucket before the optimizer.
 *
 * ZeRO stage 1 (Rajbhandari et al. 2019, arXiv 1910.02054): each bucket is cut into dp
 * equal chunks and rank j owns chunk j of every bucket. Buckets are reduce-scattered
 * instead of all-reduced (rank j needs only chunk j's sum); a rank keeps Adam's state for
 * its chunks only, updates only them, and the updated weights are all-gathered bucket by
 * bucket: Psi elements each way, 2 Psi in all, as stage 0's all-reduce. Stage 0 keeps the
 * whole state on every rank.
 *
 * Gradient-norm clipping takes the norm of the whole model: the sum of squares of every
 * parameter this rank owns (its shards, and replicated ones on tensor-parallel rank 0),
 * summed over the tensor-parallel group. */
#ifndef PEMU_PAR_DP_H
#define PEMU_PAR_DP_H

#include <stdint.h>

#include "optim.h"
#include "par_tp.h"

struct dp_bucket {
	size_t lo, hi;        /* elements [lo, hi) of the flat buffers */
	int last;             /* position in m->order of its last parameter */
	struct coll_req *req; /* its posted all-reduce, or NULL */
	int posted;
};

struct dp_state {
	struct tp_model *m;
	struct emu_group *g; /* the data-parallel group */
	int dp, r;           /* its size, this rank */
	int zero;            /* ZeRO stage, 0 or 1 */
	int nb;
	struct dp_bucket *b;
	int *pos;          /* [np] position of each parameter in m->order */
	int armed;         /* post buckets from the backward hook (the last micro-batch) */
	int drop_bucket;   /* tests: never all-reduce bucket 0 (a broken DP) */
	size_t owned;      /* elements whose Adam state this rank keeps */
	struct tensor opt; /* Adam m then v for the owned elements */
};

/* Sets up buckets of about bucket_bytes (at wire_bytes an element) and the optimizer
 * state; installs the backward hook on m. 0 or EMU_EOOM. */
int dp_init(struct dp_state *s, struct tp_model *m, struct emu_group *g, int dp, int r, int zero,
	    uint64_t bucket_bytes, int wire_bytes);
void dp_free(struct dp_state *s);

/* Posts what is left of the buckets and waits for all of them: the gradients are then
 * summed over the data-parallel group. 0 or a negative enum emu_err. */
int dp_sync_grads(struct dp_state *s);

/* Writes the summed gradients this rank holds into the full tensors full[np] (through
 * the tensor-parallel shard map): all of them on dp rank 0 in stage 0, its chunks in
 * stage 1. For verify. */
void dp_copy_grads(const struct dp_state *s, float **full);

/* Clips by the global norm, takes an AdamW step (t, 1-based) on what this rank owns,
 * and (ZeRO-1) all-gathers the updated weights. *norm gets the norm before clipping. */
int dp_step(struct dp_state *s, const struct optim_cfg *o, int t, double *norm);

#endif
