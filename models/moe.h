/* moe: a mixture-of-experts MLP block (Shazeer et al. 2017; GShard, Lepikhin et al. 2020;
 * Switch Transformer, Fedus et al. 2021), replacing the MLP of every moe_every-th layer.
 *
 *   router    probs (M, E) = softmax(x Wr^T), Wr (E, h), no bias
 *   top-k     each token picks its k most probable experts (ties: the lower index)
 *   capacity  each expert takes at most cap = floor(capacity_factor * M * k / E) tokens
 *             (at least 1); places are given out to all first choices in token order,
 *             then to all second choices; a choice that finds its expert full is dropped.
 *             Capacity factor 0 is dropless (Megatron-Core's semantics when none is
 *             given): cap = M, so no choice is dropped
 *   experts   expert e runs its own GeLU MLP, fc (ffn, h) then fc2 (h, ffn), on a
 *             zero-padded buffer of cap rows, as capacity-based implementations do, so
 *             the FLOPs charged depend on the shapes alone (dry-run = execute); dropless,
 *             on the rows routed to it, compact (the permuted pieces below), so that
 *             the time follows the routing (a dry-run assumes it uniform)
 *   combine   out[t] = sum over t's kept choices of probs[t][e] * expert_e(x[t])
 *             (the raw router probability as gate, as Switch does; not renormalised)
 *   aux loss  aux = coeff * E * sum_e f_e P_e (Switch eq. 4, with top-k), where f_e is
 *             the fraction of the M * k choices that picked e (before dropping) and P_e
 *             the mean router probability of e; its gradient flows through P_e. Both are
 *             the micro-batch's, also when a strategy spreads its tokens (Mall).
 *
 * The routing decisions are kept (choice, slot) so that a parallel run can compare them
 * with the reference's and tell a routing flip from a strategy error (docs/formulas.md
 * (Verification)). */
#ifndef MODELS_MOE_H
#define MODELS_MOE_H

#include "tensor.h"

struct moe_shape {
	int M;   /* tokens */
	int C;   /* hidden */
	int F;   /* each expert's MLP width */
	int E;   /* experts */
	int k;   /* choices per token, 1 or 2 */
	int cap; /* slots per expert */
	float aux_coeff;
	int e0, El;   /* the experts moe_fwd and moe_bwd run: [e0, e0 + El), weights and slots
		       * of those only (El 0: all E); the router still routes to every expert */
	int dropless; /* capacity factor 0: cap = M, the experts on compact rows */
	int rows;     /* the rows x, pre, h and y hold (0: El cap, or M k compact) */
	int cap_all;  /* the micro-batch's capacity when its tokens are spread over ranks
		       * (context parallelism, or each rank's rows under expert parallelism):
		       * a choice is kept if the choices of its expert before it in the whole
		       * micro-batch are fewer, while cap bounds the slots one rank fills; the
		       * experts run on compact rows (0: cap) */
	int Mall;     /* the micro-batch's tokens, which f_e and P_e average over (0: M) */
};

int moe_capacity(double capacity_factor, int M, int k, int E);

/* What a MoE block keeps from forward for backward. */
struct moe_acts {
	struct tensor probs; /* (M, E) router probabilities */
	struct tensor x;     /* (E, cap, C) inputs dispatched to each expert, zero-padded */
	struct tensor pre;   /* (E, cap, F) fc output */
	struct tensor h;     /* (E, cap, F) after GeLU */
	struct tensor y;     /* (E, cap, C) expert outputs */
	int *slot_token;     /* [E * cap] the token in each slot, -1 if empty */
	int *choice;         /* [M * k] the experts each token picked, best first */
	int *slot;           /* [M * k] the slot each choice got, -1 if it was dropped */
	double *frac;        /* [E] f_e of the aux loss */
	double *psum;        /* [E] the sum of p_e over the micro-batch's tokens (P_e Mall) */
	int *rows;           /* [2 E] the rows of each expert moe_permute counted, and E more
			      * for a strategy's own counts of them */
	float aux;           /* the aux loss of the last forward */
};

/* Backward scratch, shared by the MoE layers: one expert at a time. */
struct moe_scratch {
	struct tensor dy, dx;          /* (cap, C) */
	struct tensor dh, dpre;        /* (cap, F) */
	struct tensor dprobs, dlogits; /* (M, E) */
};

/* Allocates what a (zeroed at first) is missing: after tensors were given back for
 * recomputation, the same call brings them back, keeping the routing bookkeeping. */
int moe_acts_alloc(const struct kctx *k, struct moe_acts *a, const struct moe_shape *s);
int moe_scratch_alloc(const struct kctx *k, struct moe_scratch *sc, const struct moe_shape *s);
void moe_acts_free(struct moe_acts *a);

/* out (M, C) = the block on x (M, C). Weights: wr (E, C), w1 (E, F, C), b1 (E, F),
 * w2 (E, C, F), b2 (E, C). Returns the aux loss (0 in dry-run). */
float moe_fwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a, float *out,
	      const float *x, const float *wr, const float *w1, const float *b1, const float *w2,
	      const float *b2);
/* dx (M, C) += through the block from dout (M, C) and the aux loss scaled by aux_scale;
 * weight gradients accumulate into dwr, dw1, db1, dw2, db2. */
void moe_bwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
	     struct moe_scratch *sc, float *dx, const float *dout, float aux_scale, const float *x,
	     const float *wr, const float *w1, const float *w2, float *dwr, float *dw1, float *db1,
	     float *dw2, float *db2);

/* The block's pieces, which moe_fwd and moe_bwd are made of, for a strategy that puts
 * communication between them (expert parallelism's all-to-all):
 *   route      the router's probabilities, each token's choices, the capacity's slots
 *              and f_e into a (moe_fwd's routing, without the dispatch)
 *   permute    the kept choices' rows of x, expert by expert and in slot order within
 *              one, into xp (rows, C), compact: cnt[E] gets each expert's rows (in
 *              dry-run, where nothing is routed, moe_uniform_rows each); returns the rows
 *   experts    moe_expert_fwd / moe_expert_bwd: one expert's MLP on n rows
 *   unpermute  out (M, C) = the sum over each token's kept choices of its gate times its
 *              row of yp (rows in permute's order), the combine
 *   aux        the load-balancing loss of the last route (0 in dry-run)
 * Backward: unpermute_bwd writes each kept row's d output (gate x d out) into dyp and
 * adds d out . its row of yp to dprobs (M, E); permute_bwd adds each row's gradient of
 * dxp to its token's in dx; router_bwd adds the aux loss's gradient (times aux_scale) to
 * sc->dprobs and takes the softmax and router GEMM's backward into dx and dwr.
 * Unlike the padded dispatch of moe_fwd, the permuted pieces charge the rows routed, so
 * that an execute run's time follows its routing; dry-run assumes the uniform rows. */
void moe_route(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a, const float *x,
	       const float *wr);
int moe_permute(const struct kctx *k, const struct moe_shape *s, const struct moe_acts *a,
		float *xp, const float *x, int *cnt);
void moe_unpermute(const struct kctx *k, const struct moe_shape *s, const struct moe_acts *a,
		   float *out, const float *yp, const int *cnt);
float moe_aux(const struct moe_shape *s, const struct moe_acts *a);
void moe_unpermute_bwd(const struct kctx *k, const struct moe_shape *s, const struct moe_acts *a,
		       float *dyp, float *dprobs, const float *dout, const float *yp,
		       const int *cnt);
void moe_permute_bwd(const struct kctx *k, const struct moe_shape *s, const struct moe_acts *a,
		     float *dx, const float *dxp, const int *cnt);
void moe_router_bwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
		    struct moe_scratch *sc, float *dx, float aux_scale, const float *x,
		    const float *wr, float *dwr);
/* The rows expert e gets with uniform routing: M k / E, the remainder to the first
 * (M k) mod E experts one more each, at most the capacity. */
int moe_uniform_rows(const struct moe_shape *s, int e);

/* Routing spread over ranks (s->cap_all): the block's M tokens are nruns runs of len[u]
 * consecutive tokens of the micro-batch (of Mall = s->Mall tokens).
 *   choose  moe_route without the capacity: the probabilities and each token's choices,
 *           into cnt[(j nruns + u) E + e] how many of run u's j-th choices picked e, and
 *           into a->psum the sum of each expert's probability over the block's tokens
 *   keep    the slots, from base (indexed alike: the choices of expert e before run u's
 *           j-th ones in the whole micro-batch's order: every first choice in token
 *           order, then every second), and f_e from all[E], each expert's choices in the
 *           micro-batch; a strategy puts the micro-batch's sums into a->psum
 * moe_route is the two with one run and the counts its own. keep's arguments in dry-run,
 * where nothing is routed, go unread. */
void moe_choose(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a, const float *x,
		const float *wr, int nruns, const int *len, int *cnt);
void moe_keep(const struct moe_shape *s, struct moe_acts *a, int nruns, const int *len,
	      const int *base, const int *all);
/* The experts and the combine of a routed block (moe_route, or choose and keep) on
 * compact rows: permute, each held expert, unpermute into out (M, C); the aux loss. */
float moe_compact_fwd(const struct kctx *k, const struct moe_shape *s, struct moe_acts *a,
		      float *out, const float *x, const float *w1, const float *b1, const float *w2,
		      const float *b2);

/* One expert's MLP on rows (n, C): y = fc2(gelu(fc(x))); its backward from dy into dx
 * (n, C) and the expert's weight gradients, with scratch dh and dpre (n, F). */
void moe_expert_fwd(const struct kctx *k, float *y, float *pre, float *h, const float *x,
		    const float *w1, const float *b1, const float *w2, const float *b2, int n,
		    int C, int F);
void moe_expert_bwd(const struct kctx *k, float *dx, float *dh, float *dpre, const float *dy,
		    const float *x, const float *pre, const float *h, const float *w1,
		    const float *w2, float *dw1, float *db1, float *dw2, float *db2, int n, int C,
		    int F);

#endif
