/* cfg: the defaults and derived values of a run's configuration; its one checker is
 * check.c. See cfg.h. */
#include "run/cfg.h"

#include <stdio.h>
#include <string.h>

#include "par/dp.h"
#include "par/tp.h"
#include "tensor.h"

void run_cfg_init(struct run_cfg *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->preset = model_preset("small");
	cfg->model = cfg->preset->cfg;
	cfg->vocab_div = 128;
	cfg->seed = 1234;
	cfg->prec = PREC_FP32;
	optim_defaults(&cfg->opt);
	cfg->opt.min_lr = -1;     /* unset: lr / 10 */
	cfg->opt.decay_steps = 0; /* unset: every step */
	mesh_init(&cfg->mesh, 1, 1, 1, 1, 1);
	cfg->schedule = SCHED_1F1B;
	cfg->mlp_chunks = 1;
	cfg->log_every = -1; /* unset: about 30 lines */
	cfg->fold = 1;
	cfg->stop_diverged = 1;
}

/* Megatron's padded vocabulary: a multiple of divisible-by x tp, so that every
 * tensor-parallel rank holds as many rows of the embedding. */
static int pad_vocab(struct run_cfg *cfg, char *err, size_t n)
{
	long long unit =
		(long long)(cfg->vocab_div > 0 ? cfg->vocab_div : 1) * cfg->mesh.size[MESH_TP];
	long long v = (cfg->model.vocab + unit - 1) / unit * unit;

	cfg->vocab_orig = cfg->model.vocab;
	if (v > RUN_CFG_MAX_INT) {
		snprintf(err, n,
			 "--make-vocab-size-divisible-by %d x --tp %d pads the vocabulary of %d to "
			 "%lld, more than pemu takes (%d)",
			 cfg->vocab_div, cfg->mesh.size[MESH_TP], cfg->model.vocab, v,
			 RUN_CFG_MAX_INT);
		return -1;
	}
	cfg->model.vocab = (int)v;
	return 0;
}

/* The schedule and vpp, as Megatron reads --virtual-pipeline-model-parallel-size and
 * --num-layers-per-virtual-pipeline-stage: layers a chunk give the chunks, and either
 * asks for the interleaved schedule unless one was chosen. A split that does not work out
 * is left for run_check to report. */
static void derive_pipeline(struct run_cfg *cfg)
{
	int pp = cfg->mesh.size[MESH_PP];
	long long chunk = (long long)pp * cfg->vpp_layers; /* layers a round of the stages */

	if (!cfg->schedule_set)
		cfg->schedule = cfg->vpp > 1 || cfg->vpp_layers ? SCHED_INTERLEAVED : SCHED_1F1B;
	if (cfg->vpp_layers) {
		if (cfg->model.num_layers % chunk == 0)
			cfg->vpp = (int)(cfg->model.num_layers / chunk);
	} else if (!cfg->vpp) {
		cfg->vpp = cfg->schedule == SCHED_INTERLEAVED && pp > 1 ? 2 : 1;
	}
}

int run_cfg_finish(struct run_cfg *cfg, int ndev, char *err, size_t n)
{
	int dp = cfg->mesh.size[MESH_DP], pp = cfg->mesh.size[MESH_PP];

	if (pad_vocab(cfg, err, n))
		return -1;
	if (!cfg->mbs)
		cfg->mbs = cfg->preset ? cfg->preset->micro_batch : 1;
	if (!cfg->gbs) { /* a micro-batch per data-parallel replica; a pipeline gets 2 pp */
		long long g = (long long)cfg->mbs * dp * (pp > 1 ? 2LL * pp : 1);

		if (g > RUN_CFG_MAX_INT) {
			snprintf(err, n,
				 "the default --global-batch-size, micro-batch %d x dp %d%s = "
				 "%lld, is "
				 "more than pemu takes (%d): give one",
				 cfg->mbs, dp, pp > 1 ? " x 2 pp" : "", g, RUN_CFG_MAX_INT);
			return -1;
		}
		cfg->gbs = (int)g;
	}
	derive_pipeline(cfg);
	if (!cfg->steps) /* dry-run steps repeat themselves: a few say it all */
		cfg->steps = cfg->data ? 300 : 3;
	if (!cfg->prec_set)
		cfg->prec = cfg->data ? PREC_FP32 : PREC_BF16;
	if (cfg->opt.min_lr < 0)
		cfg->opt.min_lr = cfg->opt.lr / 10;
	if (!cfg->opt.decay_steps)
		cfg->opt.decay_steps = cfg->step0 + cfg->steps;
	if (cfg->log_every < 0)
		cfg->log_every = cfg->step0 + cfg->steps > 30 ? (cfg->step0 + cfg->steps) / 30
							      : 1; /* (resumed: the same lines) */
	if (cfg->mesh.size[MESH_CP] > 1)
		cfg->flash = 1;
	return run_check(cfg, ndev, err, n);
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
	sc->p2p_sync = cfg->p2p_sync;
}

int run_overlaps_grads(const struct run_cfg *cfg)
{
	return cfg->zero >= 2 || cfg->overlap_grad == 1;
}

unsigned run_grad_bytes(const struct run_cfg *cfg)
{
	return cfg->fp32_grads ? 4 : tensor_elem_bytes(cfg->prec, MEM_GRAD);
}

enum run_ep_mode run_ep_mode(const struct run_cfg *cfg)
{
	int tp = cfg->mesh.size[MESH_TP];

	if (cfg->ep <= 1)
		return RUN_EP_NONE;
	if (tp == 1 || cfg->etp == tp)
		return RUN_EP_DP;
	return cfg->ep == tp ? RUN_EP_TP : RUN_EP_ROWS;
}

int run_bucketed(const struct run_cfg *cfg)
{
	return cfg->overlap_grad == 1 || cfg->overlap_param_gather;
}

uint64_t run_bucket_params(const struct run_cfg *cfg)
{
	return par_dp_bucket_params(cfg->zero, run_bucketed(cfg), cfg->bucket_params,
				    cfg->bucket_bytes,
				    cfg->mesh.size[MESH_DP] * cfg->mesh.size[MESH_CP],
				    tensor_elem_bytes(cfg->prec, MEM_PARAM));
}
