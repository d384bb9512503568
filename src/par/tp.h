/* par/tp: Megatron-LM's tensor parallelism (Shoeybi et al. 2019, arXiv 1909.08053,
 * section 3) for the GPT of models/, as the shard rule of every parameter, the region
 * of the layer pieces (par/layer.h) and the vocabulary-parallel ends:
 *
 *   QKV and fc         column-parallel: rank r holds the rows of its heads / its f/t
 *                      units: (3h/t, h) as q, k, v blocks cut alike; (f/t, h)
 *   proj and fc2       row-parallel: rank r holds the matching columns, (h, h/t) and
 *                      (h, f/t); the partial outputs (B T, h) are summed by the region's
 *                      exit, an all-reduce (g; its conjugate f is the identity forward
 *                      and the all-reduce backward): 2 forward and 2 backward a layer
 *   wte                vocabulary-parallel: rank r holds rows [r V/t, (r+1) V/t); the
 *                      embedding sums masked lookups, the cross-entropy is computed
 *                      from per-shard maxima and sums of exponentials (Megatron's
 *                      vocab-parallel cross-entropy)
 *   MoE experts        each expert's MLP cut like the dense one; the router replicated
 *   LayerNorms, wpe    replicated
 *
 * A row-parallel bias is added once: rank 0 holds it, the others hold zeros they never
 * update, so the all-reduce sums the bias in with the partial products. With t = 1 this
 * is the serial model, kernel for kernel (bitwise). */
#ifndef PEMU_PAR_TP_H
#define PEMU_PAR_TP_H

#include <stddef.h>

#include "par/model.h"

/* Why the model cannot be cut tp ways (heads, ffn, vocabulary), one line, or 0. */
int par_tp_check(const struct gpt_config *cfg, int tp, char *err, size_t n);

/* How the serial model's tensor i is cut on m's rank, held or not by m's part, into p. */
void par_tp_describe(const struct par_model *m, int i, struct par_param *p);

/* Copies between parameter i's local shard (local, m->p[i].n) and the full tensor (full,
 * gpt_tensor_numel): to_full 1 writes this rank's part of full, 0 reads it into local. */
void par_tp_shard_copy(const struct par_model *m, int i, float *full, float *local, int to_full);
/* The same for the local elements [lo, hi) of the shard only. */
void par_tp_shard_copy_range(const struct par_model *m, int i, float *full, float *local, size_t lo,
			     size_t hi, int to_full);
/* The same with win holding local elements [lo, hi) alone (win[0] is element lo): a
 * window of a buffer laid out as the flat buffers, such as ZeRO's optimizer shard. */
void par_tp_shard_copy_window(const struct par_model *m, int i, float *full, float *win, size_t lo,
			      size_t hi, int to_full);

/* Sums buf (n) over the tensor-parallel group (nothing to do alone). */
int par_tp_sum(struct par_model *m, float *buf, size_t n);

/* Sums the gradients this rank holds only part of (par_param.partial), within the flat
 * range [lo, hi): sequence parallelism's over the tp group, the first layers' parts under
 * mixed degrees over the merge group. Called once the data-parallel sync has summed them
 * over replicas; the order of the sums does not matter. Nothing if no gradient is. */
int par_tp_sum_partials(struct par_model *m, size_t lo, size_t hi);

/* The same under ZeRO, for this rank's chunk of a bucket: the bucket's elements from blo
 * are cut into n chunks of chunk, this rank's the r-th. Each kind of partial gradient goes
 * in one all-reduce, coalesced into a buffer (as Megatron coalesces its LayerNorm
 * gradients) as long as the most any of the n ranks finds in its chunk, zero-padded
 * (max[2], counted once: *counted): every data-parallel rank posts the same collectives,
 * so replicas stay alike (run/fold.h). 0 or an emu error. */
int par_tp_sum_chunk_partials(struct par_model *m, size_t blo, size_t chunk, int n, int r,
			      size_t max[2], int *counted);

/* The vocabulary-parallel ends: the embedding of a->tokens into a->enc (this rank's
 * rows), its backward from w's rows into wte and wpe, and the tied output layer of in
 * (B T, h) into a->probs (B T, V/t), this rank's vocabulary shard, and its cross-entropy
 * into a->losses, a->probs left as probabilities. */
int par_tp_embed_fwd(struct par_model *m, struct par_work *w, struct par_acts *a);
int par_tp_embed_bwd(struct par_model *m, struct par_work *w, struct par_acts *a);
int par_tp_logits_loss(struct par_model *m, struct par_work *w, struct par_acts *a,
		       const float *in);

#endif
