/* par/dp: data parallelism and ZeRO's three stages over the flat buffers of a
 * tensor-parallel model (par/model.h).
 *
 * Buckets: consecutive parameters, in the order backward finishes them, each bucket
 * reduced by one collective; expert and dense parameters never share one. As Megatron-LM
 * cuts them (megatron/core/distributed/distributed_data_parallel.py; its 2021 DDP reduced
 * each gradient buffer whole too): without an overlap (--overlap-grad-reduce, or
 * --overlap-param-gather, which Megatron allows only with it) one bucket a model chunk;
 * with one, the first chunk of the first pipeline stage in buckets of max(40M, 1M x dp x
 * cp) parameters, or --ddp-bucket-size's (--bucket-size's bytes at the weights' width),
 * every other chunk and every chunk of the other stages one bucket ("not on the critical
 * path"); a pipeline's end stage's tied embedding a bucket of its own (Megatron's
 * distributed optimizer's shared embedding). ZeRO-2 cuts every chunk, 25 MB by default (about
 * PyTorch DDP's 25 MiB, Li et al. 2020, arXiv 2006.15704). In the last micro-batch of a step, a
 * bucket's all-reduce is posted on the comm stream as soon as backward has finished its last
 * parameter, so communication overlaps the rest of backward; the step waits for every bucket before
 * the optimizer.
 *
 * ZeRO stage 1 (Rajbhandari et al. 2019, arXiv 1910.02054): each bucket is cut into dp
 * equal chunks and rank j owns chunk j of every bucket. Buckets are reduce-scattered
 * instead of all-reduced (rank j needs only chunk j's sum); a rank keeps Adam's state for
 * its chunks only, updates only them, and the updated weights are all-gathered bucket by
 * bucket: Psi elements each way, 2 Psi in all, as stage 0's all-reduce. Stage 0 keeps the
 * whole state on every rank.
 *
 * ZeRO stage 2 also shards the gradients: the device keeps only its chunks (2 Psi / N
 * bytes in bf16). Every micro-batch reduce-scatters its buckets as backward finishes
 * them, adding into the chunks this rank owns. A bucket is a transient buffer (charged
 * as comm memory) from the moment backward starts writing it until its reduce-scatter
 * is done; at most two are live besides the one holding wte, which the tied output layer
 * writes first and the embedding last. The reduce-scatter after bucket k is posted waits
 * for bucket k - 1's, as a double-buffered implementation would.
 *
 * ZeRO stage 3 shards the weights too (16 Psi / N in all). Its buckets are par/model.h's
 * units (a layer, the final LayerNorm, the embeddings), so that one cut serves weights,
 * gradients and optimizer state alike, and --bucket-size does not apply. Before a unit
 * is read it is all-gathered into a transient buffer (comm memory); the next unit's
 * gather is posted as soon as this one is in use (prefetch), and a unit is freed as soon
 * as the next one is in use, except across the tied output layer, read at the end of
 * forward and again at the start of backward. Each unit is thus gathered twice per
 * micro-batch (the embeddings' backward reads no weights) and reduce-scattered once:
 * 3 Psi moved per step with one micro-batch. Freed shards are filled with NaN in execute
 * mode, so a read of weights that were not gathered would show in verify.
 *
 * With dp = 1 every stage keeps everything: stages 2 and 3 run as stage 1.
 *
 * Under expert parallelism (par/ep.h) the experts' parameters are reduced over the
 * expert-data-parallel group instead: a bucket holds parameters of one kind, and is
 * reduced, sharded (ZeRO-1) and gathered over its own group.
 *
 * Gradient-norm clipping takes the norm of the whole model: the sum of squares of every
 * parameter this rank owns (its shards, and replicated ones on tensor-parallel rank 0),
 * summed over the tensor-parallel group. */
#ifndef PEMU_PAR_DP_H
#define PEMU_PAR_DP_H

#include <stdint.h>

#include "optim.h"
#include "par/model.h"

/* Megatron-LM's default bucket, max(40M, 1M x dp x cp) parameters, and ZeRO-2's, 25 MB
 * (par_dp_init) */
#define PAR_DP_BUCKET_PARAMS 40000000ULL
#define PAR_DP_BUCKET_PER_DP 1000000ULL
#define PAR_DP_BUCKET_BYTES  25000000ULL

struct par_dp_bucket {
	size_t lo, hi;        /* elements [lo, hi) of the flat buffers */
	struct emu_group *g;  /* the group it is reduced over: the data-parallel one, or for
			       * experts under expert parallelism the expert-data-parallel one */
	int n, r;             /* its size, this rank's place */
	int last;             /* position in m->order of its last parameter */
	int left;             /* a pipeline's: its parameters the armed backward has yet
			       * to finish (par_dp_state.pipelined) */
	struct coll_req *req; /* its posted all-reduce (reduce-scatter), or NULL */
	int posted;
	struct mem_block *gbuf;  /* ZeRO 2-3: its gradients, while live */
	struct mem_block *wbuf;  /* ZeRO 3: its gathered weights, while live */
	struct coll_req *gather; /* ZeRO 3: their posted all-gather, or NULL; ZeRO 1-2 with
				  * overlap_param_gather: the updated weights' */
	int owed;                /* ZeRO 1-2 with overlap_param_gather: its updated
				  * weights are still to be gathered */
	size_t partial_max[2];   /* ZeRO: the most gradient elements partial over tp, and
				  * over the merge group, that a rank of g finds in its
				  * chunk, once partial_counted */
	int partial_counted;
};

struct par_dp_state {
	struct par_model *m;
	struct emu_group *g;  /* the data-parallel group */
	struct emu_group *pg; /* the pipeline group (the norm sums over it), or NULL */
	int dp, r;            /* its size, this rank */
	int zero;             /* ZeRO stage, 0 to 3 (1 when it was more and dp = 1) */
	int nb;
	struct par_dp_bucket *b;
	int *pos;               /* [np] position of each parameter in m->order */
	int armed;              /* post buckets from the backward hook (the last micro-batch) */
	int pipelined;          /* a pipeline stage: its blocks' last backwards come in the
				 * schedule's order, not m->order's, so the armed hook posts
				 * a bucket once each of its parameters has been told
				 * (par_model.hook), which a stage may never do for some
				 * (HelixPipe's units): those go at par_dp_sync_grads */
	int *bucket_of;         /* pipelined: [np] the bucket of each parameter */
	int tied_after;         /* a pipeline stage with the tied embedding: its gradient
				 * is summed over the embedding group after the schedule
				 * (or, HelixPipe's both ends on one stage, the output
				 * layer adds to it untold), so the hook leaves the
				 * buckets holding it to par_dp_sync_grads */
	size_t owned;           /* elements whose Adam state this rank keeps */
	struct tensor opt;      /* Adam m then v for the owned elements */
	int *unit_bucket;       /* ZeRO 3: [L + 2] the first bucket of each unit */
	int *unit_nb;           /* ZeRO 3: [L + 2] its buckets (more than one: by group) */
	int *seq, nseq;         /* ZeRO 3: the units a micro-batch reads, in order (par/model.h) */
	int cur;                /* ZeRO 3: reads so far in this micro-batch */
	int *unit_lo, *unit_hi; /* ZeRO 1-2 with overlap_param_gather: [L + 2] the buckets
				 * k, unit_lo[u] <= k <= unit_hi[u], holding unit u's
				 * parameters (unit_lo > unit_hi: none) */
};

/* The most parameters a gradient bucket holds in the first chunk of the first pipeline
 * stage, as above, or 0 for one bucket a chunk (and ZeRO-3, whose buckets are its units):
 * zero the stage, overlap whether an overlap asks for buckets, params and bytes the
 * user's sizes (or 0), dp the data-parallel degree times the context-parallel one, wb the
 * weights' width in bytes. */
uint64_t par_dp_bucket_params(int zero, int overlap, uint64_t params, uint64_t bytes, int dp,
			      unsigned wb);

/* Sets up data parallelism over m as m's configuration says (ZeRO stage, pad = the
 * data-parallel degree, buckets as above; units in stage 3)
 * among g's data-parallel group, with the optimizer state; installs the hooks on m.
 * 0 or EMU_EOOM. */
int par_dp_init(struct par_dp_state *s, struct par_model *m, const struct par_groups *g);
void par_dp_free(struct par_dp_state *s);

/* After each micro-batch's backward: stages 2 and 3 finish reducing its gradients into
 * the owned chunks (and stage 3 frees the last unit it read); nothing otherwise. */
int par_dp_after_backward(struct par_dp_state *s);

/* After the last micro-batch: posts what is left of the buckets and waits for all of
 * them, so the gradients this rank holds are summed over the data-parallel group. 0 or
 * a negative enum emu_err. */
int par_dp_sync_grads(struct par_dp_state *s);

/* Writes the summed gradients this rank holds into the full tensors full[np] (through
 * the tensor-parallel shard map): all of them on dp rank 0 in stage 0, its chunks in
 * stage 1. For verify. */
void par_dp_copy_grads(const struct par_dp_state *s, float **full);
/* The same for the weights: all of them on dp rank 0, its chunks in stage 3. */
void par_dp_copy_weights(const struct par_dp_state *s, float **full);
/* The same for Adam's state, m into m[np] and v into v[np]: all of it on dp rank 0 in
 * stage 0, its chunks in stages 1-3. For checkpoints (run/ckpt.h). */
void par_dp_copy_state(const struct par_dp_state *s, float **m, float **v);
/* The other way: the state this rank keeps, read from the full tensors m and v (every
 * parameter it holds, not only those it owns: the tied embedding's second copy, the
 * replicated ones of every tp rank). With the weights from par_source.full, a rank
 * resumes where a checkpoint left off. */
void par_dp_load_state(struct par_dp_state *s, float **m, float **v);

/* Clips by the global norm, takes an AdamW step (t, 1-based) on what this rank owns,
 * and (stages 1 and 2) all-gathers the updated weights. *norm gets the norm before
 * clipping. With overlap_param_gather (Megatron-LM's --overlap-param-gather) the
 * all-gathers are left owed: the use hook posts a unit's buckets as the next forward
 * reaches it, and the next bucket's with them (one ahead, in forward order), and waits
 * for the unit's own, so that each all-gather overlaps the layers before its own. */
int par_dp_step(struct par_dp_state *s, const struct optim_cfg *o, int t, double *norm);

/* Where this rank's chunk of bucket b starts, and its size. */
static inline size_t par_dp_chunk(const struct par_dp_bucket *b, size_t *lo)
{
	size_t chunk = (b->hi - b->lo) / (size_t)b->n;

	*lo = b->lo + (size_t)b->r * chunk;
	return chunk;
}

/* par/dp_gather.c, for par_dp_step and par_dp_init: posts the all-gather of bucket b's
 * updated weights (each rank's chunk to every rank) on the second comm stream into *req;
 * with overlap_param_gather, finds the buckets each unit's parameters are in (from the
 * first to the last: a unit's parameters are contiguous in flat order) and installs the
 * use hook that gathers them. */
int par_dp_post_gather(struct par_dp_state *s, struct par_dp_bucket *b, struct coll_req **req);
void par_dp_unit_ranges(struct par_dp_state *s);

/* For par/dp_copy.c and par_dp_step: calls fn(ctx, lo, hi, st) for each flat range
 * whose summed gradient this rank holds, and of which it keeps Adam's state from st of
 * s->opt's halves on: everything in stage 0, its chunk of every bucket in stages 1-3
 * (par_dp_step's order). */
void par_dp_owned_ranges(const struct par_dp_state *s, void (*fn)(void *, size_t, size_t, size_t),
			 void *ctx);

/* Gathers (posts and waits for) every owed bucket: before anything reads the weights
 * outside a forward (a checkpoint, verify's copy, the end of the run). 0 or a negative
 * enum emu_err. */
int par_dp_gather_owed(struct par_dp_state *s);

#endif
