/* run/oases_plan: Oases's search for tensor-parallel degrees, measured by dry-runs and
 * solved as a chain; see run/oases_plan.h. */
#include "run/oases_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "mem.h"
#include "par/layer.h"
#include "run/run.h"
#include "util.h"

/* ------------------------------------------------------------------------------------ */
/* The chain                                                                            */

/* Block i's costs at degree index k: attention blocks are even, MLP blocks odd. */
static const struct oases_block *blk(const struct oases_costs *c, int i, int k)
{
	return &c->blk[i % 2][k];
}

static double maxd(double a, double b)
{
	return a > b ? a : b;
}

/* What block i at degree k costs a step on its own: its forward compute against its
 * collective, its backward, its data-parallel reduction. */
static double own(const struct oases_costs *c, int i, int k)
{
	const struct oases_block *b = blk(c, i, k);

	return c->micro * (maxd(b->c, b->m) + 2 * maxd(b->b + b->r, b->mb)) + b->dp;
}

/* What joins block i at k to the next at k2 (k2 < 0: the end, the output layer at tp):
 * the next block's compute against this one's collective, and the edge. */
static double join(const struct oases_costs *c, int i, int k, int k2)
{
	double next = k2 >= 0 ? blk(c, i + 1, k2)->c : 0;
	int to = k2 >= 0 ? k2 : c->ndeg - 1;

	return c->micro * (maxd(next, blk(c, i, k)->m) + 2 * c->edge[k][to]);
}

/* The edge from the embeddings (at tp) into block 0 at k. */
static double start(const struct oases_costs *c, int k)
{
	return c->micro * 2 * c->edge[c->ndeg - 1][k];
}

double oases_cost(const struct oases_costs *c, const int *d, double *mem)
{
	int n = 2 * c->layers;
	double t = start(c, d[0]), bytes = 0;

	for (int i = 0; i < n; i++) {
		t += own(c, i, d[i]) + join(c, i, d[i], i + 1 < n ? d[i + 1] : -1);
		bytes += blk(c, i, d[i])->mem;
	}
	if (mem)
		*mem = bytes;
	return t;
}

int oases_mem_units(const struct oases_costs *c, double bytes)
{
	double u = ceil(bytes / c->mem_cap * OASES_MEM_UNITS);

	return u > OASES_MEM_UNITS + 1 ? OASES_MEM_UNITS + 1 : (int)u;
}

int oases_solve(const struct oases_costs *c, int *d, double *cost)
{
	const int n = 2 * c->layers, D = c->ndeg, U = OASES_MEM_UNITS + 1;
	double *cur = emu_xmalloc((size_t)D * U * sizeof *cur);
	double *nxt = emu_xmalloc((size_t)D * U * sizeof *nxt);
	signed char *back = emu_xmalloc((size_t)n * D * U);
	double best = INFINITY;
	int bk = -1, bu = -1;

	/* cur[k U + u]: the least cost of blocks 0..i with block i at degree k and u memory
	 * units used, the join to block i + 1 not yet counted */
	for (int x = 0; x < D * U; x++)
		cur[x] = INFINITY;
	for (int k = 0; k < D; k++) {
		int u = oases_mem_units(c, blk(c, 0, k)->mem);

		if (u < U)
			cur[k * U + u] = start(c, k) + own(c, 0, k);
	}
	for (int i = 1; i < n; i++) {
		for (int x = 0; x < D * U; x++)
			nxt[x] = INFINITY;
		for (int k = 0; k < D; k++) {
			int du = oases_mem_units(c, blk(c, i, k)->mem);
			double o = own(c, i, k);

			for (int k0 = 0; k0 < D; k0++) {
				double j = join(c, i - 1, k0, k);

				for (int u = 0; u + du < U; u++) {
					double v = cur[k0 * U + u] + j + o;

					if (v < nxt[k * U + u + du]) {
						nxt[k * U + u + du] = v;
						back[((size_t)i * D + k) * U + u + du] =
							(signed char)k0;
					}
				}
			}
		}
		memcpy(cur, nxt, (size_t)D * U * sizeof *cur);
	}
	for (int k = 0; k < D; k++)
		for (int u = 0; u < U; u++) {
			double v = cur[k * U + u] + join(c, n - 1, k, -1);

			if (v < best) {
				best = v;
				bk = k;
				bu = u;
			}
		}
	for (int i = n - 1; bk >= 0 && i >= 0; i--) { /* walk the choices back */
		int k0 = i ? back[((size_t)i * D + bk) * U + bu] : 0;

		d[i] = bk;
		bu -= oases_mem_units(c, blk(c, i, bk)->mem);
		bk = k0;
	}
	free(cur);
	free(nxt);
	free(back);
	if (!isfinite(best))
		return -1;
	*cost = best;
	return 0;
}

int oases_round(const struct oases_costs *c, int *K, int *T, double *cost)
{
	int n = 2 * c->layers, top = c->ndeg - 1, found = 0;
	int *d = emu_xcalloc((size_t)n, sizeof *d);

	for (int t = 0; t < c->ndeg; t++)
		for (int k = t == top ? 0 : 1; k <= (t == top ? 0 : c->layers); k++) {
			double mem, v;

			for (int i = 0; i < n; i++)
				d[i] = i < 2 * k ? t : top;
			v = oases_cost(c, d, &mem);
			if (mem > c->mem_cap || (found && v >= *cost))
				continue;
			found = 1;
			*cost = v;
			*K = k;
			*T = t;
		}
	free(d);
	return found ? 0 : -1;
}

/* ------------------------------------------------------------------------------------ */
/* Measuring                                                                            */

/* Time the device's collectives have taken so far. */
static int64_t comm_ns(const struct emu_dev *d)
{
	static const char *const ops[] = {"all-reduce", "reduce-scatter", "all-gather"};
	int64_t t = 0;

	for (int i = 0; i < 3; i++) {
		struct coll_stats s;

		if (!coll_stats_get(d, ops[i], &s))
			t += s.time_ns;
	}
	return t;
}

/* One layer at degree t on t devices, its micro-batch t / tp of the run's, under the
 * overlap (one sub-batch measured) and Oases's recomputation. */
struct probe {
	const struct run_cfg *cfg;
	int t;                     /* the degree */
	struct oases_block blk[2]; /* the attention's and the MLP's costs */
	double elems[2];           /* and their parameters' elements on a device */
};

static enum par_piece const fwd_order[] = {PAR_PRE, PAR_QKV, PAR_ATTN, PAR_PROJ,
					   PAR_MID, PAR_MLP, PAR_OUT};

static int block_of(enum par_piece p)
{
	return p >= PAR_MID; /* pre, qkv, attn, proj: the attention; the rest: the MLP */
}

static int probe_device(struct emu_dev *d, void *arg)
{
	struct probe *p = arg;
	const struct run_cfg *cfg = p->cfg;
	int t = p->t, id = emu_dev_id(d), rc;
	int *devs = emu_xcalloc((size_t)t, sizeof *devs);
	struct par_cfg pc = {.model = cfg->model,
			     .mbs = cfg->mbs * t / cfg->mesh.size[MESH_TP],
			     .prec = cfg->prec,
			     .tp = t,
			     .sp = cfg->sp,
			     .pad = 1,
			     .recompute = PAR_RECOMPUTE_OASES,
			     .flash = cfg->flash,
			     .ce = cfg->ce,
			     .mlp_chunks = cfg->mlp_chunks,
			     .overlap = PAR_OVERLAP_OASES,
			     .fp32_grads = cfg->fp32_grads};
	const struct par_source src = {cfg->seed, NULL};
	struct par_groups g = {.dev = d, .tp_rank = id};
	struct oases_block mine[2] = {{0}};
	double elems[2] = {0};
	struct par_model m;
	struct par_acts *a;
	struct par_work *w;
	unsigned ab = tensor_elem_bytes(cfg->prec, MEM_PARAM), gb = run_grad_bytes(cfg);
	unsigned ob = tensor_elem_bytes(cfg->prec, MEM_OPTIM);

	pc.model.num_layers = 1;
	for (int i = 0; i < t; i++)
		devs[i] = i;
	memset(&m, 0, sizeof m);
	if (!(g.tp = emu_group_get(d, devs, t)) || !(g.dp = emu_group_get(d, &id, 1))) {
		free(devs);
		return EMU_EINVAL;
	}
	free(devs);
	if ((rc = par_model_init(&m, &pc, &g, NULL, &src)))
		goto out;
	coll_set_wire_bytes(d, m.k.ab);
	a = par_sub(&m.own, 0);
	w = &m.work[0];
	for (int i = 0; i < 7 && !rc; i++) {
		int64_t c0 = emu_compute_ns(d), m0 = comm_ns(d);
		struct oases_block *b = &mine[block_of(fwd_order[i])];

		rc = par_layer_fwd(&m, w, a, 0, fwd_order[i]);
		b->c += (double)(emu_compute_ns(d) - c0);
		b->m += (double)(comm_ns(d) - m0);
		/* Oases's recomputation reruns ln1, qkv and the attention, then ln2 (with mid)
		 * and the MLP's refwd */
		if (fwd_order[i] < PAR_PROJ || fwd_order[i] == PAR_MID)
			b->r += (double)(emu_compute_ns(d) - c0);
	}
	if (!rc && m.plan[0].mlp->refwd) {
		int64_t c0 = emu_compute_ns(d);

		rc = m.plan[0].mlp->refwd(&m, m.plan[0].tp, w, par_la(a, 0), 0);
		mine[1].r += (double)(emu_compute_ns(d) - c0);
	}
	for (int i = 6; i >= 0 && !rc; i--) {
		int64_t c0 = emu_compute_ns(d), m0 = comm_ns(d);
		struct oases_block *b = &mine[block_of(fwd_order[i])];

		rc = par_layer_bwd(&m, w, a, 0, fwd_order[i], 1.0f, 1);
		b->b += (double)(emu_compute_ns(d) - c0);
		b->mb += (double)(comm_ns(d) - m0);
	}
	/* memory: each block's parameters at this degree, its state (Adam's over the run's dp
	 * with ZeRO), and what Oases's recomputation keeps of both sub-batches (res2 or res3,
	 * and under sp the gathered LayerNorm output) */
	for (int i = 2; i < 2 + LP_N && !rc; i++) {
		int w2 = i - 2, bk = w2 >= LP_LN2W;
		/* ZeRO shards over the run's data-parallel group, whatever the degree */
		double per = ab + gb + (double)ob / (cfg->zero >= 1 ? cfg->mesh.size[MESH_DP] : 1);

		mine[bk].mem += (double)m.p[i].n * per;
		elems[bk] += (double)m.p[i].n;
	}
	for (int bk = 0; bk < 2 && !rc; bk++) {
		double rows = (double)m.tpv[PAR_TPV_MODEL].Ml * PAR_NSUB;
		double full = (double)m.tpv[PAR_TPV_MODEL].B * m.T * PAR_NSUB;
		double abytes = tensor_elem_bytes(cfg->prec, MEM_ACT);

		mine[bk].mem += (rows + (cfg->sp ? full : 0)) * cfg->model.hidden * abytes;
	}
	if (!rc && id == 0) { /* device 0's, for all: the devices are alike */
		memcpy(p->blk, mine, sizeof mine);
		memcpy(p->elems, elems, sizeof elems);
	}
out:
	par_model_free(&m);
	return rc;
}

/* A collective on the ranks base, base + stride, ... (n of them) of the cluster: its
 * time, as device base sees it. */
struct coll_probe {
	int base, stride, n, gather;
	size_t count;
	int64_t ns;
	int wire;
};

static int coll_device(struct emu_dev *d, void *arg)
{
	struct coll_probe *p = arg;
	int id = emu_dev_id(d), rc, *devs;
	struct emu_group *g;
	int64_t t0;

	if (id < p->base || (id - p->base) % p->stride || (id - p->base) / p->stride >= p->n)
		return 0;
	devs = emu_xcalloc((size_t)p->n, sizeof *devs);
	for (int i = 0; i < p->n; i++)
		devs[i] = p->base + i * p->stride;
	g = emu_group_get(d, devs, p->n);
	free(devs);
	if (!g)
		return EMU_EINVAL;
	coll_set_wire_bytes(d, p->wire);
	t0 = emu_now(d);
	rc = p->gather ? coll_all_gather(d, g, NULL, NULL, p->count)
		       : coll_all_reduce(d, g, NULL, NULL, p->count, COLL_SUM);
	if (id == p->base)
		p->ns = emu_now(d) - t0;
	return rc;
}

static int coll_time(const struct emu_config *ecfg, struct coll_probe *p, double *ns)
{
	struct emu_config ec = *ecfg;
	struct emu_cluster *c;
	int rc;

	if (p->n <= 1) {
		*ns = 0;
		return 0;
	}
	ec.dry_run = 1;
	ec.trace = 0;
	c = emu_cluster_new(&ec);
	rc = emu_cluster_run(c, coll_device, p);
	emu_cluster_free(c);
	*ns = (double)p->ns;
	return rc;
}

/* A dry-run step of cfg with the given order, recomputation and mixed degrees: its step
 * time and device 0's peak memory, or a negative enum emu_err (OOM: it does not fit). */
static int dry_step(const struct emu_config *ecfg, const struct run_cfg *cfg, enum par_overlap ovl,
		    enum par_recompute rec, int K, int T, double *ns, double *peak)
{
	struct emu_config ec = *ecfg;
	struct run_cfg rc2 = *cfg;
	struct emu_cluster *c;
	struct run_out o;
	char err[256];
	int rc;

	rc2.tp_overlap = ovl;
	rc2.recompute = rec;
	rc2.tpf_layers = K;
	rc2.tpf = K ? T : 0;
	rc2.steps = 1;
	rc2.data = NULL;
	rc2.log_every = 0;
	if (run_check(&rc2, rc2.mesh.world, err, sizeof err))
		return EMU_EINVAL;
	ec.dry_run = 1;
	ec.trace = 0;
	c = emu_cluster_new(&ec);
	run_alloc(&o, &rc2, 0);
	rc = run_parallel(c, &rc2, &o);
	*ns = rc ? 0 : (double)o.step_ns[0];
	*peak = (double)mem_peak_total(emu_cluster_dev(c, 0));
	run_free(&o);
	emu_cluster_free(c);
	return rc;
}

/* The degrees the search may give a block: powers of two up to tp that cut the heads and
 * the MLP, leave each part two sub-batches and, under sp, whole rows. */
static int degrees(const struct run_cfg *cfg, int *deg)
{
	int tp = cfg->mesh.size[MESH_TP], n = 0;

	for (int t = 1; t <= tp && n < OASES_MAX_DEG; t *= 2) {
		int B = cfg->mbs * t / tp;

		if (tp % t || cfg->model.heads % t || cfg->model.ffn % t || cfg->mbs * t % tp ||
		    B % PAR_NSUB || (cfg->sp && t > 1 && B / PAR_NSUB * cfg->model.seq_len % t))
			continue;
		deg[n++] = t;
	}
	return n > 0 && deg[n - 1] == tp ? n : 0;
}

int oases_plan(const struct emu_config *ecfg, const struct run_cfg *cfg, struct oases_result *res,
	       char *err, size_t n)
{
	struct oases_costs *c = &res->costs;
	int tp = cfg->mesh.size[MESH_TP], N = cfg->mesh.world, rc = 0, top;
	double peak, base;
	size_t h = (size_t)cfg->model.hidden, S = (size_t)cfg->model.seq_len;

	memset(res, 0, sizeof *res);
	if (cfg->mesh.size[MESH_PP] > 1) {
		snprintf(err, n, "pemu plan --oases: pipelines are not in its space (--pp 1)");
		return EMU_EINVAL;
	}
	if (cfg->model.num_layers > 1024) {
		snprintf(err, n, "pemu plan --oases: it plans up to 1024 layers, not %d",
			 cfg->model.num_layers);
		return EMU_EINVAL;
	}
	if (cfg->model.num_experts > 0) {
		snprintf(err, n,
			 "pemu plan --oases: MoE models are not in its space (--tp-first refuses "
			 "MoE layers among the first)");
		return EMU_EINVAL;
	}
	if (tp & (tp - 1)) {
		snprintf(err, n,
			 "pemu plan --oases: --tp %d is not a power of two (the degrees are)", tp);
		return EMU_EINVAL;
	}
	c->layers = cfg->model.num_layers;
	c->micro = cfg->gbs / cfg->mbs / cfg->mesh.size[MESH_DP];
	if (!(c->ndeg = degrees(cfg, c->deg))) {
		snprintf(err, n,
			 "pemu plan --oases: --tp %d does not cut the heads, the MLP and the "
			 "micro-batch of %d into two sub-batches (Oases's overlap)",
			 tp, cfg->mbs);
		return EMU_EINVAL;
	}
	top = c->ndeg - 1;
	for (int k = 0; k < c->ndeg && !rc; k++) {
		struct probe p;
		struct emu_config ec = *ecfg;
		struct emu_cluster *cl;

		memset(&p, 0, sizeof p);
		p.cfg = cfg;
		p.t = c->deg[k];
		ec.ndev = c->deg[k];
		ec.dry_run = 1;
		ec.trace = 0;
		ec.mem_cap = 1ULL << 60; /* what fits is the chain's constraint, not the probe's */
		cl = emu_cluster_new(&ec);
		if ((rc = emu_cluster_run(cl, probe_device, &p)))
			snprintf(err, n, "pemu plan --oases: measuring degree %d: %s", c->deg[k],
				 emu_cluster_report(cl));
		emu_cluster_free(cl);
		for (int b = 0; b < 2 && !rc; b++) {
			/* the block's gradients over its data-parallel group: ranks q, q + t,
			 * ... (Megatron's order, tp fastest) */
			struct coll_probe dp = {0,
						c->deg[k],
						N / c->deg[k],
						0,
						(size_t)p.elems[b],
						0,
						(int)run_grad_bytes(cfg)};

			c->blk[b][k] = p.blk[b];
			rc = coll_time(ecfg, &dp, &c->blk[b][k].dp);
		}
	}
	/* the edges: a part of one sub-batch's rows gathered over the ranks that merge
	 * (none under sequence parallelism, whose rows stay) */
	for (int k = 0; k < c->ndeg && !rc; k++)
		for (int k2 = k + 1; k2 < c->ndeg && !rc && !cfg->sp; k2++) {
			struct coll_probe ag = {0,
						c->deg[k],
						c->deg[k2] / c->deg[k],
						1,
						(size_t)cfg->mbs * c->deg[k] / tp / PAR_NSUB * S *
							h,
						0,
						(int)tensor_elem_bytes(cfg->prec, MEM_ACT)};

			rc = coll_time(ecfg, &ag, &c->edge[k][k2]);
			c->edge[k2][k] = c->edge[k][k2];
		}
	if (rc)
		return rc;
	/* what the blocks do not hold (the embeddings, the output layer, the scratch) from
	 * the uniform plan's dry-run, off the cap */
	peak = 0;
	if (dry_step(ecfg, cfg, PAR_OVERLAP_OASES, PAR_RECOMPUTE_OASES, 0, 0, &res->uniform_ns,
		     &peak))
		res->uniform_ns = 0; /* it does not run (or fit): the chain may still find one */
	base = peak - c->layers * (c->blk[0][top].mem + c->blk[1][top].mem);
	c->mem_cap = 0.95 * (double)(ecfg->mem_cap ? ecfg->mem_cap : ecfg->topo.gpu.hbm_bytes) -
		     (base > 0 ? base : 0);
	if (c->mem_cap <= 0 || oases_solve(c, res->d, &res->best_ns) ||
	    oases_round(c, &res->K, &res->T, &res->rounded_ns)) {
		snprintf(err, n,
			 "pemu plan --oases: no assignment of degrees fits in 0.95 of the %s "
			 "device memory",
			 ecfg->topo.gpu.name);
		return EMU_EOOM;
	}
	res->T = c->deg[res->T];
	if (res->K == 0 || res->T == tp) {
		res->K = 0;
		res->T = tp;
	}
	res->rK = res->K;
	res->rT = res->T;
	dry_step(ecfg, cfg, PAR_OVERLAP_NONE, PAR_RECOMPUTE_FULL, 0, 0, &res->megatron_ns, &peak);
	rc = dry_step(ecfg, cfg, PAR_OVERLAP_OASES, PAR_RECOMPUTE_OASES, res->K, res->T,
		      &res->checked_ns, &res->checked_peak);
	if (rc)
		snprintf(err, n,
			 "pemu plan --oases: the rounded plan --tp-first %d:%d does not run "
			 "(%s)",
			 res->K, res->T, emu_err_name(rc));
	/* the dry-run has the last word: one degree throughout, if that ran faster */
	if (!rc && res->K && res->uniform_ns > 0 && res->uniform_ns < res->checked_ns) {
		res->fell_back = 1;
		res->K = 0;
		res->T = tp;
		rc = dry_step(ecfg, cfg, PAR_OVERLAP_OASES, PAR_RECOMPUTE_OASES, 0, 0,
			      &res->checked_ns, &res->checked_peak);
	}
	return rc;
}
