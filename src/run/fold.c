/* run/fold: which devices a dry-run need not run (emu_cluster_set_fold in cluster.h).
 *
 * In a dry-run nothing depends on data, so two ranks that hold equal shares of the model
 * make the same calls with the same shapes. Two folds of the mesh are of that kind:
 *   - data parallelism: every replica is replica 0. Under expert parallelism over the
 *     data-parallel ranks (without cp) each holds other experts, but as many, and a
 *     dry-run routes uniformly: where every expert gets as many rows (M k a multiple of
 *     E), each rank sends, receives and computes the same, and the ranks that run hold
 *     every expert group's and expert-data-parallel group's representative. Under ZeRO
 *     each replica holds another shard, but
 *     the shards are equal in size (each bucket is padded to a multiple of dp), the
 *     optimizer step and the gradient norm charge one kernel a shard (models/optim.h),
 *     and the gradients a shard holds partial over tp are summed in one all-reduce as
 *     long on every replica (par/dp.c): the replicas make the same calls on the same
 *     shapes;
 *   - tensor parallelism: ranks 2..tp-1 are rank 1. Rank 0 is its own class: it owns the
 *     replicated parameters (their norm terms) and adds the row-parallel biases.
 * They give the same virtual times only if the hardware is as symmetric as the ranks: a
 * device and the one it is folded onto must see groups of the same shape (slowest link,
 * nodes spanned, members a node) along every dimension, and the same link to every
 * other stage of their pipeline. The plan checks that for every device and drops a fold
 * that fails it. */
#include "run/fold.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The plan's scratch: two groups' members, and each group's shape once known. */
struct plan {
	const struct mesh *me;
	const struct topo *t;
	int *ga, *gb;
	int *shape[MESH_NDIM]; /* [world][3] by the group's first rank; -1: not yet */
	int ep;                /* expert parallelism over dp: its size (else 0) */
};

/* What the time of a collective over the group of x along dim (members in g) depends
 * on: its slowest link, and how it spreads over nodes. */
static const int *shape(struct plan *p, int x, int dim, const int *g)
{
	int c[MESH_NDIM], *sh;

	for (int d = 0; d < MESH_NDIM; d++)
		c[d] = d == dim ? 0 : mesh_coord(p->me, x, (enum mesh_dim)d);
	sh = &p->shape[dim][3 * mesh_rank(p->me, c)];
	if (sh[0] < 0) {
		sh[0] = (int)topo_group_link_class(p->t, g, p->me->size[dim]);
		sh[1] = topo_group_nodes(p->t, g, p->me->size[dim], &sh[2]);
	}
	return sh;
}

/* Whether devices a and b see the same hardware along every dimension of the mesh. */
static int alike(struct plan *p, int a, int b)
{
	for (int dim = 0; dim < MESH_NDIM; dim++) {
		int n = p->me->size[dim];

		if (n == 1)
			continue;
		mesh_group(p->me, a, (enum mesh_dim)dim, p->ga);
		mesh_group(p->me, b, (enum mesh_dim)dim, p->gb);
		if (!memcmp(p->ga, p->gb, (size_t)n * sizeof *p->ga))
			continue; /* the same group: the dimension folded */
		if (memcmp(shape(p, a, dim, p->ga), shape(p, b, dim, p->gb), 3 * sizeof(int)))
			return 0;
		if (dim != MESH_PP)
			continue;
		for (int j = 0; j < n; j++)
			if (topo_link_class(p->t, a, p->ga[j]) !=
			    topo_link_class(p->t, b, p->gb[j]))
				return 0;
	}
	return 1;
}

/* The shape of the n-member group devs (what fold.h's symmetry compares). */
static void group_shape(struct plan *p, const int *devs, int n, int *sh)
{
	sh[0] = (int)topo_group_link_class(p->t, devs, n);
	sh[1] = topo_group_nodes(p->t, devs, n, &sh[2]);
}

/* Expert parallelism over dp x cp: whether device x's expert group (ep consecutive ranks
 * of its dp x cp group) and expert-data-parallel group (every ep-th) have the shapes of
 * those of its representative r (run/device.c's expert_groups). */
static int experts_alike(struct plan *p, int ep, int x, int r)
{
	int cp = p->me->size[MESH_CP], n = p->me->size[MESH_DP] * cp, edp = n / ep, sh[2][2][3];

	for (int k = 0; k < 2; k++) {
		int d = k ? r : x;
		int q = mesh_coord(p->me, d, MESH_DP) * cp + mesh_coord(p->me, d, MESH_CP);

		mesh_group2(p->me, d, MESH_CP, MESH_DP, p->ga);
		for (int j = 0; j < edp; j++)
			p->gb[j] = p->ga[j * ep + q % ep];
		group_shape(p, p->ga + q / ep * ep, ep, sh[k][0]);
		group_shape(p, p->gb, edp, sh[k][1]);
	}
	return !memcmp(sh[0], sh[1], sizeof sh[0]);
}

/* The plan folding dp (replicas onto replica 0) and/or tp (ranks >= 2 onto rank 1) into
 * rep; the devices that run, or 0 if the hardware breaks the symmetry. */
static int try_plan(struct plan *p, int fold_dp, int fold_tp, int *rep)
{
	int nrun = 0, ok = 1;

	for (int x = 0; x < p->me->world && ok; x++) {
		int c[MESH_NDIM];

		for (int dim = 0; dim < MESH_NDIM; dim++)
			c[dim] = mesh_coord(p->me, x, (enum mesh_dim)dim);
		if (fold_dp)
			c[MESH_DP] = 0;
		if (fold_tp && c[MESH_TP] > 1)
			c[MESH_TP] = 1;
		rep[x] = mesh_rank(p->me, c);
		nrun += rep[x] == x;
		ok = rep[x] == x ||
		     (alike(p, x, rep[x]) && (!p->ep || experts_alike(p, p->ep, x, rep[x])));
	}
	return ok ? nrun : 0;
}

/* Whether a dry-run of cfg routes as many rows to every expert (moe_uniform_rows: M k a
 * multiple of E, for the micro-batch, and for each sub-batch under Oases's overlap), so
 * that the ranks of an expert-parallel group do the same work. */
static int experts_even(const struct run_cfg *cfg)
{
	const struct gpt_config *m = &cfg->model;
	int B = cfg->tp_overlap ? cfg->mbs / PAR_NSUB : cfg->mbs;
	long long M = (long long)B * m->seq_len / cfg->mesh.size[MESH_CP];

	return M * m->moe_top_k % m->num_experts == 0;
}

static int best_plan(struct plan *p, int dp, int tp, int *rep)
{
	int nrun, world = p->me->world;

	/* Both folds, else the one that holds and folds more, else none. */
	if (dp && tp && (nrun = try_plan(p, 1, 1, rep)))
		return nrun;
	if (dp || tp) {
		int *alt = emu_xmalloc((size_t)world * sizeof *alt);
		int a = dp ? try_plan(p, 1, 0, rep) : 0, b = tp ? try_plan(p, 0, 1, alt) : 0;

		if (b && (!a || b < a))
			memcpy(rep, alt, (size_t)world * sizeof *rep);
		free(alt);
		if (a || b)
			return b && (!a || b < a) ? b : a;
	}
	for (int x = 0; x < world; x++)
		rep[x] = x;
	return world;
}

int run_fold_plan(const struct run_cfg *cfg, const struct topo *t, int *rep)
{
	const struct mesh *me = &cfg->mesh;
	struct plan p = {me, t, NULL, NULL, {NULL}, 0};
	enum run_ep_mode mode = run_ep_mode(cfg);
	int big = 0, nrun, fold_dp;

	big = me->size[MESH_DP] * me->size[MESH_CP]; /* (the experts' dp x cp groups) */
	for (int dim = 0; dim < MESH_NDIM; dim++) {
		big = me->size[dim] > big ? me->size[dim] : big;
		p.shape[dim] = emu_xmalloc(3 * (size_t)me->world * sizeof *p.shape[dim]);
		memset(p.shape[dim], 0xff, 3 * (size_t)me->world * sizeof *p.shape[dim]);
	}
	p.ga = emu_xmalloc((size_t)big * sizeof *p.ga);
	p.gb = emu_xmalloc((size_t)big * sizeof *p.gb);
	/* expert parallelism over dp folds its ranks where each does the same work (above):
	 * without cp (whose ranks would share expert groups with other cp ranks' replicas)
	 * and with every expert as many rows; over tp x cp x dp (its rows) it does not */
	if (mode == RUN_EP_DP)
		p.ep = cfg->ep;
	fold_dp = me->size[MESH_DP] > 1 &&
		  (mode == RUN_EP_NONE || mode == RUN_EP_TP ||
		   (mode == RUN_EP_DP && me->size[MESH_CP] == 1 && experts_even(cfg)));
	/* mixed degrees give tp ranks of different parts different owners, and
	 * --tp-comm-overlap's rings send to other tp ranks by rank (par/tpo.h): not folded */
	nrun = best_plan(&p, fold_dp,
			 me->size[MESH_TP] > 2 && !cfg->tpf_layers && mode != RUN_EP_ROWS &&
				 !cfg->tp_comm_overlap,
			 rep);
	for (int dim = 0; dim < MESH_NDIM; dim++)
		free(p.shape[dim]);
	free(p.ga);
	free(p.gb);
	return nrun;
}
