/* run: the training loops of run.h. */
#include "run/run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "par/dp.h"
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

/* One device's pipeline stage: what sched_exec's callbacks work on. */
struct pipe {
	const struct run_cfg *cfg;
	struct run_out *o;
	struct tp_model *m;
	struct emu_dev *d;
	int stage, p, v, Lb, step, dpr, tpr, local, accum;
	int *dev;                   /* [p]: the device of each stage of this pipeline */
	struct tp_acts *acts;       /* [m v]: each (micro-batch, chunk)'s activations */
	struct coll_req **act_req;  /* [m v]: the send of its output */
	struct tensor *din;         /* [m v]: the gradient of its input, until sent */
	struct coll_req **grad_req; /* [m v]: that send */
	int *tok, *tgt;
	double loss;
	struct coll_req **reqs; /* helix: the sends to wait for */
	int nreq, maxreq;
};

/* Micro-batch mb's index among the whole run's, its tokens and targets loaded into
 * pp->tok, pp->tgt when need (the stages with the embeddings or the loss). */
static uint64_t load_batch(struct pipe *pp, int mb, int need)
{
	const struct run_cfg *cfg = pp->cfg;
	uint64_t g = (uint64_t)pp->step * pp->accum + (uint64_t)pp->dpr * pp->local + mb;

	if (need && cfg->data)
		data_batch(cfg->data, cfg->seed, g, cfg->mbs, cfg->model.seq_len, pp->tok, pp->tgt);
	return g;
}

static struct tp_acts *pipe_acts(struct pipe *pp, int mb, int j, int *rc)
{
	struct tp_acts *a = &pp->acts[mb * pp->v + j / pp->p];
	int l0 = j * pp->Lb;

	*rc = a->la ? 0 : tp_acts_alloc(pp->m, a, l0, l0 + pp->Lb);
	return a;
}

static int pipe_fwd(void *ctx, int mb, int j)
{
	struct pipe *pp = ctx;
	const struct run_cfg *cfg = pp->cfg;
	int rc;
	struct tp_acts *a = pipe_acts(pp, mb, j, &rc);
	uint64_t g = load_batch(pp, mb, a->l0 == 0 || a->l1 == cfg->model.num_layers);
	float l;

	if (rc)
		return rc;
	if ((rc = tp_forward_part(pp->m, a, pp->tok, pp->tgt, &l)))
		return rc;
	pp->loss += (double)l / pp->accum;
	if (pp->tpr == 0)
		record_routes(pp->o, cfg, g, a->la);
	return 0;
}

static int pipe_bwd(void *ctx, int mb, int j, int input, int weight)
{
	struct pipe *pp = ctx;
	int x = mb * pp->v + j / pp->p, rc;
	struct tp_acts *a = &pp->acts[x];
	size_t n = (size_t)pp->m->Ml * (size_t)pp->cfg->model.hidden;

	if ((rc = tp_backward_part(pp->m, a, 1.0f / pp->accum, input, weight)))
		return rc;
	if (input && a->l0 > 0) { /* the input's gradient, for the previous stage */
		if ((rc = tensor_alloc(&pp->m->k, &pp->din[x], MEM_COMM, n,
				       "pipeline gradient out")))
			return rc;
		if (pp->din[x].data)
			memcpy(pp->din[x].data, pp->m->dres.data, n * sizeof(float));
	}
	if (!weight)
		return 0;
	/* done with this micro-batch: its output went to the next stage, whose gradient
	 * has come back, so that send is over */
	if (pp->act_req[x] && (rc = coll_wait(pp->d, pp->act_req[x])))
		return rc;
	pp->act_req[x] = NULL;
	tp_acts_free(pp->m, a);
	return 0;
}

static int pipe_send(void *ctx, int mb, int j, enum sched_msg what, int peer)
{
	struct pipe *pp = ctx;
	int x = mb * pp->v + j / pp->p;
	struct tp_acts *a = &pp->acts[x];
	size_t n = (size_t)pp->m->Ml * (size_t)pp->cfg->model.hidden;

	int rc;

	if (what == SCHED_ACT)
		return coll_isend(pp->d, pp->dev[peer], a->la[a->l1 - 1].res3.data, n,
				  &pp->act_req[x]);
	/* the send holds its own copy (eager, emu/coll.h): the gradient's buffer can go */
	rc = coll_isend(pp->d, pp->dev[peer], pp->din[x].data, n, &pp->grad_req[x]);
	tensor_free(&pp->m->k, &pp->din[x]);
	return rc;
}

static int pipe_recv(void *ctx, int mb, int j, enum sched_msg what, int peer)
{
	struct pipe *pp = ctx;
	size_t n = (size_t)pp->m->Ml * (size_t)pp->cfg->model.hidden;
	int rc;
	struct tp_acts *a = pipe_acts(pp, mb, j, &rc);

	if (rc)
		return rc;
	if (what == SCHED_ACT)
		return coll_recv(pp->d, pp->dev[peer], a->enc.data, n);
	if ((rc = tensor_alloc(&pp->m->k, &a->dout, MEM_ACT, n, "d stage output")))
		return rc;
	return coll_recv(pp->d, pp->dev[peer], a->dout.data, n);
}

static int pipe_wait(void *ctx)
{
	struct pipe *pp = ctx;
	int rc = 0;

	for (int x = 0; x < pp->local * pp->v; x++) {
		int rc2 = pp->grad_req[x] ? coll_wait(pp->d, pp->grad_req[x]) : 0;

		rc = rc ? rc : rc2;
		pp->grad_req[x] = NULL;
		tensor_free(&pp->m->k, &pp->din[x]);
	}
	return rc;
}

/* ------------------------------------------------------------------------------------ */
/* HelixPipe's blocks on a stage (schedule.h, par_tp.h)                                 */

/* Block j of micro-batch mb's activations (allocated on first use). */
static struct tp_acts *hx_acts(struct pipe *pp, int mb, int j, int *rc)
{
	struct tp_acts *a = &pp->acts[mb * pp->o->sched.nb + j];

	*rc = a->la ? 0 : tp_helix_alloc(pp->m, a, j);
	return a;
}

/* Hands what block jf produced to block jt on the same stage (no message): its output
 * (grad 0) or its input's gradient (grad 1). */
static int hx_pass(struct pipe *pp, struct tp_acts *from, int jf, struct tp_acts *to, int jt,
		   int grad)
{
	struct tensor *out[2], *in[2];
	int n = tp_helix_msg(pp->m, from, jf, grad, 1, out);
	int n2 = tp_helix_msg(pp->m, to, jt, grad, 0, in);

	if (n < 0 || n2 < 0)
		return n < 0 ? n : n2;
	for (int i = 0; i < n; i++)
		if (in[i]->data && out[i]->data)
			memcpy(in[i]->data, out[i]->data, out[i]->n * sizeof(float));
	return 0;
}

static int hx_fwd(void *ctx, int mb, int j)
{
	struct pipe *pp = ctx;
	const struct run_cfg *cfg = pp->cfg;
	const struct sched *sc = &pp->o->sched;
	int rc;
	struct tp_acts *a = hx_acts(pp, mb, j, &rc);
	uint64_t g = load_batch(pp, mb, j == 0 || j == sc->nb - 1);
	float l;

	if (rc)
		return rc;
	if ((rc = tp_helix_fwd(pp->m, a, j, pp->tok, pp->tgt, &l)))
		return rc;
	pp->loss += (double)l / pp->accum;
	if (pp->tpr == 0 && j % 2 == 0)
		record_routes(pp->o, cfg, g, a->la);
	/* the next block here takes the output now, so that recomputation can let it go */
	if (j + 1 < sc->nb && sched_stage(sc, mb, j + 1) == pp->stage) {
		struct tp_acts *next = hx_acts(pp, mb, j + 1, &rc);

		if (rc || (rc = hx_pass(pp, a, j, next, j + 1, 0)))
			return rc;
		tp_helix_drop(pp->m, a, j);
	} else if (j + 1 == sc->nb) {
		tp_helix_drop(pp->m, a, j);
	}
	return 0;
}

static int hx_bwd(void *ctx, int mb, int j, int input, int weight)
{
	struct pipe *pp = ctx;
	const struct sched *sc = &pp->o->sched;
	struct tp_acts *a = &pp->acts[mb * sc->nb + j];
	int rc;

	(void)input;
	(void)weight;
	if ((rc = tp_helix_bwd(pp->m, a, j, 1.0f / pp->accum)))
		return rc;
	if (j > 0 && sched_stage(sc, mb, j - 1) != pp->stage)
		return 0; /* its send takes the input's gradient, then the block goes */
	if (j > 0 && (rc = hx_pass(pp, a, j, &pp->acts[mb * sc->nb + j - 1], j - 1, 1)))
		return rc;
	tp_acts_free(pp->m, a);
	return 0;
}

static int hx_send(void *ctx, int mb, int j, enum sched_msg what, int peer)
{
	struct pipe *pp = ctx;
	struct tp_acts *a = &pp->acts[mb * pp->o->sched.nb + j];
	struct tensor *part[2];
	int n = tp_helix_msg(pp->m, a, j, what == SCHED_GRAD, 1, part), rc = 0;

	for (int i = 0; i < n && !rc; i++) {
		EMU_ASSERT(pp->nreq < pp->maxreq);
		rc = coll_isend(pp->d, pp->dev[peer], part[i]->data, part[i]->n,
				&pp->reqs[pp->nreq++]);
	}
	if (what == SCHED_GRAD) /* the sends hold copies: the block is done */
		tp_acts_free(pp->m, a);
	else
		tp_helix_drop(pp->m, a, j);
	return n < 0 ? n : rc;
}

static int hx_recv(void *ctx, int mb, int j, enum sched_msg what, int peer)
{
	struct pipe *pp = ctx;
	struct tensor *part[2];
	int rc, n;
	struct tp_acts *a = hx_acts(pp, mb, j, &rc);

	if (rc)
		return rc;
	n = tp_helix_msg(pp->m, a, j, what == SCHED_GRAD, 0, part);
	for (int i = 0; i < n && !rc; i++)
		rc = coll_recv(pp->d, pp->dev[peer], part[i]->data, part[i]->n);
	return n < 0 ? n : rc;
}

static int hx_wait(void *ctx)
{
	struct pipe *pp = ctx;
	int rc = 0;

	for (int i = 0; i < pp->nreq; i++) {
		int rc2 = coll_wait(pp->d, pp->reqs[i]);

		rc = rc ? rc : rc2;
	}
	pp->nreq = 0;
	return rc;
}

/* One step's micro-batches through this stage's list; the tied embedding's gradient is
 * then summed between the first and the last stage (Megatron's embedding group). */
static int pipe_step(struct pipe *pp, struct emu_group *emb, long long *span)
{
	static const struct sched_ops ops = {pipe_fwd, pipe_bwd, pipe_send, pipe_recv, pipe_wait};
	static const struct sched_ops helix = {hx_fwd, hx_bwd, hx_send, hx_recv, hx_wait};
	struct tp_model *m = pp->m;
	int rc = sched_exec(&pp->o->sched, pp->stage, pp->d,
			    pp->o->sched.kind == SCHED_HELIX ? &helix : &ops, pp, span);

	if (!rc && emb)
		rc = coll_all_reduce(pp->d, emb, m->p[0].g, m->p[0].g, m->p[0].n, COLL_SUM);
	return rc;
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

static int par_device(struct emu_dev *d, void *arg)
{
	struct job *j = arg;
	const struct run_cfg *cfg = j->cfg;
	struct run_out *o = j->o;
	const struct mesh *me = &cfg->mesh;
	int rank = emu_dev_id(d), tp = me->size[MESH_TP], dp = me->size[MESH_DP];
	int pp = me->size[MESH_PP], L = cfg->model.num_layers;
	int tpr = mesh_coord(me, rank, MESH_TP), dpr = mesh_coord(me, rank, MESH_DP);
	int ppr = mesh_coord(me, rank, MESH_PP);
	int accum = cfg->gbs / cfg->mbs, local = accum / dp, BT = cfg->mbs * cfg->model.seq_len, rc;
	int tp_devs[1024], dp_devs[1024], pp_devs[1024];
	int *tok = emu_xcalloc((size_t)BT, sizeof *tok),
	    *tgt = emu_xcalloc((size_t)BT, sizeof *tgt);
	unsigned char *held = emu_xcalloc((size_t)L + 1, 1);
	struct emu_group *gt, *gd, *gp = NULL, *emb = NULL;
	struct tp_part part = {ppr == 0, ppr == pp - 1, held};
	struct pipe pl = {0};
	struct tp_model m;
	struct dp_state s;
	struct kctx k;

	memset(&m, 0, sizeof m);
	memset(&s, 0, sizeof s);
	mesh_group(me, rank, MESH_TP, tp_devs);
	mesh_group(me, rank, MESH_DP, dp_devs);
	mesh_group(me, rank, MESH_PP, pp_devs);
	if (!(gt = emu_group_get(d, tp_devs, tp)) || !(gd = emu_group_get(d, dp_devs, dp))) {
		rc = EMU_EINVAL;
		goto out;
	}
	if (pp > 1) {
		int ends[2] = {pp_devs[0], pp_devs[pp - 1]};

		int helix = cfg->schedule == SCHED_HELIX, nacts;

		/* helix keeps both ends of the tied embedding on stage 0 */
		if (helix)
			part.first = part.last = ppr == 0;
		if (!(gp = emu_group_get(d, pp_devs, pp)) ||
		    (!helix && (part.first || part.last) && !(emb = emu_group_get(d, ends, 2)))) {
			rc = EMU_EINVAL;
			goto out;
		}
		pl = (struct pipe){.cfg = cfg,
				   .o = o,
				   .m = &m,
				   .d = d,
				   .stage = ppr,
				   .p = pp,
				   .v = o->sched.v,
				   .Lb = L / (pp * o->sched.v),
				   .dpr = dpr,
				   .tpr = tpr,
				   .local = local,
				   .accum = accum,
				   .dev = pp_devs,
				   .tok = tok,
				   .tgt = tgt};
		if (helix) { /* unit c (pre of layer c, post of layer c - 1) on stage c % pp */
			for (int l = 0; l < L; l++)
				held[l] = (l % pp == ppr ? TP_PART_PRE : 0) |
					  ((l + 1) % pp == ppr ? TP_PART_POST : 0);
			pl.maxreq = 4 * local * o->sched.nb;
			pl.reqs = emu_xcalloc((size_t)pl.maxreq, sizeof *pl.reqs);
		} else {
			for (int c = 0; c < pl.v; c++)
				for (int l = 0; l < pl.Lb; l++)
					held[(c * pp + ppr) * pl.Lb + l] =
						TP_PART_PRE | TP_PART_POST;
		}
		nacts = helix ? local * o->sched.nb : local * pl.v;
		pl.acts = emu_xcalloc((size_t)nacts, sizeof *pl.acts);
		pl.act_req = emu_xcalloc((size_t)local * pl.v, sizeof *pl.act_req);
		pl.grad_req = emu_xcalloc((size_t)local * pl.v, sizeof *pl.grad_req);
		pl.din = emu_xcalloc((size_t)local * pl.v, sizeof *pl.din);
	}
	kctx_init(&k, d, cfg->prec);
	coll_set_wire_bytes(d, k.ab);
	m.recompute = (enum tp_recompute)cfg->recompute;
	m.flash = cfg->flash;
	m.mlp_chunks = cfg->mlp_chunks;
	if ((rc = tp_init(&m, &k, &cfg->model, cfg->mbs, cfg->seed, gt, tp, tpr, (size_t)dp,
			  cfg->sp, cfg->zero, pp > 1 ? &part : NULL)) ||
	    (rc = dp_init(&s, &m, gd, dp, dpr, cfg->zero, cfg->bucket_bytes, k.ab)))
		goto out;
	s.pg = gp;
	m.drop_allreduce = cfg->broken == 1;
	s.drop_bucket = cfg->broken == 2;
	s.drop_gather = cfg->broken == 3;
	for (int step = 0; step < cfg->steps; step++) {
		int64_t t0 = emu_now(d), c0 = emu_compute_ns(d), w0 = emu_wall_ns();
		double f0 = emu_flops(d), loss = 0;
		int keep = pp > 1 && tpr == 0 && dpr == 0 && step == cfg->steps - 1;

		tp_zero_grad(&m);
		if (pp > 1) {
			/* buckets go after the pipeline is drained (dp_sync_grads) */
			pl.step = step;
			pl.loss = 0;
			if ((rc = pipe_step(&pl, emb, keep ? o->span[ppr] : NULL)))
				goto out;
			loss = pl.loss;
			if (keep)
				o->bubble_ns[ppr] = stage_bubble(&o->sched, ppr, o->span[ppr]);
		}
		for (int a = 0; pp == 1 && a < local; a++) {
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
			o->loss_part[(ppr * dp + dpr) * cfg->steps + step] = (float)loss;
		if (rank == 0) {
			o->step_ns[step] = emu_now(d) - t0;
			o->compute_ns[step] = emu_compute_ns(d) - c0;
			o->flops_step = emu_flops(d) - f0;
		}
		if (logging(cfg, step)) {
			/* Every replica's and stage's share is written: a host-side barrier (no
			 * virtual time) lets device 0 print the global batch's loss. */
			if ((rc = emu_barrier(d)))
				goto out;
			if (rank == 0) {
				double total = 0;

				for (int r2 = 0; r2 < dp * pp; r2++)
					total += o->loss_part[r2 * cfg->steps + step];
				progress(cfg, o, d, step, total, emu_wall_ns() - w0);
			}
		}
	}
	if (o->snapshot)
		dp_copy_weights(&s, o->params);
out:
	for (int x = 0; pl.acts && x < local * (cfg->schedule == SCHED_HELIX ? o->sched.nb : pl.v);
	     x++)
		if (pl.acts[x].la)
			tp_acts_free(&m, &pl.acts[x]);
	free(pl.acts);
	free(pl.reqs);
	free(pl.act_req);
	free(pl.grad_req);
	free(pl.din);
	dp_free(&s);
	tp_free(&m);
	free(held);
	free(tok);
	free(tgt);
	return rc;
}

static void sum_losses(const struct run_cfg *cfg, struct run_out *o)
{
	for (int s = 0; s < cfg->steps; s++) {
		double l = 0;

		for (int r = 0; r < cfg->mesh.size[MESH_DP] * cfg->mesh.size[MESH_PP]; r++)
			l += o->loss_part[r * cfg->steps + s];
		o->loss[s] = (float)l;
	}
}

int run_parallel(struct emu_cluster *c, const struct run_cfg *cfg, struct run_out *o)
{
	struct job j = {cfg, o};
	int pp = cfg->mesh.size[MESH_PP], rc;

	if (pp > 1) {
		run_cfg_schedule(cfg, &o->sched);
		o->bubble_ns = emu_xcalloc((size_t)pp, sizeof *o->bubble_ns);
		o->span = emu_xcalloc((size_t)pp, sizeof *o->span);
		for (int s = 0; s < pp; s++)
			o->span[s] = emu_xcalloc(2 * (size_t)o->sched.n[s] + 1, sizeof **o->span);
	}
	rc = emu_cluster_run(c, par_device, &j);

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
