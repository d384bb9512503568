/* attention: causal multi-head self-attention (Vaswani et al. 2017; GPT-2's masking),
 * over a range of heads, so that a tensor-parallel rank can run its own, and over a chunk
 * of queries against a range of keys, so that a sequence- or context-parallel rank can.
 *
 * The general form takes a view: queries of tokens [q0, q0 + Tq) attend to the keys and
 * values of tokens [0, Tk), query i seeing key j when j <= q0 + i. Each of q, k, v, out
 * is (B, rows, ld) with head h at columns [h hs, (h+1) hs). The kernel computes heads
 * [h0, h1) only:
 *   att (B, h1-h0, Tq, Tk)  softmax(Q K^T / sqrt(hs)) with the causal mask
 *   out                     att V for heads [h0, h1)
 * The scores use full Tq x Tk GEMMs (as Megatron does), so the FLOPs charged are
 * 4 B Tq Tk hs per head forward, the figure of docs/formulas.md. Backward accumulates into
 * dq, dk, dv (same layout as q, k, v); scratch holds Tq * Tk floats. */
#ifndef MODELS_ATTENTION_H
#define MODELS_ATTENTION_H

#include "dropout.h"
#include "tensor.h"

struct attn_view {
	int B;          /* batch */
	int Tq, Tk, q0; /* queries, keys, the first query's position (keys start at 0) */
	int h0, h1, hs; /* heads computed, head size */
	const float *q, *k, *v;
	int ldq, ldk, ldv; /* row strides, in floats */
	float *out;
	int ldo;
	float *att; /* (B, h1-h0, Tq, Tk) */
	/* The memory-efficient kernels' batch strides, in floats, of q, of k and v, and of
	 * out (0: rows x ld), so that a view may be a chunk of each sequence. */
	size_t bsq, bsk, bso;
	/* Attention dropout (dropout.h): the view's keys, or NULL (or p 0) for none. The
	 * standard kernels keep, as Megatron's unfused path does, the mask (B, h1-h0, Tq,
	 * Tk) bytes and the dropped probabilities P' (the same shape) for backward; the
	 * memory-efficient ones keep nothing and draw the mask again. */
	const struct attn_drop *drop;
	unsigned char *mask;
	float *attd;
};

/* With dropout the standard forward computes att = P, attd = P' = mask (x) P / (1 - p),
 * out = P' V; backward dP' = dout V^T, dV += P'^T dout, dP = mask (x) dP' / (1 - p), and
 * the softmax's backward from the undropped P. Its charge adds the dropout's kernels
 * (memory-bound: forward reads P, writes P' and the mask; backward reads dP' and the
 * mask, writes dP). */

void attention_fwd_view(const struct kctx *k, const struct attn_view *a);
void attention_bwd_view(const struct kctx *k, const struct attn_view *a, float *dq, float *dk,
			float *dv, float *scratch, const float *dout);

/* Memory-efficient attention, after FlashAttention (Dao et al. 2022, arXiv 2205.14135):
 * the same function without keeping the (Tq, Tk) scores. Forward runs blocks of
 * FLASH_ROWS queries, each against the keys it sees (FlashAttention also tiles the keys;
 * a block of rows is enough to drop the T^2 memory), and keeps each query's
 * log-sum-exp, lse (B, h1-h0, ldl) from the view's first query (ldl 0: Tq); backward
 * recomputes each block's scores from q, k and lse, and needs out for the softmax
 * gradient's row sums. Scratch holds FLASH_ROWS Tk floats forward, twice that backward.
 * The view's q0 must be >= 0 (every query sees a key). FLOPs are charged for the
 * (query, key) pairs the blocks compute, the visible keys of each block of rows (the
 * blocks above the causal diagonal skipped, as FlashAttention does): per head 4 P hs + 5 P
 * forward, 10 P hs + 6 P backward (the scores computed again).
 *
 * The backward takes the lse and out of the queries' whole attention, of which this view
 * may be one block of keys: so the blocks of a ring (context parallelism) each add their
 * part of dq, dk, dv. attention_lse_merge folds a block's normalised output and lse
 * (bout, blse: out's and lse's layouts) into the running ones, in place:
 * out = (out e^lse + bout e^blse) / (e^lse + e^blse), lse = log(e^lse + e^blse).
 *
 * With a view's dropout (attn_drop), each block of rows draws its mask again from the
 * keys (as FlashAttention does from its Philox state), forward and backward, and stores
 * none: forward out = P' V with the lse of the undropped P (so blocks of keys still
 * merge: each P' is P's rows scaled); backward dV += P'^T dout, dS = P (x) (mask dP' /
 * (1 - p) - D) with D = rowsum(dout (x) out) as before, since rowsum(P (x) dP) =
 * rowsum(P' (x) dP') = rowsum(dout (x) out). */
#define FLASH_ROWS 64
/* The charge of either (backward 0 or 1) on d, as the views make it: heads heads of Tq
 * queries and Tk keys computing P pairs a head, ab bytes an element, the rows by queries
 * forward and by keys backward (emu_fused). bench/fidelity charges published shapes so. */
int64_t attention_flash_charge(struct emu_dev *d, int backward, double heads, double Tq, double Tk,
			       double P, int hs, int ab);
void attention_flash_fwd_view(const struct kctx *k, const struct attn_view *a, float *lse, int ldl,
			      float *scratch);
void attention_flash_bwd_view(const struct kctx *k, const struct attn_view *a, const float *lse,
			      int ldl, float *dq, float *dk, float *dv, float *scratch,
			      const float *dout);
void attention_lse_merge(const struct kctx *k, const struct attn_view *a, float *lse, int ldl,
			 const float *bout, const float *blse);
/* The whole sequence of a qkv buffer (below), lse (B, h1-h0, T). */
void attention_flash_fwd(const struct kctx *k, float *out, float *lse, const float *qkv, int B,
			 int T, int NH, int h0, int h1, int hs, float *scratch);
void attention_flash_bwd(const struct kctx *k, float *dqkv, float *scratch, const float *dout,
			 const float *out, const float *lse, const float *qkv, int B, int T, int NH,
			 int h0, int h1, int hs);

/* The whole-sequence view of a qkv buffer (below): for a caller that adds dropout. */
struct attn_view attention_qkv_view(float *out, float *att, const float *qkv, int B, int T, int NH,
				    int h0, int h1, int hs);

/* The common case: self-attention of a whole sequence held as qkv (B, T, 3, NH, hs), each
 * token's queries of the NH heads, then keys, then values; out (B, T, NH, hs). */
void attention_fwd(const struct kctx *k, float *out, float *att, const float *qkv, int B, int T,
		   int NH, int h0, int h1, int hs);
void attention_bwd(const struct kctx *k, float *dqkv, float *scratch, const float *dout,
		   const float *att, const float *qkv, int B, int T, int NH, int h0, int h1,
		   int hs);

#endif
