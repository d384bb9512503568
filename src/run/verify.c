/* run/verify: verify's comparison of a parallel run with the serial reference
 * (verify_compare in run/run.h; docs/formulas.md, Verification): the loss of every step, every
 * gradient of the first step and every parameter after the last, each by the norm-wise relative
 * error max |a - b| / max |b| per tensor, and the MoE routing decisions one by one. */
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

void verify_compare(const struct run_out *ref, const struct run_out *par,
		    const struct gpt_config *cfg, struct verify_result *v)
{
	memset(v, 0, sizeof *v);
	v->loss_tol = 1e-5;
	v->grad_tol = 1e-5;
	v->param_tol = 1e-4;
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
		double gmax = 0, gerr = 0, floor, eg, ep;

		for (size_t e = 0; e < n; e++) {
			double g = fabs((double)ref->grad0[i][e]);
			double d = fabs((double)par->grad0[i][e] - ref->grad0[i][e]);

			gmax = g > gmax ? g : gmax;
			gerr = d > gerr ? d : gerr;
		}
		/* zero to rounding: under 1e-6 of the largest, or within 8 times the worst
		 * difference the strategy's own rounding made in this tensor's gradient */
		floor = 1e-6 * gmax > 8 * gerr ? 1e-6 * gmax : 8 * gerr;
		for (size_t e = 0; e < n; e++) {
			keep[e] = fabs((double)ref->grad0[i][e]) >= floor;
			v->noise_params += !keep[e];
		}
		eg = rel_err(par->grad0[i], ref->grad0[i], n, NULL, &v->grad_abs);
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
		    v->param_err <= v->param_tol;
}
