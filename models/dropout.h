/* dropout: Megatron's hidden dropout (the embeddings' output, and each branch of a layer
 * before its residual add), with masks that every layout draws alike.
 *
 * Whether element j of a token is kept is a pure function of (seed, site, the token's
 * global index, j): the counter-based generator of rng.h, keyed so that the serial model
 * and every parallel layout (a tensor-parallel rank holding all rows or its
 * sequence-parallel share, a context-parallel rank its positions, a pipeline stage its
 * layers, a data-parallel replica its micro-batches) keep the same elements. This is what
 * Megatron's model-parallel RNG tracker arranges with seeded generator states; here no
 * state is carried, so nothing depends on the order in which ranks run.
 *
 * A token's global index is its sequence's place in the run's stream of sequences (the
 * data's batch index times the micro-batch size, plus its row) times the whole sequence
 * length, plus its position. A site is (layer, which dropout); the seed is the run's.
 * Kept elements are scaled by 1 / (1 - p) (inverted dropout), dropped ones are 0. The
 * mask is kept between forward and backward as one byte an element, as a framework keeps
 * it (charged as activation memory). */
#ifndef MODELS_DROPOUT_H
#define MODELS_DROPOUT_H

#include <stdint.h>

#include "tensor.h"

/* after the embeddings; each branch; the attention probabilities (attention dropout) */
enum drop_site { DROP_EMBED, DROP_ATTN, DROP_MLP, DROP_PROBS };

/* Which tokens M rows are: row i is local row row0 + i of B sequences of T positions each,
 * the first sequence the run's seq0-th; position t of a sequence is pos[t] of the whole
 * sequence of S (pos NULL: t). */
struct drop_rows {
	uint64_t seq0;
	int T, S, row0;
	const int *pos;
};

struct dropout {
	float p;       /* the probability of dropping; 0: no dropout */
	uint64_t seed; /* the run's */
	uint64_t site; /* dropout_site */
};

static inline uint64_t dropout_site(int layer, enum drop_site s)
{
	return ((uint64_t)(layer + 1) << 2) | (uint64_t)s; /* the embeddings' layer: -1 */
}

/* out (M, C) = res + mask (branch): the fused bias-dropout-add before a residual; mask
 * (M C bytes) records it. */
void dropout_add_fwd(const struct kctx *k, float *out, unsigned char *mask, const float *res,
		     const float *branch, const struct dropout *d, const struct drop_rows *r, int M,
		     int C);
/* x (M, C) = mask (x) in place (the embeddings). */
void dropout_fwd(const struct kctx *k, float *x, unsigned char *mask, const struct dropout *d,
		 const struct drop_rows *r, int M, int C);
/* dx (n) = mask (dy): dy's elements kept in forward, scaled; dx may be dy. */
void dropout_bwd(const struct kctx *k, float *dx, const float *dy, const unsigned char *mask,
		 float p, size_t n);

/* 1 if element j of row i is kept (the generator itself, for tests). */
int dropout_keep(const struct dropout *d, const struct drop_rows *r, int i, int C, int j);

/* Attention dropout (Megatron's --attention-dropout): after the causal softmax P (B,
 * heads, Tq, Tk), P' = mask (x) P / (1 - p), and the attention's output is P' V. Whether
 * the probability of query q for key k of head h of sequence n in layer l is kept is a
 * pure function of (seed, l, n, the GLOBAL h, the global positions of q and of k), so
 * that a tensor-parallel rank's heads, a context-parallel rank's queries and each block
 * of keys of its ring, a Ulysses rank's head group, a pipeline stage's layers and a
 * recomputed attention all draw the serial model's masks. A view of attention
 * (attention.h) says where its rows and heads are in the whole through attn_drop. */
struct attn_drop {
	float p;         /* the probability of dropping; 0: no dropout */
	uint64_t seed;   /* the run's */
	int layer;       /* the global layer */
	uint64_t seq0;   /* the view's first sequence in the run's stream of sequences */
	int S;           /* the whole sequence: positions are in [0, S) */
	int head0;       /* the global index of the view's head 0 (head h is head0 + h) */
	const int *qpos; /* [Tq]: the global positions of the view's queries; NULL: i */
	const int *kpos; /* [Tk]: those of its keys; NULL: j */
};

/* Sequence b's, head h's key: every probability of that (sequence, head) is drawn from
 * it (attn_drop_keep). */
uint64_t attn_drop_key(const struct attn_drop *d, int b, int h);
/* 1 if the probability of the view's query i for its key j is kept. */
int attn_drop_keep(const struct attn_drop *d, uint64_t key, int i, int j);
/* Row i of n probabilities (keys [0, n)) through the mask in place: kept ones scaled by
 * 1 / (1 - p), dropped ones 0; mask (n bytes, or NULL) records it. The flash kernels
 * call it on the rows they hold, forward and backward, and keep no mask. */
void attn_drop_row(const struct attn_drop *d, uint64_t key, int i, float *row, unsigned char *mask,
		   int n);

#endif
