/* run/oases_plan: Oases's choice of tensor-parallel degrees (Li et al. 2023, arXiv
 * 2305.16121, section 4; REFERENCES' planner cost). Every block of the model (a layer's
 * attention, then its MLP, L layers: 2 L blocks) gets a degree t from the powers of two up
 * to the run's tp, its data-parallel size N / t (N = dp tp GPUs), so that at degree t a
 * block works on t / tp of each micro-batch (par/tp.h's parts). Per micro-batch, under the
 * overlap and Oases's recomputation, with per sub-batch costs c (forward compute), m (its
 * collective), b (backward compute), r (recompute), mb (backward collective):
 *
 *   forward    sum over blocks i of max(c_i, m_i) + max(c_{i+1}, m_i)   (c after the last: 0)
 *   backward   sum over blocks of 2 max(b_i + r_i, mb_i)
 *   edges      where consecutive blocks' degrees differ (the embeddings and the output
 *              layer at tp): an all-gather of a part's rows a sub-batch, forward where
 *              the degree grows, backward where it falls
 * and once a step each block's gradient all-reduce over its data-parallel group (not
 * overlapped: an upper bound). Memory per device, each block's parameters, gradients and
 * optimizer state at its degree (the optimizer's sharded over dp with ZeRO-1) and the
 * activation Oases's recomputation keeps, must stay under 0.95 of the cap.
 *
 * The costs are measured by dry-runs: each degree's layer on t devices of the cluster,
 * piece by piece (compute from the device's compute clock, collectives from its
 * statistics), and the collectives of the edges and of the data-parallel reduction on
 * the cluster's real groups. The chain is solved exactly by dynamic programming over
 * (block, degree, memory in 1/4096ths of the cap, rounded up), then rounded as the paper
 * does to two degrees and one cut (the first K layers at a smaller T, the rest at tp: the
 * run's --tp-first K:T), and the rounded plan is checked by a dry-run of the real
 * configuration; if one degree throughout runs faster there (the model is not the
 * emulator), that is the plan. */
#ifndef PEMU_RUN_OASES_PLAN_H
#define PEMU_RUN_OASES_PLAN_H

#include "cluster.h"
#include "run/cfg.h"

#define OASES_MAX_DEG   8
#define OASES_MEM_UNITS 4096

/* One block's costs at one degree, in ns (per sub-batch; dp once a step), and bytes. */
struct oases_block {
	double c, m, b, r, mb;
	double dp;
	double mem;
};

/* What the chain is solved on. */
struct oases_costs {
	int layers;                                /* L: blocks 2 L */
	int ndeg, deg[OASES_MAX_DEG];              /* the degrees, increasing; the last tp */
	struct oases_block blk[2][OASES_MAX_DEG];  /* [attention, MLP][degree] */
	double edge[OASES_MAX_DEG][OASES_MAX_DEG]; /* ns a sub-batch between two degrees */
	int micro;                                 /* micro-batches a step per replica */
	double mem_cap;                            /* 0.95 of the device's bytes */
};

/* The step's cost in ns (and its memory into *mem) of degrees d[2 L] (indices into deg). */
double oases_cost(const struct oases_costs *c, const int *d, double *mem);
/* A block's memory in units of OASES_MEM_UNITS of the cap, rounded up. */
int oases_mem_units(const struct oases_costs *c, double bytes);
/* The cheapest d[2 L] whose memory units fit in OASES_MEM_UNITS: 0 and its cost, or -1
 * if none fits. */
int oases_solve(const struct oases_costs *c, int *d, double *cost);
/* The cheapest plan of the rounded family (the first K layers, 0 <= K <= L, at degree
 * deg[*T], the rest at tp) that fits: 0, or -1 if none fits. */
int oases_round(const struct oases_costs *c, int *K, int *T, double *cost);

/* The search for cfg (pp 1) on the cluster ecfg describes: measures the costs into c,
 * solves and rounds them. 0, or a negative enum emu_err with why in err. */
struct oases_result {
	struct oases_costs costs;
	int d[2 * 1024];     /* the chain's optimum (degree indices), 2 L of them */
	double best_ns;      /* its cost a step */
	int rK, rT;          /* the rounded plan: --tp-first rK:rT (rK = 0: uniform tp) */
	int K, T;            /* the plan: the rounded one, or uniform tp (fell_back) */
	double rounded_ns;   /* its cost a step by the model */
	double megatron_ns;  /* the dry-run step of uniform tp, Megatron's order, full
			      * recomputation (the paper's baseline) */
	double uniform_ns;   /* the dry-run step of uniform tp under Oases */
	double checked_ns;   /* the dry-run step of the rounded plan */
	double checked_peak; /* and its peak memory of device 0, bytes */
	int fell_back;       /* the rounded plan ran slower than one degree
			      * throughout, which is the plan then (K = 0) */
};
int oases_plan(const struct emu_config *ecfg, const struct run_cfg *cfg, struct oases_result *res,
	       char *err, size_t n);

#endif
