/* par/overlap: Oases's overlapped tensor parallelism (Li et al. 2023, arXiv 2305.16121,
 * section 3.1; code github lucasleesw/oases). Each micro-batch is cut along the batch into
 * PAR_NSUB = 2 sub-batches (par/model.h: the model's B is a sub-batch's), which run the
 * pieces of each layer (par/layer.h) interleaved. A piece's collective is posted at its
 * end (the work posts, par_post_slot) and the same sub-batch's next piece waits for it,
 * so that one sub-batch's collective is on the wire while the other computes. Forward,
 * with tensor parallelism's all-reduces (a and b the two sub-batches):
 *
 *   a: [out of l-1] pre qkv attn proj   post a's attention all-reduce
 *   b: [out of l-1] pre qkv attn proj   wait a's, post b's
 *   a: mid mlp                          wait b's, post a's MLP all-reduce
 *   b: mid mlp                          wait a's, post b's
 *   a: out, then layer l + 1 ...        (b's out is deferred into its next turn)
 *
 * One tensor-parallel collective is in flight at a time (a post waits for the previous
 * one). Backward mirrors it: a sub-batch's recomputation and backward pieces run until
 * the next input-gradient collective, which hides behind the other sub-batch's, across
 * layer boundaries. Under sequence parallelism the same with the all-gathers and
 * reduce-scatters, which split the pieces the same way.
 *
 * A parameter's gradient is final once the second sub-batch has added its part: the grad
 * hook is told then; the use hook when the first reads a unit. The loss is the mean of
 * the sub-batches' (d loss = scale / 2 each). The embeddings and the loss run one
 * sub-batch after the other. */
#ifndef PEMU_PAR_OVERLAP_H
#define PEMU_PAR_OVERLAP_H

#include "par/model.h"

/* par_forward_part and par_backward_part (par/layer.h) for a micro-batch cut into
 * sub-batches (a->nsub > 1). */
int par_overlap_forward(struct par_model *m, struct par_acts *a, const int *tokens,
			const int *targets, float *loss);
int par_overlap_backward(struct par_model *m, struct par_acts *a, float scale, int weight);

#endif
