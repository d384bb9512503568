/* optim: AdamW (Loshchilov and Hutter, arXiv 1711.05101) with global gradient-norm
 * clipping and a linear-warmup + cosine learning-rate schedule, as Megatron-LM runs it.
 * Every step charges its FLOPs and bytes like any kernel. */
#ifndef MODELS_OPTIM_H
#define MODELS_OPTIM_H

#include "tensor.h"

struct optim_cfg {
	float lr;        /* peak learning rate */
	float min_lr;    /* floor of the cosine decay */
	int warmup;      /* steps of linear warm-up from 0 */
	int decay_steps; /* the step at which the cosine reaches min_lr */
	float beta1, beta2, eps;
	float weight_decay; /* applied to the matrices, not to biases or norms */
	float clip;         /* global gradient-norm cap; 0: no clipping */
};

void optim_defaults(struct optim_cfg *o);

/* The learning rate at step (0-based). */
float optim_lr(const struct optim_cfg *o, int step);

/* sum of g[i]^2 over n, in double, in index order (the same on every run); charged as
 * one kernel. */
double optim_sq_norm(const struct kctx *k, const float *g, size_t n);

/* One AdamW update of n parameters w with gradients g * gscale and moments m, v (n each);
 * t is the 1-based step for bias correction. Charged as one kernel. */
void optim_adamw(const struct kctx *k, const struct optim_cfg *o, float *w, const float *g,
		 float *m, float *v, size_t n, float lr, float gscale, int decay, int t);

/* The same two apart: the math alone (nothing charged: 0 in dry-run), and the charge of
 * one kernel over n parameters. ZeRO's shard runs the math parameter piece by parameter
 * piece and charges one fused kernel over the whole shard, as a multi-tensor kernel
 * does (every rank's shard is the same size, so data-parallel ranks stay alike). */
double optim_sq_norm_math(const struct kctx *k, const float *g, size_t n);
void optim_sq_norm_charge(const struct kctx *k, size_t n);
void optim_adamw_math(const struct kctx *k, const struct optim_cfg *o, float *w, const float *g,
		      float *m, float *v, size_t n, float lr, float gscale, int decay, int t);
void optim_adamw_charge(const struct kctx *k, size_t n);

#endif
