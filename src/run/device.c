/* run/device: one device's share of a parallel run (run_parallel in run/run.h): its
 * groups from the mesh, its part of the model (par/model.h) with data parallelism and
 * ZeRO over it (par/dp.h), and the step loop: the micro-batches through the plain
 * executor, or through the pipeline stage (pipe/stage.h), then the gradient sync and the
 * optimizer step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "par/dp.h"
#include "pipe/stage.h"
#include "run/ckpt.h"
#include "run/fold.h"
#include "run/run.h"
#include "util.h"

struct job {
	const struct run_cfg *cfg;
	struct run_out *o;
	struct ckpt *ck; /* --save: the full tensors the devices fill, or NULL */
};

/* Whether step s of the run (from 0; iteration step0 + s + 1) prints a progress line. */
static int logging(const struct run_cfg *cfg, int s)
{
	return cfg->log_every &&
	       (s == 0 || s == cfg->steps - 1 || (cfg->step0 + s + 1) % cfg->log_every == 0);
}

static void progress(const struct run_cfg *cfg, const struct run_out *o, struct emu_dev *d, int s,
		     double loss, int64_t wall)
{
	if (emu_dev_dry_run(d))
		printf("step %5d/%d | loss     n/a | %9.3f ms/step virtual (compute %.3f) | %8.1f "
		       "ms wall\n",
		       cfg->step0 + s + 1, cfg->step0 + cfg->steps, (double)o->step_ns[s] / 1e6,
		       (double)o->compute_ns[s] / 1e6, (double)wall / 1e6);
	else
		printf("step %5d/%d | loss %7.4f | %9.3f ms/step virtual (compute %.3f) | %8.1f ms "
		       "wall\n",
		       cfg->step0 + s + 1, cfg->step0 + cfg->steps, loss,
		       (double)o->step_ns[s] / 1e6, (double)o->compute_ns[s] / 1e6,
		       (double)wall / 1e6);
	fflush(stdout);
}

/* A stage's bubble from its actions' record: the time between its first and last
 * compute action that is in none. */
static int64_t stage_bubble(const struct sched *sc, int s, const long long *span)
{
	long long first = -1, last = 0, busy = 0;

	for (int i = 0; i < sc->n[s]; i++) {
		if (sc->a[s][i].op > SCHED_BW)
			continue;
		first = first < 0 ? span[2 * i] : first;
		last = span[2 * i + 1];
		busy += span[2 * i + 1] - span[2 * i];
	}
	return first < 0 ? 0 : last - first - busy;
}

/* What one device knows of its place in the run. */
struct rank {
	const struct run_cfg *cfg;
	struct run_out *o;
	int step, tpr, dpr, local, accum; /* step: of this run (iteration step0 + step + 1) */
	struct run_rows rows; /* its rows of each sequence (the model's, once it is made) */
	int *armed;           /* its data-parallel hooks post buckets (par_dp_state.armed) */
};

/* Micro-batch mb of this step on this replica: its index among the run's, and its
 * tokens and targets when need (the data's index counts the iterations before the run
 * too: a resumed run reads on where the saving run stopped). */
static uint64_t rank_batch(void *ctx, int mb, int need, int *tok, int *tgt)
{
	struct rank *rk = ctx;
	const struct run_cfg *cfg = rk->cfg;
	uint64_t g = (uint64_t)rk->step * rk->accum + (uint64_t)rk->dpr * rk->local + mb;

	if (need && cfg->data)
		data_batch(cfg->data, cfg->seed, g + (uint64_t)cfg->step0 * rk->accum, cfg->mbs,
			   cfg->model.seq_len, tok, tgt);
	return g;
}

/* A pipeline stage's last micro-batch: with --overlap-grad-reduce, ZeRO 0-1's buckets go
 * as its backward finishes them (stages 2-3 post in every micro-batch anyway). */
static void rank_last_backward(void *ctx, int on)
{
	struct rank *rk = ctx;

	*rk->armed = on && rk->cfg->overlap_grad == 1;
}

/* Tensor-parallel rank 0 records the routing (the other ranks route alike), or each rank
 * its own rows' (run_ep_mode ROWS). */
static void rank_forwarded(void *ctx, uint64_t g, const struct par_acts *a)
{
	struct rank *rk = ctx;
	int own = run_ep_mode(rk->cfg) == RUN_EP_ROWS;

	for (int s = 0; (rk->tpr == 0 || own) && s < par_nsub(a); s++)
		run_record_routes(rk->o, rk->cfg, g, s, par_nsub(a), &rk->rows,
				  par_sub((struct par_acts *)a, s)->la, a->l0, a->l1);
}

/* Step's gradients into o->gsteps (the full tensors, each device its part). */
static void copy_grads(const struct par_dp_state *s, struct run_out *o, int step)
{
	float **at = emu_xcalloc((size_t)o->np, sizeof *at);

	for (int i = 0; i < o->np; i++)
		at[i] = o->gsteps[i] + (size_t)step * gpt_tensor_numel(&s->m->cfg, i);
	par_dp_copy_grads(s, at);
	free(at);
}

/* This device's part of the configuration. */
static struct par_cfg par_cfg_of(const struct run_cfg *cfg)
{
	struct par_cfg pc = {
		.model = cfg->model,
		.mbs = cfg->mbs,
		.prec = cfg->prec,
		.tp = cfg->mesh.size[MESH_TP],
		.sp = cfg->sp,
		.cp = cfg->mesh.size[MESH_CP],
		.cp_comm = cfg->cp_comm,
		.cp_contiguous = cfg->cp_contiguous,
		.ep = cfg->ep > 1 ? cfg->ep : 1,
		.ep_tp = run_ep_mode(cfg) == RUN_EP_TP,
		.ep_rows = run_ep_mode(cfg) == RUN_EP_ROWS,
		.ep_dispatch = cfg->ep_dispatch,
		.bug = cfg->bug,
		.zero = cfg->zero,
		.pad = cfg->mesh.size[MESH_DP] * cfg->mesh.size[MESH_CP],
		.edp = run_ep_mode(cfg) == RUN_EP_DP
			       ? cfg->mesh.size[MESH_DP] * cfg->mesh.size[MESH_CP] / cfg->ep
		       : run_ep_mode(cfg) == RUN_EP_ROWS
			       ? cfg->mesh.world / cfg->mesh.size[MESH_PP] / cfg->ep
			       : 0,
		.recompute = cfg->recompute,
		.flash = cfg->flash,
		.ce = cfg->ce,
		.mlp_chunks = cfg->mlp_chunks,
		.overlap = cfg->tp_overlap,
		.sync_dgrad = cfg->tp_sync_dgrad,
		.tpo = cfg->tp_comm_overlap,
		.split_bwd = cfg->mesh.size[MESH_PP] > 1 &&
			     (cfg->schedule == SCHED_ZBH1 || cfg->schedule == SCHED_ZBH2),
		.tpf_layers = cfg->tpf_layers,
		.tpf = cfg->tpf,
		.bucket_bytes = cfg->bucket_bytes,
		.bucket_params = cfg->bucket_params,
		.buckets = run_bucketed(cfg),
		.chunks = cfg->mesh.size[MESH_PP] > 1 && cfg->schedule == SCHED_INTERLEAVED
				  ? cfg->vpp
				  : 1,
		.fp32_grads = cfg->fp32_grads,
		.overlap_param_gather = cfg->overlap_param_gather,
		.seed = cfg->seed,
		.batch0 = (uint64_t)cfg->step0 * (uint64_t)(cfg->gbs / cfg->mbs)};

	if (cfg->tpo_cfg_set)
		pc.tpo_cfg = cfg->tpo_cfg;
	else
		par_tpo_defaults(&pc.tpo_cfg);
	return pc;
}

/* Oases's mixed degrees: of the tp group (tp_devs, this rank r), the tpf ranks r shares
 * the first layers with (tp ranks j tpf .. j tpf + tpf - 1, j = r / tpf: part j of the
 * batch), and the merge group of the ranks with the same shard (r % tpf) of every part. */
static int first_groups(struct emu_dev *d, const struct run_cfg *cfg, const int *tp_devs, int r,
			struct par_groups *g)
{
	int t = cfg->tpf, parts = cfg->mesh.size[MESH_TP] / t, rc = 0;
	int *merge = emu_xcalloc((size_t)parts, sizeof *merge);

	for (int j = 0; j < parts; j++)
		merge[j] = tp_devs[j * t + r % t];
	if (!(g->tpf = emu_group_get(d, tp_devs + r / t * t, t)) ||
	    !(g->merge = emu_group_get(d, merge, parts)))
		rc = EMU_EINVAL;
	free(merge);
	return rc;
}

/* Expert parallelism's grid (Megatron's parallel folding): of the n ranks the experts
 * fold over (devs, this rank d: the dp x cp group that reduces the dense gradients, or
 * the pipeline stage's tp x cp x dp ranks), the ep consecutive ranks that hold a layer's
 * experts between them (d / ep), and the n / ep ranks that hold the same ones (d % ep). */
static int expert_groups(struct emu_dev *dev, const struct run_cfg *cfg, const int *devs, int n,
			 int d, struct par_groups *g)
{
	int ep = cfg->ep, edp = n / ep, rc = 0;
	int *edp_devs = emu_xcalloc((size_t)edp, sizeof *edp_devs);

	for (int j = 0; j < edp; j++)
		edp_devs[j] = devs[j * ep + d % ep];
	g->ep_rank = d % ep;
	g->edp_rank = d / ep;
	if (!(g->ep = emu_group_get(dev, devs + d / ep * ep, ep)) ||
	    !(g->edp = emu_group_get(dev, edp_devs, edp)))
		rc = EMU_EINVAL;
	free(edp_devs);
	return rc;
}

/* The groups of the MoE layers (par/model.h's par_groups): who routes a micro-batch
 * together (the cp group gc, or the tp x cp group when each rank routes its own rows),
 * and the experts' grid. */
static int route_and_expert_groups(struct emu_dev *d, const struct run_cfg *cfg, const int *dp_devs,
				   struct emu_group *gc, struct par_groups *g)
{
	const struct mesh *me = &cfg->mesh;
	int id = emu_dev_id(d), tp = me->size[MESH_TP], cp = me->size[MESH_CP];
	int W = tp * cp * me->size[MESH_DP], rc = 0;
	enum run_ep_mode mode = run_ep_mode(cfg);

	if (cfg->model.num_experts == 0)
		return 0;
	g->route = gc;
	g->route_rank = g->cp_rank;
	if (mode == RUN_EP_ROWS) {
		int *devs = emu_xcalloc((size_t)W, sizeof *devs);

		mesh_group2(me, id, MESH_TP, MESH_CP, devs);
		g->route_rank = g->cp_rank * tp + g->tp_rank;
		if (!(g->route = emu_group_get(d, devs, tp * cp)))
			rc = EMU_EINVAL;
		for (int i = 0; i < W; i++) /* the stage's ranks: pp is the mesh's outermost */
			devs[i] = id - id % W + i;
		if (!rc)
			rc = expert_groups(d, cfg, devs, W, id % W, g);
		free(devs);
		return rc;
	}
	if (mode == RUN_EP_DP)
		rc = expert_groups(d, cfg, dp_devs, me->size[MESH_DP] * cp, g->dp_rank, g);
	return rc;
}

/* A checkpoint of iteration it: every device's part of the weights and of Adam's state
 * into the full tensors, then device 0 writes the file (host time only: the cluster's
 * storage is not emulated). Host-side barriers, as for the progress lines. */
static int save(struct emu_dev *d, const struct par_dp_state *s, struct job *j, int it)
{
	int rc;

	par_dp_copy_weights(s, j->ck->w);
	par_dp_copy_state(s, j->ck->m, j->ck->v);
	if ((rc = emu_barrier(d)))
		return rc;
	if (emu_dev_id(d) == 0 && (rc = ckpt_save_at(d, j->cfg, j->ck, it)))
		return rc;
	return emu_barrier(d);
}

/* Whether an injected fault kills device id as step (from 1) begins. */
static int fails_at(const struct run_cfg *cfg, int id, int step)
{
	for (int i = 0; i < cfg->nfail; i++)
		if (cfg->fail[i].dev == id && cfg->fail[i].step == step)
			return 1;
	return 0;
}

static int par_device(struct emu_dev *d, void *arg)
{
	struct job *j = arg;
	const struct run_cfg *cfg = j->cfg;
	struct run_out *o = j->o;
	const struct mesh *me = &cfg->mesh;
	int id = emu_dev_id(d), tp = me->size[MESH_TP], dp = me->size[MESH_DP];
	int pp = me->size[MESH_PP], cp = me->size[MESH_CP], L = cfg->model.num_layers;
	int ppr = mesh_coord(me, id, MESH_PP), cpr = mesh_coord(me, id, MESH_CP);
	int accum = cfg->gbs / cfg->mbs, rc;
	int *tp_devs = emu_xcalloc((size_t)tp, sizeof *tp_devs);
	int *cp_devs = emu_xcalloc((size_t)cp, sizeof *cp_devs);
	int *dp_devs = emu_xcalloc((size_t)dp * cp, sizeof *dp_devs);
	int *pp_devs = emu_xcalloc((size_t)pp, sizeof *pp_devs);
	int *tok = emu_xcalloc((size_t)cfg->mbs * cfg->model.seq_len, sizeof *tok);
	int *tgt = emu_xcalloc((size_t)cfg->mbs * cfg->model.seq_len, sizeof *tgt);
	unsigned char *held = emu_xcalloc((size_t)L + 1, 1);
	struct rank rk = {cfg,
			  o,
			  0,
			  mesh_coord(me, id, MESH_TP),
			  mesh_coord(me, id, MESH_DP),
			  accum / dp,
			  accum,
			  {NULL, 0, 0, 0, 0},
			  NULL};
	const struct pipe_io io = {rank_batch, rank_forwarded, rank_last_backward, &rk};
	const struct par_cfg pc = par_cfg_of(cfg);
	const struct par_source src = {cfg->seed, cfg->resume ? cfg->resume->w : NULL};
	struct emu_group *gt, *gd, *gc = NULL, *gp = NULL, *emb = NULL;
	struct par_part part;
	struct pipe_stage ps = {0};
	struct par_groups groups;
	struct par_model m;
	struct par_dp_state s;

	memset(&m, 0, sizeof m);
	memset(&s, 0, sizeof s);
	mesh_group(me, id, MESH_TP, tp_devs);
	mesh_group(me, id, MESH_CP, cp_devs);
	mesh_group2(me, id, MESH_CP, MESH_DP, dp_devs); /* gradients: over dp x cp */
	mesh_group(me, id, MESH_PP, pp_devs);
	if (!(gt = emu_group_get(d, tp_devs, tp)) || !(gd = emu_group_get(d, dp_devs, dp * cp)) ||
	    (cp > 1 && !(gc = emu_group_get(d, cp_devs, cp)))) {
		rc = EMU_EINVAL;
		goto out;
	}
	if (pp > 1) {
		int ends[2] = {pp_devs[0], pp_devs[pp - 1]};

		pipe_stage_part(&o->sched, ppr, L, held, &part);
		/* Megatron's embedding group: the two ends of the tied embedding, unless one
		 * stage holds both (HelixPipe) */
		if (!(gp = emu_group_get(d, pp_devs, pp)) ||
		    (part.first != part.last && !(emb = emu_group_get(d, ends, 2)))) {
			rc = EMU_EINVAL;
			goto out;
		}
	}
	groups = (struct par_groups){.dev = d,
				     .tp = gt,
				     .tp_rank = rk.tpr,
				     .dp = gd,
				     .dp_rank = rk.dpr * cp + cpr,
				     .cp = gc,
				     .cp_rank = cpr,
				     .pp = gp};
	if ((rc = route_and_expert_groups(d, cfg, dp_devs, gc, &groups)))
		goto out;
	if (cfg->tpf_layers && (rc = first_groups(d, cfg, tp_devs, rk.tpr, &groups)))
		goto out;
	if ((rc = par_model_init(&m, &pc, &groups, pp > 1 ? &part : NULL, &src)))
		goto out;
	{ /* the rows this device routes, and its histogram slice */
		int own = run_ep_mode(cfg) == RUN_EP_ROWS;

		rk.rows = (struct run_rows){m.pos, m.T, own ? m.row0 : 0, own ? m.Ml : m.B * m.T,
					    cpr * tp + (own ? rk.tpr : 0)};
	}
	coll_set_wire_bytes(d, m.k.ab);
	if ((rc = par_dp_init(&s, &m, &groups)))
		goto out;
	rk.armed = &s.armed;
	s.pipelined = pp > 1;
	s.tied_after = pp > 1 && (part.first || part.last);
	if (cfg->resume)
		par_dp_load_state(&s, cfg->resume->m, cfg->resume->v);
	if (pp > 1) {
		pipe_stage_init(&ps, &o->sched, ppr, &m, d, pp_devs, rk.local, accum * cp, &io);
		ps.scatter = cfg->pp_scatter;
	}
	for (int step = 0; step < cfg->steps; step++) {
		int64_t t0 = emu_now(d), c0 = emu_compute_ns(d), e0 = coll_exposed_ns(d),
			w0 = emu_wall_ns();
		double f0 = emu_flops(d), loss = 0, norm;
		int it = cfg->step0 + step + 1; /* the iteration, from 1 */

		if (fails_at(cfg, id, it)) { /* (the report says what its peers wait for) */
			emu_dev_die(d, "failed as step %d began (--inject-fault fail:%d@%d)", it,
				    id, it);
			rc = 0;
			goto out;
		}
		int keep = pp > 1 && rk.tpr == 0 && rk.dpr == 0 && cpr == 0 &&
			   step == cfg->steps - 1; /* one device of each stage records */

		rk.step = step;
		par_zero_grad(&m);
		if (pp > 1) {
			/* buckets go after the pipeline is drained (par_dp_sync_grads) */
			if ((rc = pipe_stage_step(&ps, emb, keep ? o->span[ppr] : NULL)))
				goto out;
			loss = ps.loss;
			if (keep)
				o->bubble_ns[ppr] = stage_bubble(&o->sched, ppr, o->span[ppr]);
		}
		for (int a = 0; pp == 1 && a < rk.local; a++) {
			uint64_t g = rank_batch(&rk, a, 1, tok, tgt);
			float l;

			s.armed = cfg->overlap_grad == 1 && a == rk.local - 1;
			par_acts_begin(&m, &m.own, g);
			if ((rc = par_forward(&m, tok, tgt, &l)))
				goto out;
			rank_forwarded(&rk, g, &m.own);
			/* each context-parallel rank's loss is over its part of the tokens */
			if ((rc = par_backward(&m, 1.0f / ((float)accum * cp))) ||
			    (rc = par_dp_after_backward(&s)))
				goto out;
			loss += (double)l / ((double)accum * cp);
		}
		if (cfg->stop_diverged && !isfinite(loss)) {
			rc = emu_dev_fail_as(d, RUN_DIVERGED,
					     "the loss is %g at step %d: training diverged (try "
					     "a lower --lr or --clip-grad)",
					     loss, it);
			goto out;
		}
		if ((rc = par_dp_sync_grads(&s)))
			goto out;
		if (o->snapshot && step < o->gsteps_n)
			copy_grads(&s, o, step);
		if ((rc = par_dp_step(&s, &cfg->opt, it, &norm)) ||
		    (rc = emu_dev_check(d))) /* (the clock's horizon, say: no collective saw it) */
			goto out;
		if (rk.tpr == 0)
			o->loss_part[((ppr * dp + rk.dpr) * cp + cpr) * cfg->steps + step] =
				(float)loss;
		o->dev_steps[id] = step + 1; /* (its share written: run_parallel's steps_done) */
		if (id == 0) {
			o->step_ns[step] = emu_now(d) - t0;
			o->compute_ns[step] = emu_compute_ns(d) - c0;
			o->exposed_ns[step] = coll_exposed_ns(d) - e0;
			o->flops_step = emu_flops(d) - f0;
		}
		if (logging(cfg, step)) {
			/* Every replica's and stage's share is written: a host-side barrier (no
			 * virtual time) lets device 0 print the global batch's loss. */
			if ((rc = emu_barrier(d)))
				goto out;
			if (id == 0) {
				double total = 0;

				for (int r2 = 0; r2 < dp * pp * cp; r2++)
					total += o->loss_part[r2 * cfg->steps + step];
				progress(cfg, o, d, step, total, emu_wall_ns() - w0);
			}
		}
		if (ckpt_saves_at(cfg, it) &&
		    ((rc = par_dp_gather_owed(&s)) || (rc = save(d, &s, j, it))))
			goto out;
	}
	/* (the last step's weights, still to be gathered with --overlap-param-gather) */
	if ((rc = par_dp_gather_owed(&s)))
		goto out;
	if (o->snapshot)
		par_dp_copy_weights(&s, o->params);
out:
	if (ps.sc)
		pipe_stage_free(&ps);
	par_dp_free(&s);
	par_model_free(&m);
	free(held);
	free(tok);
	free(tgt);
	free(tp_devs);
	free(cp_devs);
	free(dp_devs);
	free(pp_devs);
	return rc;
}

int run_parallel(struct emu_cluster *c, const struct run_cfg *cfg, struct run_out *o)
{
	struct job j = {cfg, o, NULL};
	struct ckpt ck;
	/* (faults make devices unlike their mirrors: not folded) */
	int pp = cfg->mesh.size[MESH_PP], rc,
	    fold = cfg->fold && emu_cluster_config(c)->dry_run && !cfg->nfail &&
		   !emu_cluster_config(c)->nslow;
	int *rep = fold ? emu_xmalloc((size_t)cfg->mesh.world * sizeof *rep) : NULL;

	if (pp > 1) {
		run_cfg_schedule(cfg, &o->sched);
		o->bubble_ns = emu_xcalloc((size_t)pp, sizeof *o->bubble_ns);
		o->span = emu_xcalloc((size_t)pp, sizeof *o->span);
		for (int s = 0; s < pp; s++)
			o->span[s] = emu_xcalloc(2 * (size_t)o->sched.n[s] + 1, sizeof **o->span);
	}
	if (fold)
		run_fold_plan(cfg, &emu_cluster_config(c)->topo, rep);
	if (emu_cluster_set_fold(c, rep))
		emu_die("run_parallel: the fold plan was refused");
	o->devices_run = emu_cluster_devices_run(c);
	if (cfg->save) {
		ckpt_alloc(&ck, cfg, 0);
		j.ck = &ck;
	}
	rc = emu_cluster_run(c, par_device, &j);
	if (j.ck)
		ckpt_free(&ck);
	o->steps_done = cfg->steps; /* the least any device run finished */
	for (int i = 0; i < cfg->mesh.world; i++)
		if ((!rep || rep[i] == i) && o->dev_steps[i] < o->steps_done)
			o->steps_done = o->dev_steps[i];
	emu_cluster_set_fold(c, NULL);
	free(rep);
	run_sum_losses(cfg, o);
	return rc;
}
