/* linear: y = x W^T + b through cblas_sgemm, forward and the two halves of backward
 * (input gradient and weight gradient, which zero-bubble pipeline schedules run apart).
 * A column or row shard of a weight is just a linear of the shard's shape: the caller
 * passes the shard. Backward kernels accumulate (+=) into their outputs. In dry-run
 * (k has no math) the pointers may be NULL: only time is charged. */
#ifndef MODELS_LINEAR_H
#define MODELS_LINEAR_H

#include "tensor.h"

/* out (M, N) = inp (M, K) @ w (N, K)^T (+ bias (N) when has_bias). Whether there is a bias
 * is a flag, not the pointer, because in dry-run every pointer is NULL and the charge
 * must not change. */
void linear_fwd(const struct kctx *k, float *out, const float *inp, const float *w,
		const float *bias, int has_bias, int M, int K, int N);
/* dinp (M, K) += dout (M, N) @ w (N, K). */
void linear_bwd_input(const struct kctx *k, float *dinp, const float *dout, const float *w, int M,
		      int K, int N);
/* dw (N, K) += dout (M, N)^T @ inp (M, K); dbias (N) += column sums of dout (has_bias). */
void linear_bwd_weight(const struct kctx *k, float *dw, float *dbias, int has_bias,
		       const float *dout, const float *inp, int M, int K, int N);

#endif
