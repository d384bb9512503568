#include "optim.h"
#include "vmath.h"

#include <math.h>

#include "clock.h"
#include "team.h"

void optim_defaults(struct optim_cfg *o)
{
	o->lr = 1e-3f;
	o->min_lr = 1e-4f;
	o->warmup = 10;
	o->decay_steps = 1000;
	o->beta1 = 0.9f;
	o->beta2 = 0.95f;
	o->eps = 1e-8f;
	o->weight_decay = 0.1f;
	o->clip = 1.0f;
}

float optim_lr(const struct optim_cfg *o, int step)
{
	double progress;

	if (step < o->warmup)
		return o->lr * (float)(step + 1) / (float)o->warmup;
	if (step >= o->decay_steps)
		return o->min_lr;
	progress = (double)(step - o->warmup) / (double)(o->decay_steps - o->warmup);
	return o->min_lr +
	       (float)(0.5 * (1.0 + cos(3.141592653589793 * progress))) * (o->lr - o->min_lr);
}

void optim_sq_norm_charge(const struct kctx *k, size_t n)
{
	emu_compute(k->d, "grad_norm", 2.0 * (double)n, (double)n * k->gb);
}

/* Lanes of the sum of squares: element i adds into lane i % SQ_LANES (the tail's from
 * lane 0), the lanes summed pairwise at the end. A fixed order, as one accumulator's was,
 * but SQ_LANES independent chains that a vector unit runs side by side. */
#define SQ_LANES 8

double optim_sq_norm_math(const struct kctx *k, const float *g, size_t n)
{
	double acc[SQ_LANES] = {0};
	size_t i = 0;

	if (!kctx_math(k))
		return 0;
	for (; i + SQ_LANES <= n; i += SQ_LANES)
		for (int j = 0; j < SQ_LANES; j++)
			acc[j] += (double)g[i + j] * g[i + j];
	for (int j = 0; i < n; i++, j++)
		acc[j] += (double)g[i] * g[i];
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

double optim_sq_norm(const struct kctx *k, const float *g, size_t n)
{
	optim_sq_norm_charge(k, n);
	return optim_sq_norm_math(k, g, n);
}

void optim_adamw_charge(const struct kctx *k, size_t n)
{
	/* Reads gradient, master weight, m, v; writes weight, m, v: 28 bytes a parameter in
	 * fp32, and in bf16 (2-byte gradient and weight copy, 4-byte master, m, v) as well;
	 * 30 in bf16 with fp32 main gradients. */
	double bytes = 28.0 + (k->gb - (double)tensor_elem_bytes(k->prec, MEM_GRAD));

	emu_compute(k->d, "adamw", 12.0 * (double)n, bytes * (double)n);
}

struct adamw {
	const struct optim_cfg *o;
	float *w, *m, *v;
	const float *g;
	float lr, gscale, c1, c2, wd;
};

VM_CLONES static void adamw_range(void *arg, size_t lo, size_t hi, int wk)
{
	const struct adamw *a = arg;
	const struct optim_cfg *o = a->o;
	float *w = a->w, *m = a->m, *v = a->v, lr = a->lr, c1 = a->c1, c2 = a->c2, wd = a->wd;
	float gscale = a->gscale;
	const float *g = a->g;

	(void)wk;
	for (size_t i = lo; i < hi; i++) {
		float gi = g[i] * gscale;

		m[i] = o->beta1 * m[i] + (1.0f - o->beta1) * gi;
		v[i] = o->beta2 * v[i] + (1.0f - o->beta2) * gi * gi;
		w[i] -= lr * ((m[i] / c1) / (sqrtf(v[i] / c2) + o->eps) + wd * w[i]);
	}
}

/* Elements an AdamW piece (models/team.h) */
#define ADAMW_GRAIN 8192

void optim_adamw_math(const struct kctx *k, const struct optim_cfg *o, float *w, const float *g,
		      float *m, float *v, size_t n, float lr, float gscale, int decay, int t)
{
	struct adamw a = {o,
			  w,
			  m,
			  v,
			  g,
			  lr,
			  gscale,
			  1.0f - powf(o->beta1, (float)t),
			  1.0f - powf(o->beta2, (float)t),
			  decay ? o->weight_decay : 0.0f};

	if (kctx_math(k))
		team_for(n, ADAMW_GRAIN, adamw_range, &a);
}

void optim_adamw(const struct kctx *k, const struct optim_cfg *o, float *w, const float *g,
		 float *m, float *v, size_t n, float lr, float gscale, int decay, int t)
{
	optim_adamw_charge(k, n);
	optim_adamw_math(k, o, w, g, m, v, n, lr, gscale, decay, t);
}
