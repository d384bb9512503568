/* cfg: one run's configuration (model, batch, optimizer, mesh, strategies, schedule), its
 * defaults, the values derived from other fields, and the ONE checker that the CLI, the
 * benches, the tests and the planner all call. It reads no argv and prints nothing.
 *
 * Two ways to fill a run_cfg:
 *   - as the CLI does: run_cfg_init (every default; a few fields marked "unset"), then the
 *     user's values, then run_cfg_finish (derives the unset fields and what depends on
 *     other fields, then calls run_check);
 *   - by hand, as tests and benches do: zero it, set every field the run reads, and call
 *     run_check alone. A zeroed field asks for nothing: no padding, no schedule choice.
 * The caller owns the struct; nothing here allocates. */
#ifndef PEMU_RUN_CFG_H
#define PEMU_RUN_CFG_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "gpt.h"
#include "presets.h"
#include "run/mesh.h"
#include "par/model.h"
#include "pipe/schedule.h"

struct ckpt;

struct run_cfg {
	const struct model_preset *preset; /* where model came from (its micro-batch is mbs's
					    * default), or NULL for a model set by hand */
	struct gpt_config model;
	int vocab_div;       /* pad the vocabulary to a multiple of vocab_div x tp (Megatron's
			      * --make-vocab-size-divisible-by); applied by run_cfg_finish */
	int vocab_orig;      /* run_cfg_finish: the vocabulary before that padding */
	int mbs, gbs, steps; /* micro-batch, global batch, optimizer steps */
	uint64_t seed;
	enum prec prec;
	int prec_set; /* prec was chosen; else run_cfg_finish takes bf16 in dry-run, else fp32 */
	struct optim_cfg opt;
	struct mesh mesh;                 /* tp, cp, dp and pp (ep only 1 in this build) */
	enum par_cp_comm cp_comm;         /* context parallelism's attention (par/cp.h) */
	int cp_contiguous;                /* --cp-layout contiguous: the unbalanced ring */
	int ep;                           /* the expert-parallel degree: experts over ep of the
					   * dp x cp ranks, or over the tp group (run_ep_over_tp;
					   * not a factor of the mesh) */
	enum par_ep_dispatch ep_dispatch; /* expert parallelism's token dispatcher */
	int etp;                          /* --expert-tensor-parallel-size as given, 0 if not: tp
					   * without ep; with it 1 (each expert whole), or tp (each
					   * cut as the dense MLP, spread over dp x cp) */
	int zero;                         /* ZeRO stage: 0 to 3 */
	int sp;                           /* sequence parallelism (with tp > 1) */
	enum sched_kind schedule;         /* the pipeline schedule (pp > 1) */
	int schedule_set;                 /* schedule was chosen (with pp 1 that is refused); else
					   * run_cfg_finish takes 1f1b, or interleaved with vpp */
	int vpp;                          /* model chunks a stage (interleaved), else 1 */
	int p2p_sync;   /* --p2p-sync: the pipeline's sends wait for their receivers and their
			 * transfers, batched as Megatron-LM's 1F1B runs them (sched_exec) */
	int pp_scatter; /* --scatter-gather-tensors-in-pipeline: each tp rank sends its 1/t
			 * of a pipeline message, all-gathered after (pipe_stage's scatter) */
	int vpp_layers; /* layers a chunk (Megatron's num-layers-per-virtual-pipeline-
			 * stage): run_cfg_finish derives vpp from it; 0: not given */
	enum par_recompute recompute; /* activation recomputation */
	enum par_overlap tp_overlap;  /* the tensor-parallel collectives' order (par/overlap.h) */
	int tp_sync_dgrad;            /* --no-async-tensor-model-parallel-allreduce (par_cfg) */
	int tp_comm_overlap;          /* --tp-comm-overlap (par/tpo.h) */
	struct par_tpo_cfg tpo_cfg;   /* --tp-comm-overlap-cfg's methods, if tpo_cfg_set; else
				       * Transformer Engine's defaults */
	int tpo_cfg_set;
	const char *tpo_cfg_path; /* the file they came from (the command line's string) */
	int tpf_layers, tpf;      /* --tp-first K:T: the first K layers cut T ways, 0 if not */
	int flash;                /* memory-efficient attention (no stored scores); cp > 1
				   * needs it, and run_cfg_finish sets it then */
	enum ce_impl ce;          /* the cross-entropy's kernels: Megatron's unfused (the
				   * default), or --cross-entropy-loss-fusion's, native or TE's
				   * (models/ops.h) */
	int ce_impl_set;          /* --cross-entropy-fusion-impl was given */
	int mlp_chunks;           /* the dense MLP run over this many chunks of rows (> 1) */
	uint64_t bucket_bytes;    /* data-parallel gradient buckets: --bucket-size, in
				   * bytes at the weights' width, or 0 */
	uint64_t bucket_params;   /* or --ddp-bucket-size, in parameters, or 0; both 0:
				   * Megatron's policy (par_cfg.buckets) */
	int fp32_grads;           /* --accumulate-allreduce-grads-in-fp32: gradients kept and
				   * reduced in fp32 under bf16, as Megatron-LM's bf16 training
				   * does by default (par_cfg) */
	int nfail;                /* --inject-fault fail:DEV@STEP: device dev dies as */
	struct {                  /* step (from 1) begins */
		int dev, step;
	} fail[16];
	int overlap_grad;         /* ZeRO 0-1: 1 (--overlap-grad-reduce) reduces each
				   * gradient bucket as backward finishes it; 0 (Megatron's
				   * default) after backward; -1 as 0, asked for
				   * (--no-overlap-grad-reduce: refused with ZeRO 2-3) */
	int overlap_param_gather; /* ZeRO 1-2 (--overlap-param-gather): each bucket's
				   * updated weights gathered as the next forward reaches
				   * them, one bucket ahead, as Megatron-LM does */
	const struct data *data;  /* NULL in dry-run */
	int log_every;            /* print a progress line every this many steps; 0: quiet */
	int fold;          /* dry-run: fold symmetric devices (run/fold.h), as run_cfg_init sets */
	int stop_diverged; /* stop when the loss is no longer finite (pemu run, as run_cfg_init
			    * sets); verify runs on, to compare with the reference */
	enum par_bug bug;  /* tests only: a deliberate bug in a strategy (par/model.h) */
	/* checkpoints (run/ckpt.h) */
	int step0;                 /* iterations taken before this run (a loaded checkpoint's):
				    * it takes steps more, numbered from step0 + 1 */
	const char *save;          /* --save DIR, or NULL */
	int save_interval;         /* --save-interval N; 0: only at the end */
	const struct ckpt *resume; /* --load's checkpoint, fitted to this run, or NULL */
};

/* Every default, as pemu's --help states them: the small preset, seed 1234, AdamW's
 * defaults (models/optim.c), a 1 x 1 x 1 mesh, ZeRO 0, no recomputation, one MLP chunk,
 * Megatron's gradient buckets (par/dp.h), vocabulary padded to a multiple of 128 x tp, dry-run
 * folding on. Marked unset, for run_cfg_finish to derive after the user's values: mbs, gbs and
 * steps (0), prec and schedule (prec_set, schedule_set 0), vpp (0), opt.min_lr (-1),
 * opt.decay_steps (0), log_every (-1). data is NULL: the caller points it at the corpus in execute
 * mode. */
void run_cfg_init(struct run_cfg *cfg);

/* Derives, in this order: the padded vocabulary (vocab_orig keeps the given one); mbs
 * (the preset's micro-batch, else 1); gbs (a micro-batch per data-parallel replica, and 2
 * pp of them with a pipeline); the schedule (interleaved when vpp > 1 or vpp_layers is
 * given, else 1f1b); vpp (from vpp_layers when the layers split so, else 2 for an
 * interleaved pipeline, else 1); steps (300, or 3 in dry-run); prec (bf16 in dry-run,
 * else fp32); opt.min_lr (lr / 10); opt.decay_steps (step0 + steps: the last iteration); log_every
 * (about 30 lines); flash with cp > 1 (context parallelism runs the memory-efficient attention).
 * Dry-run is data == NULL; only whether data is NULL is read, so the corpus may be loaded
 * later. Then returns run_check(cfg, ndev, err, n). Call it once: it pads model.vocab. */
int run_cfg_finish(struct run_cfg *cfg, int ndev, char *err, size_t n);

/* The largest count (tokens, batch, vocabulary) pemu keeps in an int: beyond it a product
 * is refused, never wrapped (cfg.c, check.c). */
#define RUN_CFG_MAX_INT 2147483647

/* The ONE checker (check.c): why cfg cannot run on ndev devices, as one line in err (the options
 * named as pemu's command line spells them), and -1; or 0. Checks the model's sizes, the
 * batches, the mesh, the virtual
 * pipeline, the schedule, the vocabulary the byte data needs, the strategies'
 * divisibility, and proves the pipeline schedule (sched_check) before anything runs.
 * Rules are tried in a fixed order; the first broken one is reported. */
int run_check(const struct run_cfg *cfg, int ndev, char *err, size_t n);

/* Whether cfg's data-parallel gradients are reduced while backward runs: ZeRO 2-3 always
 * (each micro-batch's), stages 0-1 with --overlap-grad-reduce (the last micro-batch's
 * backward, on each pipeline stage each block's). */
int run_overlaps_grads(const struct run_cfg *cfg);
/* Bytes a gradient element takes in memory and on the wire under cfg (kctx.gb): 4 in fp32
 * or with fp32_grads, else 2. */
unsigned run_grad_bytes(const struct run_cfg *cfg);

/* Whether an overlap asks ZeRO 0-1 to cut the gradients into buckets
 * (--overlap-grad-reduce, --overlap-param-gather; par/dp.h). */
int run_bucketed(const struct run_cfg *cfg);
/* The most parameters a data-parallel gradient bucket holds in the first chunk of the
 * first pipeline stage (par_dp_bucket_params), 0 for one bucket a chunk or ZeRO-3's. */
uint64_t run_bucket_params(const struct run_cfg *cfg);

/* Where cfg's experts go (par/ep.h), Megatron's ETP x EP x EDP grid on the same ranks:
 *   NONE  no expert parallelism (the experts cut over tp as the dense MLP)
 *   TP    whole over the tensor-parallel group (ep = tp > 1, expert tensor-parallel size
 *         1, the default with tp > 1): the tokens the group's
 *   DP    over ep of the dp x cp ranks with the same tp rank: whole (tp 1), or each cut
 *         over tp (--expert-tensor-parallel-size tp)
 *   ROWS  whole over ep consecutive ranks of tp x cp x dp (tp > 1, ep not tp, expert
 *         tensor-parallel size 1), each rank routing its own sequence-parallel rows */
enum run_ep_mode { RUN_EP_NONE, RUN_EP_TP, RUN_EP_DP, RUN_EP_ROWS };
enum run_ep_mode run_ep_mode(const struct run_cfg *cfg);

/* Builds cfg's pipeline schedule into sc (pp > 1; free it with sched_free). */
void run_cfg_schedule(const struct run_cfg *cfg, struct sched *sc);

#endif
