/* run/plan: pemu plan's search over parallel layouts (DESIGN §2, the planner).
 *
 * A space is a model and batch (a run_cfg not yet finished: the vocabulary unpadded), a
 * cluster of `gpus` devices, bounds on the degrees, and the dimensions the user fixed.
 * Its points are the layouts: dp x tp x pp x cp = gpus, ep (and etp) for MoE models, the
 * schedule and its chunks, the micro-batch, the ZeRO stage, recomputation and the
 * tensor-parallel overlap, sequence parallelism, flash attention, cp's attention, and
 * under Oases's overlap and recomputation without a pipeline the blocks' degrees chosen
 * by Oases's search (run/oases_plan.h: the first K layers at a smaller T). Each
 * point goes through three sieves, in this order:
 *   1. the rules: run_cfg_finish (the one checker; plan adds no rule of its own);
 *   2. the memory bound (plan_mem_bound): a closed-form lower bound on the largest
 *      device's peak, from the weights, gradients and optimizer state alone;
 *   3. a one-step dry-run of the same code as pemu run: an OOM is "does not fit".
 * The survivors are ranked by step time (then by their place in the enumeration, so the
 * ranking is a pure function of the space). The dry-runs may run in worker processes;
 * each one is deterministic, so the result does not depend on how many. */
#ifndef PEMU_RUN_PLAN_H
#define PEMU_RUN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "run/cfg.h"
#include "run/run.h"

/* The dimensions of the space; a fixed one takes only the base's value. */
enum plan_dim {
	PLAN_TP,
	PLAN_PP,
	PLAN_CP,
	PLAN_EP,
	PLAN_ETP,
	PLAN_SCHEDULE,
	PLAN_VPP,
	PLAN_MBS,
	PLAN_ZERO,
	PLAN_RECOMPUTE,
	PLAN_OVERLAP,
	PLAN_SP,
	PLAN_FLASH,
	PLAN_CP_COMM,
	PLAN_TPF, /* 1: Oases's degrees a block (--tp-first K:T as its search chooses) */
	PLAN_NDIM
};

struct plan_space {
	struct run_cfg base; /* model, batch, precision, seed; the fixed dimensions' values
			      * (mesh degrees in base.mesh, ep, schedule, ...); not finished */
	int gpus;            /* dp x tp x pp x cp */
	unsigned fixed;      /* bit d: dimension d takes base's value only */
	int dp_fixed;        /* the data-parallel size given (0: what the others leave) */
	/* bounds, 0 for the default: tp and ep none (the CLI bounds tp by a node), pp the
	 * layers, cp a rank's 1024 tokens (seq_len / 2048: context parallelism is for long
	 * sequences), the micro-batch 8 */
	int max_tp, max_pp, max_cp, max_ep, max_mbs;
	int both_sp; /* search without sequence parallelism too (by default tp > 1
		      * takes it: it never costs time and saves memory) */
};

/* One layout: the values of the dimensions (enum values for schedule, recompute,
 * overlap and cp_comm; 0/1 for sp and flash; etp 0 for "not given"), dp derived. */
struct plan_point {
	int v[PLAN_NDIM];
	int dp;
	int tpf_layers, tpf; /* under PLAN_TPF, once decided: the K:T Oases's search chose */
};

enum plan_fate {
	PLAN_RULE,  /* refused by the checker */
	PLAN_BOUND, /* its memory lower bound is over the cap */
	PLAN_SAME,  /* PLAN_TPF: Oases's search kept tp throughout, which is the point
		     * without PLAN_TPF (ranked there) */
	PLAN_OOM,   /* its dry-run ran out of memory */
	PLAN_FAIL,  /* its dry-run failed otherwise (reported in why) */
	PLAN_OK
};

/* What a dry-run of a point measured (device 0's times; memory the largest device's). */
struct plan_eval {
	int64_t step_ns, compute_ns, exposed_ns, bubble_ns;
	uint64_t peak;  /* the largest device's peak, bytes */
	uint64_t bound; /* plan_mem_bound's figure */
	double mfu, tokens_s;
	int devices_run;
	int err; /* the dry-run's enum emu_err when fate is PLAN_FAIL or PLAN_OOM */
};

struct plan_entry {
	struct plan_point p;
	int index; /* its place in the enumeration */
	enum plan_fate fate;
	struct plan_eval e;
};

struct plan_result {
	struct plan_entry *all; /* every point, in enumeration order */
	int n;
	int *rank; /* [nok] indices into all of the fitting points, fastest first */
	int nok;
	int *pareto; /* [npareto] of them on the front of step time against peak memory,
		      * fastest first */
	int npareto;
	int by_rule, by_bound, by_same, by_oom, failed;
	double wall_s; /* the search's wall time */
};

/* The points of the space in enumeration order (n of them; free the array). dp is
 * left to what the mesh degrees leave (points where they do not divide gpus are not
 * listed). A space of more than 2 million stops there, n one over (plan_search refuses
 * it). */
struct plan_point *plan_points(const struct plan_space *s, int *n);

/* The run_cfg of point p (finished: run_cfg_finish called, steps 1, quiet); 0, or -1
 * with the checker's line in err. */
int plan_cfg(const struct plan_space *s, const struct plan_point *p, struct run_cfg *cfg, char *err,
	     size_t n);

/* The lower bound on the largest device's peak memory of the finished cfg on gpus
 * devices: every parameter's weights, gradients and Adam state, held as many times as
 * its data-parallel group keeps copies (ZeRO shards over dp x cp), summed and spread
 * evenly over the devices, which no device's peak can be under. Experts' parameters are
 * counted once. */
uint64_t plan_mem_bound(const struct run_cfg *cfg, int gpus);

/* A one-step dry-run of cfg on a cluster like ecfg (ndev gpus; no trace) into e; the
 * fate (PLAN_OK, PLAN_OOM or PLAN_FAIL). */
enum plan_fate plan_dry_run(const struct emu_config *ecfg, const struct run_cfg *cfg,
			    struct plan_eval *e);

/* Progress: called after each point is decided, with points done of n (from the
 * search's own process). */
typedef void (*plan_progress_fn)(int done, int n, void *arg);

/* Searches the space on clusters like ecfg (its ndev must be s->gpus): sieves every
 * point, dry-runs the survivors (in jobs processes when jobs > 1), ranks them and
 * finds the Pareto front, into r (free it with plan_result_free). 0, or EMU_EINVAL with
 * a line in err (an empty space, a cluster that does not match). */
int plan_search(const struct plan_space *s, const struct emu_config *ecfg, int jobs,
		plan_progress_fn progress, void *arg, struct plan_result *r, char *err, size_t n);
void plan_result_free(struct plan_result *r);

/* The layout of finished cfg at a tiny scale, for --validate: the same mesh, schedule,
 * chunks, micro-batch, ZeRO stage, recomputation, overlap, sequence parallelism, flash
 * attention and experts' layout, on a model a few heads wide with as many layers as the
 * pipeline needs, at a sequence and global batch the layout divides; fp32, 3 steps,
 * execute mode (data NULL: the caller points it at the corpus). 0, or -1 with why in
 * err. */
int plan_tiny(const struct run_cfg *cfg, struct run_cfg *tiny, char *err, size_t n);

/* --validate: tiny (plan_tiny's, its data set) in execute mode on a cluster like ecfg
 * and the serial reference on one device, compared as pemu verify compares them, into
 * v (v->passed). 0, or the enum emu_err of the run that failed. */
int plan_validate(const struct emu_config *ecfg, const struct run_cfg *tiny,
		  struct verify_result *v);

#endif
