/* par/cp: context parallelism, a sequence cut across the cp group (Megatron-Core's
 * --context-parallel-size; Liu, Zaharia and Abbeel 2023, Ring Attention, arXiv
 * 2310.01889; Jacobs et al. 2023, DeepSpeed-Ulysses, arXiv 2309.14509).
 *
 * Every activation of a rank is its part of each sequence: T = s / cp rows, the model's
 * sequence (par/model.h). With causal attention the sequence is cut into 2 cp chunks of
 * s / 2cp tokens and rank r holds chunks r and 2cp - 1 - r, in that order (Megatron's
 * load balance: every rank's queries see as many keys), so a rank's row i is the token at
 * position par_cp_position(s, cp, r, i) of its sequence. Only the attention meets the
 * other ranks' tokens, as one of three tables (par/layer.h), Megatron-Core's
 * --cp-comm-type:
 *   p2p         the ring: K and V go round the cp group by posted sends and receives,
 *               each overlapped with the attention of the block in hand; step 0 is the
 *               rank's own block (the causal diagonal), steps 1 <= i <= r both local query
 *               chunks against the first chunk of the KV arriving (from rank r - i), steps
 *               i > r the second query chunk against all of it: every rank computes 2
 *               chunk pairs a step. The blocks' outputs are merged by their log-sum-exp.
 *               Backward sends K, V round again and the partial dK, dV after them: each
 *               block's starts at the rank after its owner and reaches the owner after
 *               cp - 1 hops, which adds its own; each rank computes its part before it
 *               waits for the partial arriving, so that the hop hides behind it. Per layer and
 * rank: (cp - 1) |KV| forward, 2 (cp - 1) |KV| backward, |KV| = 2 b (s / cp) h / t elements.
 *   all_gather  K, V all-gathered (not overlapped) and put in position order; each query
 *               chunk attends to the keys before it; backward gathers them again and
 *               reduce-scatters dK, dV.
 *   a2a         Ulysses: an all-to-all from sequence-sharded to head-sharded q, k, v
 *               (each rank the whole sequence of a / (t cp) heads), the attention of
 *               those heads, and an all-to-all back; backward the same in reverse. Needs
 *               the rank's a / t heads to divide by cp. The head-sharded q, k, v replace
 *               the layer's qkv for backward (the same size); the head-sharded output is
 *               not kept but brought again by a third all-to-all in backward (TE keeps
 *               it: pemu keeps the layer's activations the size of a layer without cp).
 * --cp-layout contiguous (the ring only) gives rank r the contiguous chunk r of cp
 * instead: the ring whose ranks do unequal work (rank r computes r + 1 of the cp blocks,
 * skipping those after its queries), which the balanced layout exists to avoid.
 *
 * Every kind is a memory-efficient attention (models/attention.h: blocks of queries, the
 * log-sum-exp kept), as Megatron-Core's context parallelism runs TransformerEngine's
 * fused attention: the layer keeps its lse, no scores.
 *
 * Dense gradients are reduced over the dp x cp group (par/dp.h, the group handed in as
 * dp): each rank's loss is the mean over its tokens, so the device loop divides its
 * backward's scale by cp as well. */
#ifndef PEMU_PAR_CP_H
#define PEMU_PAR_CP_H

#include "par/model.h"

/* The position in its sequence of s tokens of rank r's row i (0 <= i < s / cp), in the
 * balanced layout or (contiguous) rank r holding chunk r of cp. */
int par_cp_position(int s, int cp, int r, int i, int contiguous);

/* The attention table of m's comm type (cp > 1). */
const struct par_attn *par_cp_attn(const struct par_model *m);

/* m's context-parallel scratch in w (cp > 1): the KV buffers of its comm type. 0 or
 * EMU_EOOM. */
int par_cp_alloc_work(struct par_model *m, struct par_work *w);

/* The keys the attention scratch must hold a row of: the rank's rows for the ring, the
 * whole sequence for the others. */
int par_cp_keys(const struct par_model *m);

#endif
