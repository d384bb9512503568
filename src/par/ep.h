/* par/ep: expert parallelism, a MoE layer's experts spread over ep ranks (Megatron-Core's
 * --expert-model-parallel-size; GShard, Lepikhin et al. 2020, arXiv 2006.16668; the
 * dispatchers of Megatron-Core's MoE).
 *
 * With tp > 1 (ep = tp) the experts go over the tensor-parallel group instead, and this
 * file is not used: each rank holds E / t whole experts (models/moe.h's e0, El), the
 * tokens are the group's already (the region's f gathers them under sp), and the
 * region's g sums the experts' outputs (par/mlp.c's MoE table, par/tp.c's shards).
 *
 * Otherwise the experts fold onto the dense mesh (Megatron's parallel folding, Liu et al.
 * 2025, arXiv 2504.14960): the expert grid is ETP x EP x EDP x PP over the same devices
 * (run/cfg.h's run_ep_mode):
 *   over dp x cp  with tp 1, or each expert cut over tp as the dense MLP is (ETP = tp):
 *                 the ep consecutive ranks of the dp x cp group (one tp rank's) hold
 *                 E / ep experts each, EDP = dp cp / ep, and each rank routes the group's
 *                 tokens (gathered over tp by the region under sp)
 *   rows          whole experts over ep consecutive ranks of the stage's tp x cp x dp
 *                 (tp fastest), EDP = tp cp dp / ep, each rank routing its own
 *                 sequence-parallel rows: the layer's MLP runs in the rows region below,
 *                 no gather before it and no reduce-scatter after, as Megatron-Core's
 *                 MoE layer with tp
 * The experts' gradients are reduced over the EDP ranks that hold the same ones
 * (par/dp.h), the dense ones over dp x cp as before. The router is replicated: the
 * capacity, the dropping and the load-balancing loss are the micro-batch's, as in the
 * serial model, by the counts par/moe_route.c exchanges where the micro-batch's tokens
 * are spread over ranks (cp, or each rank's own rows). Then, as one of two
 * tables of the layer's MLP (par/layer.h), Megatron-Core's --moe-token-dispatcher-type:
 *   alltoall   the kept tokens permuted by expert (models/moe.h), the counts exchanged by
 *              an all-to-all, the rows by an all-to-all-v whose splits are the real
 *              per-expert counts, the experts run on the rows they receive, and the
 *              outputs sent back the same way and combined; backward the same with the
 *              gradients
 *   allgather  every rank's tokens and routing all-gathered over the ep group, each rank's
 *              experts run on the rows routed to them, the weighted outputs
 *              reduce-scattered back; backward all-gathers the output gradients and
 *              reduce-scatters the inputs' and the gates' gradients. It gathers the
 *              routing (2 M k floats a rank) again in backward, where Megatron keeps
 *              it: a small collective a layer against host memory
 * A rank whose experts get no token still takes part in every collective. The experts
 * compute the rows they are sent (no padding to the capacity), so the time of an execute
 * run follows its routing (a skewed router makes stragglers); a dry-run, which routes
 * nothing, assumes the uniform M k / E rows an expert (at most the capacity). Uniform
 * routing moves 4 T k h elements (P - 1) / P a MoE layer and rank, dispatch and combine,
 * forward and backward (when E divides T k; the remainder goes one row to each of the
 * first experts). With capacity factor 0 (dropless) nothing is dropped and an expert
 * receives up to every rank's tokens. */
#ifndef PEMU_PAR_EP_H
#define PEMU_PAR_EP_H

#include "par/model.h"

/* The MLP table of m's dispatcher (ep > 1). */
const struct par_mlp *par_ep_mlp(const struct par_model *m);

/* m's expert-parallel scratch in w (ep > 1). 0 or EMU_EOOM. */
int par_ep_alloc_work(struct par_model *m, struct par_work *w);

#endif
