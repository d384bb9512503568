/* run: training steps on the emulated cluster, and on one device as the reference, with
 * what verify compares (docs/formulas.md, Verification): the loss of every step, every gradient of
 * the first step, every parameter after the last. Used by pemu train, run and verify. */
#ifndef PEMU_RUN_H
#define PEMU_RUN_H

#include <stdint.h>

#include "data.h"
#include "gpt.h"
#include "run/cfg.h"
#include "run/mesh.h"
#include "pipe/schedule.h"

#define RUN_GSTEPS_MAX (1u << 25)

/* The name of the error a run fails with when its loss is no longer finite
 * (emu_cluster_err_kind; cfg.h, stop_diverged) */
#define RUN_DIVERGED "training diverged"

/* What a run gives back. The arrays are allocated by run_alloc and freed by run_free. */
struct run_out {
	int steps, np, accum; /* steps, tensors, micro-batches a step */
	float *loss;          /* [steps] the global batch's mean loss */
	float *loss_part;     /* [pp * dp * steps] each stage's and replica's share */
	int *dev_steps;       /* [world] the steps each device finished, its loss share written */
	int steps_done;       /* the steps every device run finished (of a failed run, those before
			       * the failure; a folded dry-run's simulated devices) */
	int64_t *step_ns;     /* [steps] virtual step time (device 0) */
	int64_t *compute_ns;  /* [steps] of it, compute (device 0) */
	int64_t *exposed_ns;  /* [steps] of it, the compute stream waiting for communication
			       * in flight (device 0; coll_exposed_ns) */
	double flops_step;    /* FLOPs charged by device 0 in the last step */
	int devices_run;      /* devices simulated: fewer than the mesh's when dry-run folds */
	int snapshot;         /* fill gsteps (grad0) and params */
	/* [np] full tensors: the gradients of the first gsteps_n steps, step after step
	 * (as many as fit in RUN_GSTEPS_MAX floats, at least 1); grad0[i] is gsteps[i]: the
	 * first step's */
	float **gsteps;
	int gsteps_n;
	float **grad0;  /* [np] full tensors: the first step's gradients */
	float **params; /* [np] full tensors: the weights after the last step */
	/* MoE presets with a snapshot: every routing decision of the run, route_mb of
	 * them per micro-batch (layer, token, choice; non-MoE layers left 0), micro-batches
	 * in global order. A decision is the expert picked, or -1 - it when the token was
	 * dropped at the capacity limit. */
	int *routes;
	size_t route_mb;
	/* MoE presets in execute mode: per slice (cp x tp: the devices that route tokens of
	 * their own), micro-batch of a step, MoE layer and expert, the choices kept and
	 * dropped over the run ([cp tp][gbs / mbs][L][2 E]; run_moe_tokens sums them) */
	uint64_t *moe_hist;
	/* pp > 1: the schedule run, and from the last step, per stage (the devices of tp
	 * and dp rank 0): its bubble (idle time between its first and last compute action)
	 * and each action's start and end (sched_exec) */
	struct sched sched;
	int64_t *bubble_ns; /* [pp] */
	long long **span;   /* [pp] */
};

void run_alloc(struct run_out *o, const struct run_cfg *cfg, int snapshot);
void run_free(struct run_out *o);

/* Where a device's routing decisions go in the sequence (run_record_routes): it holds T
 * rows of each sequence, pos[i] the position of row i (pos NULL: row i is position i),
 * and routes n of them a (sub-)batch from row row0 (of B T); its slice of the histogram
 * (cp rank x tp + tp rank: each device that routes tokens of its own, its own). */
struct run_rows {
	const int *pos;
	int T, row0, n, slice;
};

/* For run/'s files: keeps micro-batch mb's routing decisions (in global order) from the
 * activations la[0 .. l1 - l0) of its layers l0 .. l1 - 1, those of its sub-batch sub of
 * nsub (1 if it is not cut) and of the rows rows says; sums each step's loss from its
 * stages' and replicas' shares. */
void run_record_routes(struct run_out *o, const struct run_cfg *cfg, uint64_t mb, int sub, int nsub,
		       const struct run_rows *rows, const struct gpt_layer_acts *la, int l0,
		       int l1);
void run_sum_losses(const struct run_cfg *cfg, struct run_out *o);

/* The choices of layer l that expert e kept (and dropped) over the run, every
 * micro-batch's; 0 without a histogram (dry-run, a dense model). */
/* The histogram's slices (run_out.moe_hist). */
size_t run_moe_slices(const struct run_cfg *cfg);
uint64_t run_moe_tokens(const struct run_out *o, const struct run_cfg *cfg, int l, int e,
			uint64_t *dropped);

/* run_parallel runs cfg on c, whose device count is the mesh's (in dry-run, folded as
 * run/fold.h plans unless cfg->fold is 0); run_reference runs the
 * serial model (models/gpt.c) on one device of c with the same seed, data and batches.
 * Both fill o; 0 or the run's enum emu_err. */
int run_parallel(struct emu_cluster *c, const struct run_cfg *cfg, struct run_out *o);
int run_reference(struct emu_cluster *c, const struct run_cfg *cfg, struct run_out *o);

/* The host memory an execute run of cfg on a cluster like ecfg would hold, by a dry-run
 * of the same code (run_parallel if parallel, and run_reference if reference; its
 * blocks count the fp32 data they would hold): the sum over the devices, and the largest
 * device's in *largest. If the dry-run fails, so would the execute run, after holding
 * what the dry-run had held by then (what this returns): the failure's first line goes
 * into why (n bytes; "" if none failed). */
uint64_t run_host_need(const struct run_cfg *cfg, const struct emu_config *ecfg, int parallel,
		       int reference, uint64_t *largest, char *why, size_t n);
/* The host memory available now (Linux's MemAvailable), or 0 if unknown. */
uint64_t run_host_available(void);

/* verify's comparison of a run of cfg with its reference: per-step loss, first-step
 * gradients, final parameters, each by the norm-wise relative error max|a - b| / max|b|
 * per tensor.
 *
 * One exception, like verify's routing flips: a parameter that the gradient differences
 * of the run (every step's, measured) could have moved by half the parameter tolerance
 * through Adam's update, whose division by sqrt(v) enlarges the difference of a gradient
 * near zero, is moved by rounding, not by the strategy (docs/formulas.md, Verification).
 * The key bias is such a parameter: adding the same q.b to every score of a query leaves
 * the softmax unchanged, so its gradient is zero in exact arithmetic. Those entries are
 * left out of the parameter comparison, counted in noise_params, and still checked as
 * gradients. */
struct verify_result {
	double loss_err, grad_err, param_err; /* the worst relative error of each kind */
	double loss_abs, grad_abs, param_abs; /* the worst absolute error max |a - b| */
	int loss_step, grad_tensor, param_tensor;
	double loss_tol, grad_tol, param_tol;
	/* every later step's gradients kept (run_out.gsteps), at a looser tolerance: Adam's
	 * updates have moved the two runs' parameters apart by rounding, but a strategy error
	 * of a later step moves them by their own size */
	double later_err, later_abs, later_tol;
	int later_step, later_tensor;
	size_t noise_params;  /* entries left out: moved by rounding */
	size_t param_entries; /* of these in all (noise_params of them: none compared) */
	/* routing decisions that differ from the reference's (docs/formulas.md, Verification: a
	 * flip is rounding amplified by a discrete choice, not a strategy error), of routes; the
	 * first one's step, layer and token */
	size_t route_flips, routes;
	int flip_step, flip_layer, flip_token;
	int passed;
};
void verify_compare(const struct run_out *ref, const struct run_out *par, const struct run_cfg *cfg,
		    struct verify_result *v);

#endif
