/* run: the training loops of run.h. */
#include "run/run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "par/tp.h"
#include "util.h"

void run_alloc(struct run_out *o, const struct run_cfg *cfg, int snapshot)
{
	int np = gpt_num_tensors(&cfg->model), dp = cfg->mesh.size[MESH_DP];

	memset(o, 0, sizeof *o);
	o->steps = cfg->steps;
	o->accum = cfg->gbs / cfg->mbs;
	o->np = np;
	o->loss = emu_xcalloc((size_t)cfg->steps, sizeof *o->loss);
	o->loss_part =
		emu_xcalloc((size_t)cfg->steps * (size_t)dp * (size_t)cfg->mesh.size[MESH_PP],
			    sizeof *o->loss_part);
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
	for (int s = 0; o->span && s < o->sched.p; s++)
		free(o->span[s]);
	free(o->span);
	free(o->bubble_ns);
	sched_free(&o->sched);
	memset(o, 0, sizeof *o);
}

/* cfg's pipeline schedule. HelixPipe's lists are ordered by the modelled cost of an
 * attention's forward against a parameter unit's: 4 s^2 h FLOPs against the layer's
 * 24 s h^2, that is s / 6h. */
void run_cfg_schedule(const struct run_cfg *cfg, struct sched *sc)
{
	int pp = cfg->mesh.size[MESH_PP], m = cfg->gbs / cfg->mbs / cfg->mesh.size[MESH_DP];

	if (cfg->schedule == SCHED_HELIX)
		sched_build_helix(sc, pp, m, cfg->model.num_layers / pp,
				  (double)cfg->model.seq_len / (6.0 * cfg->model.hidden));
	else
		sched_build(sc, cfg->schedule, pp, m, cfg->vpp);
}

int run_check(const struct run_cfg *cfg, int ndev, char *err, size_t n)
{
	const struct mesh *m = &cfg->mesh;
	int dp = m->size[MESH_DP], tp = m->size[MESH_TP], pp = m->size[MESH_PP], accum;

	if (m->world != ndev) {
		snprintf(err, n, "the mesh needs %d devices and the cluster has %d", m->world,
			 ndev);
		return -1;
	}
	if (gpt_config_check(&cfg->model, err, n) || par_tp_check(&cfg->model, tp, err, n))
		return -1;
	if (cfg->mlp_chunks > 1 && pp > 1 &&
	    (cfg->schedule == SCHED_ZBH1 || cfg->schedule == SCHED_ZBH2)) {
		snprintf(err, n,
			 "--mlp-chunks with --schedule %s: the chunked MLP computes its weight "
			 "gradients with its input gradients, which zero-bubble schedules split",
			 sched_name(cfg->schedule));
		return -1;
	}
	if (cfg->mlp_chunks > cfg->mbs * cfg->model.seq_len) {
		snprintf(err, n, "--mlp-chunks %d: more chunks than the %d tokens of a micro-batch",
			 cfg->mlp_chunks, cfg->mbs * cfg->model.seq_len);
		return -1;
	}
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
	if (pp > 1) {
		struct sched sc;
		int rc;

		if (cfg->zero > 1) {
			snprintf(err, n,
				 "--zero-stage %d with --pp %d: pipelines run with ZeRO stage 0 or "
				 "1 "
				 "in this build (stages 2 and 3 reduce every micro-batch)",
				 cfg->zero, pp);
			return -1;
		}
		if (sched_constraints(cfg->schedule, pp, accum / dp, cfg->vpp,
				      cfg->model.num_layers, err, n))
			return -1;
		if (cfg->schedule == SCHED_HELIX && cfg->recompute == PAR_RECOMPUTE_SELECTIVE) {
			snprintf(
				err, n,
				"--recompute selective with --schedule helix: HelixPipe recomputes "
				"without attention, which is --recompute full (or none)");
			return -1;
		}
		/* the schedule is proven before it runs */
		run_cfg_schedule(cfg, &sc);
		rc = sched_check(&sc, err, n);
		sched_free(&sc);
		if (rc)
			return -1;
	} else if (cfg->vpp > 1) {
		snprintf(err, n, "virtual pipeline stages need --pp > 1");
		return -1;
	}
	return 0;
}

/* Keeps the routing decisions of micro-batch mb (in global order) from its layers' la. */
void run_record_routes(struct run_out *o, const struct run_cfg *cfg, uint64_t mb,
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

void run_sum_losses(const struct run_cfg *cfg, struct run_out *o)
{
	for (int s = 0; s < cfg->steps; s++) {
		double l = 0;

		for (int r = 0; r < cfg->mesh.size[MESH_DP] * cfg->mesh.size[MESH_PP]; r++)
			l += o->loss_part[r * cfg->steps + s];
		o->loss[s] = (float)l;
	}
}
