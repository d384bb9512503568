/* run/verify: verify's comparison of a parallel run with the serial reference
 * (verify_compare in run/run.h; docs/formulas.md, Verification): the loss of every step, every
 * gradient of the first step and, more loosely, of the later steps kept, and every parameter
 * after the last, each by the norm-wise relative error max |a - b| / max |b| per tensor, and
 * the MoE routing decisions one by one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run/run.h"
#include "util.h"

/* max |a - b| / max |b| over the entries where keep is NULL or keep[i]; *abs_err is
 * raised to max |a - b| over them. */
static double rel_err(const float *a, const float *b, size_t n, const unsigned char *keep,
		      double *abs_err)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]);

		if (keep && !keep[i])
			continue;
		num = e > num || isnan(e) ? e : num;
		den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
	}
	if (num > *abs_err || (isnan(num) && !isnan(*abs_err)))
		*abs_err = num;
	return den > 0 ? num / den : num;
}

/* Counts the routing decisions of par that differ from ref's; notes the first. */
static void compare_routes(const struct run_out *ref, const struct run_out *par,
			   const struct gpt_config *cfg, struct verify_result *v)
{
	size_t per_layer, n;

	if (!ref->routes || !par->routes)
		return;
	per_layer = ref->route_mb / (size_t)cfg->num_layers;
	n = ref->route_mb * (size_t)ref->steps * (size_t)ref->accum;
	for (size_t e = 0; e < n; e++) {
		size_t mb = e / ref->route_mb, in = e % ref->route_mb;

		if (!gpt_layer_is_moe(cfg, (int)(in / per_layer)))
			continue;
		v->routes++;
		if (ref->routes[e] == par->routes[e] || v->route_flips++)
			continue;
		v->flip_step = (int)(mb / (size_t)ref->accum);
		v->flip_layer = (int)(in / per_layer);
		v->flip_token = (int)(in % per_layer / (size_t)cfg->moe_top_k);
	}
}

/* How far the gradient differences of the run could have moved entry e of tensor i (n
 * entries) through AdamW's update lr m / (sqrt(v) + eps): at step t a first-order bound
 * of 2 lr D_t / (sqrt(v_t) + eps), D_t the largest difference so far (m and sqrt(v)
 * average the gradients so far; |m| <= sqrt(v)), v_t the reference's bias-corrected
 * second moment, lr the peak rate. Summed over the steps whose gradients were kept, and
 * the last term for each step after them. */
static double drift(const struct run_out *ref, const struct run_out *par, const struct run_cfg *cfg,
		    int i, size_t e, size_t n)
{
	const struct optim_cfg *o = &cfg->opt;
	int N = ref->gsteps_n < par->gsteps_n ? ref->gsteps_n : par->gsteps_n;
	double v = 0, pw = 1, D = 0, sum = 0, last = 0;

	for (int t = 0; t < N; t++) {
		double gr = ref->gsteps[i][(size_t)t * n + e];
		double d = fabs((double)par->gsteps[i][(size_t)t * n + e] - gr);

		v = o->beta2 * v + (1 - o->beta2) * gr * gr;
		pw *= o->beta2;
		D = d > D || isnan(d) ? d : D;
		last = 2 * o->lr * D / (sqrt(v / (1 - pw)) + o->eps);
		sum += last;
	}
	return sum + (cfg->steps - N) * last;
}

void verify_compare(const struct run_out *ref, const struct run_out *par, const struct run_cfg *rc,
		    struct verify_result *v)
{
	const struct gpt_config *cfg = &rc->model;

	memset(v, 0, sizeof *v);
	v->loss_tol = 1e-5;
	v->grad_tol = 1e-5;
	v->param_tol = 1e-4;
	v->later_tol = 1e-3;
	for (int s = 0; s < ref->steps; s++) {
		double e = rel_err(&par->loss[s], &ref->loss[s], 1, NULL, &v->loss_abs);

		if (e > v->loss_err || (isnan(e) && !isnan(v->loss_err))) {
			v->loss_err = e;
			v->loss_step = s;
		}
	}
	for (int i = 0; i < ref->np; i++) {
		size_t n = gpt_tensor_numel(cfg, i);
		unsigned char *keep = emu_xmalloc(n ? n : 1);
		double pmax = 0, eg, ep;

		for (size_t e = 0; e < n; e++)
			pmax = fabs((double)ref->params[i][e]) > pmax
				       ? fabs((double)ref->params[i][e])
				       : pmax;
		/* moved by rounding: the run's gradient differences could have moved it by
		 * half the tolerance */
		for (size_t e = 0; e < n; e++) {
			keep[e] = !(drift(ref, par, rc, i, e, n) > 0.5 * v->param_tol * pmax);
			v->noise_params += !keep[e];
		}
		v->param_entries += n;
		eg = rel_err(par->grad0[i], ref->grad0[i], n, NULL, &v->grad_abs);
		for (int t = 1; t < ref->gsteps_n && t < par->gsteps_n; t++) {
			double el = rel_err(par->gsteps[i] + (size_t)t * n,
					    ref->gsteps[i] + (size_t)t * n, n, NULL, &v->later_abs);

			if (el > v->later_err || (isnan(el) && !isnan(v->later_err))) {
				v->later_err = el;
				v->later_step = t;
				v->later_tensor = i;
			}
		}
		ep = rel_err(par->params[i], ref->params[i], n, keep, &v->param_abs);
		free(keep);

		if (eg > v->grad_err || (isnan(eg) && !isnan(v->grad_err))) {
			v->grad_err = eg;
			v->grad_tensor = i;
		}
		if (ep > v->param_err || (isnan(ep) && !isnan(v->param_err))) {
			v->param_err = ep;
			v->param_tensor = i;
		}
	}
	compare_routes(ref, par, cfg, v);
	v->passed = v->loss_err <= v->loss_tol && v->grad_err <= v->grad_tol &&
		    v->later_err <= v->later_tol && v->param_err <= v->param_tol;
}
