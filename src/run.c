/* run: the training loops of run.h. */
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "par_dp.h"
#include "par_tp.h"
#include "util.h"

void run_alloc(struct run_out *o, const struct run_cfg *cfg, int snapshot)
{
	int np = gpt_num_tensors(&cfg->model), dp = cfg->mesh.size[MESH_DP];

	memset(o, 0, sizeof *o);
	o->steps = cfg->steps;
	o->accum = cfg->gbs / cfg->mbs;
	o->np = np;
	o->loss = emu_xcalloc((size_t)cfg->steps, sizeof *o->loss);
	o->loss_part = emu_xcalloc((size_t)cfg->steps * (size_t)dp, sizeof *o->loss_part);
	o->step_ns = emu_xcalloc((size_t)cfg->steps, sizeof *o->step_ns);
	o->compute_ns = emu_xcalloc((size_t)cfg->steps, sizeof *o->compute_ns);
	o->snapshot = snapshot;
	if (!snapshot)
		return;
	if (cfg->model.num_experts > 0) {
		o->route_mb = (size_t)cfg->model.num_layers * (size_t)cfg->mbs *
			      (size_t)cfg->model.seq_len * (size_t)cfg->model.moe_top_k;
		o->routes = emu_xcalloc((size_t)cfg->steps * (size_t)(cfg->gbs / cfg->mbs) *
						o->route_mb,
					sizeof *o->routes);
	}
	o->grad0 = emu_xcalloc((size_t)np, sizeof *o->grad0);
	o->params = emu_xcalloc((size_t)np, sizeof *o->params);
	for (int i = 0; i < np; i++) {
		size_t n = gpt_tensor_numel(&cfg->model, i);

		o->grad0[i] = emu_xcalloc(n ? n : 1, sizeof(float));
		o->params[i] = emu_xcalloc(n ? n : 1, sizeof(float));
	}
}

void run_free(struct run_out *o)
{
	for (int i = 0; o->snapshot && i < o->np; i++) {
		free(o->grad0[i]);
		free(o->params[i]);
	}
	free(o->grad0);
	free(o->params);
	free(o->loss);
	free(o->loss_part);
	free(o->step_ns);
	free(o->compute_ns);
	free(o->routes);
	memset(o, 0, sizeof *o);
}

int run_check(const struct run_cfg *cfg, int ndev, char *err, size_t n)
{
	const struct mesh *m = &cfg->mesh;
	int dp = m->size[MESH_DP], tp = m->size[MESH_TP], accum;

	if (m->world != ndev) {
		snprintf(err, n, "the mesh needs %d devices and the cluster has %d", m->world,
			 ndev);
		return -1;
	}
	if (gpt_config_check(&cfg->model, err, n) || tp_check(&cfg->model, tp, err, n))
		return -1;
	if (cfg->gbs % cfg->mbs) {
		snprintf(err, n,
			 "--global-batch-size %d is not a multiple of --micro-batch-size %d",
			 cfg->gbs, cfg->mbs);
		return -1;
	}
	if (cfg->sp && tp == 1) {
		snprintf(err, n,
			 "--sequence-parallel needs --tp > 1 (it splits the tensor-parallel "
			 "group's work)");
		return -1;
	}
	if (cfg->sp && cfg->mbs * cfg->model.seq_len % tp) {
		snprintf(err, n,
			 "--sequence-parallel: --tp %d does not divide the %d tokens of a "
			 "micro-batch",
			 tp, cfg->mbs * cfg->model.seq_len);
		return -1;
	}
	accum = cfg->gbs / cfg->mbs;
	if (accum % dp) {
		snprintf(err, n,
			 "--global-batch-size %d is %d micro-batches of %d, which --dp %d does not "
			 "divide",
			 cfg->gbs, accum, cfg->mbs, dp);
		return -1;
	}
	return 0;
}

/* Keeps the routing decisions of micro-batch mb (in global order) from its layers' la. */
static void record_routes(struct run_out *o, const struct run_cfg *cfg, uint64_t mb,
			  const struct gpt_layer_acts *la)
{
	int L = cfg->model.num_layers;
	size_t per = o->route_mb / (size_t)L;
	int *out = o->routes ? o->routes + mb * o->route_mb : NULL;

	for (int l = 0; out && l < L; l++) {
		const struct moe_acts *a = &la[l].moe;

		if (!gpt_layer_is_moe(&cfg->model, l) || !a->choice)
			continue;
		for (size_t e = 0; e < per; e++)
			out[l * per + e] = a->slot[e] >= 0 ? a->choice[e] : -1 - a->choice[e];
	}
}

/* ------------------------------------------------------------------------------------ */
/* The parallel run                                                                     */

struct job {
	const struct run_cfg *cfg;
	struct run_out *o;
};

static int logging(const struct run_cfg *cfg, int s)
{
	return cfg->log_every && (s == 0 || s == cfg->steps - 1 || (s + 1) % cfg->log_every == 0);
}

static void progress(const struct run_cfg *cfg, const struct run_out *o, struct emu_dev *d, int s,
		     double loss, int64_t wall)
{
	if (emu_dev_dry_run(d))
		printf("step %5d/%d | loss     n/a | %9.3f ms/step virtual (compute %.3f) | %8.1f "
		       "ms wall\n",
		       s + 1, cfg->steps, (double)o->step_ns[s] / 1e6,
		       (double)o->compute_ns[s] / 1e6, (double)wall / 1e6);
	else
		printf("step %5d/%d | loss %7.4f | %9.3f ms/step virtual (compute %.3f) | %8.1f ms "
		       "wall\n",
		       s + 1, cfg->steps, loss, (double)o->step_ns[s] / 1e6,
		       (double)o->compute_ns[s] / 1e6, (double)wall / 1e6);
	fflush(stdout);
}

static int par_device(struct emu_dev *d, void *arg)
{
	struct job *j = arg;
	const struct run_cfg *cfg = j->cfg;
	struct run_out *o = j->o;
	const struct mesh *me = &cfg->mesh;
	int rank = emu_dev_id(d), tp = me->size[MESH_TP], dp = me->size[MESH_DP];
	int tpr = mesh_coord(me, rank, MESH_TP), dpr = mesh_coord(me, rank, MESH_DP);
	int accum = cfg->gbs / cfg->mbs, local = accum / dp, BT = cfg->mbs * cfg->model.seq_len, rc;
	int tp_devs[1024], dp_devs[1024];
	int *tok = emu_xcalloc((size_t)BT, sizeof *tok),
	    *tgt = emu_xcalloc((size_t)BT, sizeof *tgt);
	struct emu_group *gt, *gd;
	struct tp_model m;
	struct dp_state s;
	struct kctx k;

	memset(&m, 0, sizeof m);
	memset(&s, 0, sizeof s);
	mesh_group(me, rank, MESH_TP, tp_devs);
	mesh_group(me, rank, MESH_DP, dp_devs);
	if (!(gt = emu_group_get(d, tp_devs, tp)) || !(gd = emu_group_get(d, dp_devs, dp))) {
		rc = EMU_EINVAL;
		goto out;
	}
	kctx_init(&k, d, cfg->prec);
	coll_set_wire_bytes(d, k.ab);
	if ((rc = tp_init(&m, &k, &cfg->model, cfg->mbs, cfg->seed, gt, tp, tpr, (size_t)dp,
			  cfg->sp, cfg->zero, NULL)) ||
	    (rc = dp_init(&s, &m, gd, dp, dpr, cfg->zero, cfg->bucket_bytes, k.ab)))
		goto out;
	m.drop_allreduce = cfg->broken == 1;
	s.drop_bucket = cfg->broken == 2;
	s.drop_gather = cfg->broken == 3;
	for (int step = 0; step < cfg->steps; step++) {
		int64_t t0 = emu_now(d), c0 = emu_compute_ns(d), w0 = emu_wall_ns();
		double f0 = emu_flops(d), loss = 0;

		tp_zero_grad(&m);
		for (int a = 0; a < local; a++) {
			float l;

			if (cfg->data)
				data_batch(cfg->data, cfg->seed,
					   (uint64_t)step * accum + (uint64_t)dpr * local + a,
					   cfg->mbs, cfg->model.seq_len, tok, tgt);
			s.armed = a == local - 1;
			if ((rc = tp_forward(&m, tok, tgt, &l)))
				goto out;
			if (tpr == 0)
				record_routes(o, cfg,
					      (uint64_t)step * accum + (uint64_t)dpr * local + a,
					      m.own.la);
			if ((rc = tp_backward(&m, 1.0f / accum)) || (rc = dp_after_backward(&s)))
				goto out;
			loss += (double)l / accum;
		}
		if ((rc = dp_sync_grads(&s)))
			goto out;
		if (step == 0 && o->snapshot)
			dp_copy_grads(&s, o->grad0);
		{
			double norm;

			if ((rc = dp_step(&s, &cfg->opt, step + 1, &norm)))
				goto out;
		}
		if (tpr == 0)
			o->loss_part[dpr * cfg->steps + step] = (float)loss;
		if (rank == 0) {
			o->step_ns[step] = emu_now(d) - t0;
			o->compute_ns[step] = emu_compute_ns(d) - c0;
			o->flops_step = emu_flops(d) - f0;
		}
		if (logging(cfg, step)) {
			/* Every replica's share is written: a host-side barrier (no virtual
			 * time) lets device 0 print the global batch's loss. */
			if ((rc = emu_barrier(d)))
				goto out;
			if (rank == 0) {
				double total = 0;

				for (int r2 = 0; r2 < dp; r2++)
					total += o->loss_part[r2 * cfg->steps + step];
				progress(cfg, o, d, step, total, emu_wall_ns() - w0);
			}
		}
	}
	if (o->snapshot)
		dp_copy_weights(&s, o->params);
out:
	dp_free(&s);
	tp_free(&m);
	free(tok);
	free(tgt);
	return rc;
}

static void sum_losses(const struct run_cfg *cfg, struct run_out *o)
{
	for (int s = 0; s < cfg->steps; s++) {
		double l = 0;

		for (int r = 0; r < cfg->mesh.size[MESH_DP]; r++)
			l += o->loss_part[r * cfg->steps + s];
		o->loss[s] = (float)l;
	}
}

int run_parallel(struct emu_cluster *c, const struct run_cfg *cfg, struct run_out *o)
{
	struct job j = {cfg, o};
	int rc = emu_cluster_run(c, par_device, &j);

	sum_losses(cfg, o);
	return rc;
}

/* ------------------------------------------------------------------------------------ */
/* The serial reference                                                                 */

static int ref_device(struct emu_dev *d, void *arg)
{
	struct job *j = arg;
	const struct run_cfg *cfg = j->cfg;
	struct run_out *o = j->o;
	int accum = cfg->gbs / cfg->mbs, BT = cfg->mbs * cfg->model.seq_len, rc;
	int *tok = emu_xcalloc((size_t)BT, sizeof *tok),
	    *tgt = emu_xcalloc((size_t)BT, sizeof *tgt);
	struct kctx k;
	struct gpt m;

	kctx_init(&k, d, cfg->prec);
	if ((rc = gpt_init(&m, &k, &cfg->model, cfg->mbs, cfg->seed)))
		goto out;
	for (int s = 0; s < cfg->steps; s++) {
		int64_t t0 = emu_now(d), c0 = emu_compute_ns(d);
		double loss = 0;

		gpt_zero_grad(&m);
		for (int a = 0; a < accum; a++) {
			if (cfg->data)
				data_batch(cfg->data, cfg->seed, (uint64_t)s * accum + a, cfg->mbs,
					   cfg->model.seq_len, tok, tgt);
			loss += (double)gpt_forward(&m, tok, tgt) / accum;
			if (kctx_math(&k))
				record_routes(o, cfg, (uint64_t)s * accum + a, m.la);
			gpt_backward(&m, 1.0f / accum);
		}
		if (s == 0 && o->snapshot && kctx_math(&k))
			for (int i = 0; i < m.np; i++)
				if (m.p[i].n)
					memcpy(o->grad0[i], m.p[i].g.data,
					       m.p[i].n * sizeof(float));
		gpt_update(&m, &cfg->opt, s + 1);
		o->loss_part[s] = (float)loss;
		o->step_ns[s] = emu_now(d) - t0;
		o->compute_ns[s] = emu_compute_ns(d) - c0;
	}
	if (o->snapshot && kctx_math(&k))
		for (int i = 0; i < m.np; i++)
			if (m.p[i].n)
				memcpy(o->params[i], m.p[i].w.data, m.p[i].n * sizeof(float));
out:
	gpt_free(&m);
	free(tok);
	free(tgt);
	return rc;
}

int run_reference(struct emu_cluster *c, const struct run_cfg *cfg, struct run_out *o)
{
	struct run_cfg one = *cfg;
	struct job j = {&one, o};
	int rc;

	mesh_init(&one.mesh, 1, 1, 1, 1, 1);
	j.cfg = &one;
	rc = emu_cluster_run(c, ref_device, &j);
	sum_losses(&one, o);
	return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Comparison                                                                           */

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
		double gmax = 0, eg, ep;

		for (size_t e = 0; e < n; e++)
			gmax = fabs((double)ref->grad0[i][e]) > gmax
				       ? fabs((double)ref->grad0[i][e])
				       : gmax;
		for (size_t e = 0; e < n; e++) {
			keep[e] = fabs((double)ref->grad0[i][e]) >= 1e-6 * gmax;
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
