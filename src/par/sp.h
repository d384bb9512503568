/* par/sp: sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198, section 4.2.2)
 * over a tensor-parallel group. The residual stream, the LayerNorms and the residual
 * adds run on this rank's share of the token rows, (Ml, h) with Ml = B T / t; the region
 * of the layer pieces (par/layer.h) becomes an all-gather of those rows before a
 * column-parallel layer (f) and a reduce-scatter into them after a row-parallel one (g):
 * the volume of tensor parallelism's all-reduce, in two halves. The rows are a chunk of
 * the flattened (B, T) tokens, which for B = 1 is a chunk of the sequence.
 *
 * A layer keeps its LayerNorm outputs' rows, not the gathered whole, and gathers them
 * again in backward for the column-parallel layer's weight gradient (the output layer
 * likewise the final LayerNorm's), the gather posted
 * under its input gradient's GEMM (the paper's section 4.2.2; Megatron's
 * LinearWithGradAccumulationAndAsyncCommunication): activations of s b h / t (34 + 5 a s
 * / h) a layer, the paper's Table 2 (m->ln_rows, par/layer.h's par_ln_rows). Oases, whose
 * recomputation checkpoints are the gathered outputs, and zero-bubble's deferred weight
 * passes keep the whole.
 *
 * The LayerNorms' and the positions' gradients are then partial on each rank (each saw
 * its rows only) and are summed over the group once a step, by par_tp_sum_partials
 * (par/tp.h). */
#ifndef PEMU_PAR_SP_H
#define PEMU_PAR_SP_H

#include <stddef.h>

#include "par/model.h"

/* Whether the serial model's tensor i has a partial gradient on each rank under m's
 * sequence parallelism: the LayerNorms and the positions, which see this rank's rows only.
 * 0 without sequence parallelism. */
int par_sp_partial(const struct par_model *m, int i);

#endif
