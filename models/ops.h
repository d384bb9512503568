/* ops: the memory-bound kernels of a transformer, forward and backward: layernorm, GeLU,
 * residual add, token+position embedding, and softmax cross-entropy over the vocabulary.
 * Shapes are in the comments; M is rows (tokens), C channels. Backward kernels
 * accumulate (+=) into their outputs. Every kernel charges its FLOPs and bytes to the
 * device's compute stream whether or not it computes (dry-run). */
#ifndef MODELS_OPS_H
#define MODELS_OPS_H

#include "tensor.h"

#define LAYERNORM_EPS 1e-5f

/* out (M, C) = (inp - mean) * rstd * w + b; mean, rstd (M) kept for backward. */
void layernorm_fwd(const struct kctx *k, float *out, float *mean, float *rstd, const float *inp,
		   const float *w, const float *b, int M, int C);
void layernorm_bwd(const struct kctx *k, float *dinp, float *dw, float *db, const float *dout,
		   const float *inp, const float *w, const float *mean, const float *rstd, int M,
		   int C);

/* GeLU, tanh approximation (Hendrycks and Gimpel 2016), elementwise over n. */
void gelu_fwd(const struct kctx *k, float *out, const float *inp, size_t n);
void gelu_bwd(const struct kctx *k, float *dinp, const float *inp, const float *dout, size_t n);

/* out (n) = a + b: the residual connection. Its backward is add_acc into both inputs. */
void residual_fwd(const struct kctx *k, float *out, const float *a, const float *b, size_t n);
/* acc (n) += x. */
void add_acc(const struct kctx *k, float *acc, const float *x, size_t n);
/* Charges name as a memory-bound kernel that sums `blocks` blocks of n elements into one:
 * blocks - 1 adds an element, the blocks read and one block written (1 block: a copy).
 * The residual, add_acc and the parallel layouts' copies and sums are charged so. */
void sum_charge(const struct kctx *k, const char *name, int blocks, double n);

/* out (B, T, C) = wte[tokens] + wpe[t0 + t]: tokens (B, T), wte (V, C), wpe (maxT, C). */
void embedding_fwd(const struct kctx *k, float *out, const int *tokens, const float *wte,
		   const float *wpe, int B, int T, int C, int t0);
void embedding_bwd(const struct kctx *k, float *dwte, float *dwpe, const float *dout,
		   const int *tokens, int B, int T, int C, int t0);

/* out (M, N) = softmax of each row of inp (out may be inp). */
void softmax_fwd(const struct kctx *k, float *out, const float *inp, int M, int N);
/* dinp (M, N) += out * (dout - sum(out * dout)) row by row, out being softmax_fwd's. */
void softmax_bwd(const struct kctx *k, float *dinp, const float *out, const float *dout, int M,
		 int N);

/* The vocabulary-parallel pieces of the embedding: out (B, T, C) = wte[token - v0] for
 * tokens in [v0, v1) and 0 for the others, wte holding rows v0..v1-1; and the positions
 * added on their own to M token rows, row i at position pos[i] (a sequence- or
 * context-parallel rank's rows): out[i] += wpe[pos[i]]. Backward accumulates. */
void embedding_range_fwd(const struct kctx *k, float *out, const int *tokens, const float *wte,
			 int v0, int v1, int B, int T, int C);
void embedding_range_bwd(const struct kctx *k, float *dwte, const float *dout, const int *tokens,
			 int v0, int v1, int B, int T, int C);
void position_fwd(const struct kctx *k, float *out, const float *wpe, int M, const int *pos, int C);
void position_bwd(const struct kctx *k, float *dwpe, const float *dout, int M, const int *pos,
		  int C);

/* The kernels the cross-entropy over M rows of V logits is charged as (the math is the
 * same whichever; docs/formulas.md has the bytes):
 *   CE_ONE      one kernel forward (the logits read, the probabilities written) and one
 *               backward: the serial reference's
 *   CE_UNFUSED  Megatron-LM's vocab_parallel_cross_entropy, its default
 *               (megatron/core/tensor_parallel/cross_entropy.py): the logits cast to fp32,
 *               then max, subtract, exp, sum and divide, each a kernel over the M x V values
 *               in fp32; backward a multiply, and the gradient cast back
 *   CE_NATIVE   --cross-entropy-loss-fusion (megatron/core/fusions/fused_cross_entropy.py,
 *               its functions compiled by jit_fuser): cast and max, subtract-exp-sum,
 *               divide; backward the multiply, written back into the saved
 *               probabilities, and the cast to bf16 in one
 *   CE_TE       --cross-entropy-fusion-impl te, Transformer Engine's Triton kernels
 *               (transformer_engine/common/triton/cross_entropy.py): an online softmax
 *               reading the logits once, then a kernel reading them again to write the fp32
 *               gradient; backward a multiply, and the cast PyTorch's autograd makes to the
 *               logits' precision
 * Megatron's and TE's keep the probabilities (TE: the gradient) for backward in fp32
 * (par/model.c accounts them so).
 * The kernels over a value a row (the target's logit gathered, the masks) are not charged.
 * Each is charged in its phase: before the row maxima are reduced over the vocabulary's
 * shards, between that and the sums' reduction, after it, and in backward. */
enum ce_impl { CE_UNFUSED, CE_NATIVE, CE_TE, CE_ONE }; /* (Megatron's default the zero value) */
enum ce_phase { CE_PH_MAX, CE_PH_SUM, CE_PH_PROBS, CE_PH_BWD };
void crossentropy_charge(const struct kctx *k, enum ce_impl impl, enum ce_phase ph, int M, int V);

/* probs (M, V) = softmax(logits); losses (M) = -log probs[target]; charged as impl runs it
 * (every phase). */
void crossentropy_fwd(const struct kctx *k, enum ce_impl impl, float *losses, float *probs,
		      const float *logits, const int *targets, int M, int V);
/* dlogits (M, V) += (probs - onehot(target)) * dloss, for the loss averaged with weight
 * dloss per row. */
void crossentropy_bwd(const struct kctx *k, enum ce_impl impl, float *dlogits, const float *probs,
		      const int *targets, float dloss, int M, int V);

#endif
