/* check: the one checker of a run's configuration (run_check); see cfg.h. */
#include "run/cfg.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "par/tp.h"

/* Devices pemu runs at most; a mesh larger than this is refused before any is made. */
#define RUN_CFG_MAX_DEVICES 65536

/* The rules about the mesh and the virtual pipeline, before the devices are counted. */
static int check_mesh(const struct run_cfg *cfg, char *err, size_t n)
{
	const int *size = cfg->mesh.size;
	int dp = size[MESH_DP], tp = size[MESH_TP], pp = size[MESH_PP];
	int cp = size[MESH_CP], ep = size[MESH_EP], L = cfg->model.num_layers;

	if (ep > 1) { /* experts fold onto the dense ranks: run_cfg.ep, not a mesh factor */
		snprintf(err, n,
			 "the mesh's ep is %d: experts fold onto the dense mesh's ranks, so the "
			 "mesh has ep 1 and run_cfg.ep the expert-parallel size",
			 ep);
		return -1;
	}
	if ((long long)dp * tp * pp * cp > RUN_CFG_MAX_DEVICES) {
		snprintf(err, n,
			 "--dp %d x --tp %d x --pp %d x --cp %d is more devices than pemu runs", dp,
			 tp, pp, cp);
		return -1;
	}
	if (pp == 1 && (cfg->vpp > 1 || cfg->vpp_layers)) {
		snprintf(err, n, "--vpp: virtual pipeline stages need --pp > 1");
		return -1;
	}
	if (cfg->vpp_layers && L % ((long long)pp * cfg->vpp_layers)) {
		snprintf(err, n,
			 "--num-layers-per-virtual-pipeline-stage %d: pp %d x %d layers a chunk "
			 "does not divide the %d layers",
			 cfg->vpp_layers, pp, cfg->vpp_layers, L);
		return -1;
	}
	if (cfg->vpp > 1 && cfg->schedule != SCHED_INTERLEAVED) {
		snprintf(err, n, "--vpp %d: virtual stages need --schedule interleaved", cfg->vpp);
		return -1;
	}
	if (pp == 1 && ((cfg->schedule_set && cfg->schedule != SCHED_1F1B) || cfg->vpp > 1)) {
		snprintf(err, n, "--schedule %s: a pipeline schedule needs --pp > 1",
			 sched_name(cfg->schedule));
		return -1;
	}
	if (cfg->p2p_sync &&
	    (pp == 1 || (cfg->schedule != SCHED_1F1B && cfg->schedule != SCHED_INTERLEAVED) ||
	     (cfg->schedule == SCHED_INTERLEAVED && pp == 2) || cfg->tp_overlap)) {
		snprintf(err, n,
			 "--p2p-sync: %s (Megatron-LM's synchronous sends and receives of its "
			 "1F1B and interleaved schedules)",
			 pp == 1 ? "needs a pipeline, --pp > 1"
			 : cfg->schedule != SCHED_1F1B && cfg->schedule != SCHED_INTERLEAVED
				 ? "needs --schedule 1f1b or interleaved, where pemu runs them as "
				   "Megatron-LM batches them"
			 : cfg->tp_overlap
				 ? "not with --tp-overlap oases in this build (two sub-batches' "
				   "sends to one peer, each waiting for its receiver, would block "
				   "each other's stream)"
				 : "the interleaved schedule needs --pp > 2 (as Megatron-LM "
				   "refuses it: with 2 stages a batch would hold two sends and two "
				   "receives between the same two ranks)");
		return -1;
	}
	if (cfg->pp_scatter && (pp == 1 || cfg->mesh.size[MESH_TP] == 1 || cfg->sp ||
				cfg->tpf_layers || cfg->schedule == SCHED_HELIX)) {
		snprintf(err, n,
			 "--scatter-gather-tensors-in-pipeline: %s (Megatron-LM's of 2021: each "
			 "tensor-parallel rank sends its part of the stage's output, the same on "
			 "every rank)",
			 pp == 1                        ? "needs a pipeline, --pp > 1"
			 : cfg->mesh.size[MESH_TP] == 1 ? "needs --tp > 1"
			 : cfg->sp                      ? "with --sequence-parallel each rank's "
							  "output is its own rows already"
			 : cfg->tpf_layers              ? "not with --tp-first in this build"
					   : "not with --schedule helix in this build");
		return -1;
	}
	return 0;
}

/* The rules of the pipeline (pp > 1): its ZeRO stage, the schedule's own constraints, and
 * the schedule proven valid (dependencies, no deadlock) before it runs. */
/* The schedule proofs made lately, kept: a proof depends on the schedule's shape alone
 * (kind, stages, micro-batches, chunks, layers, and HelixPipe's attention cost), which a
 * planner's search repeats thousands of times; building and checking the lists is most
 * of the checker's time. Only proofs that held are kept: a refusal is built afresh, so
 * its line is the same whoever asks. */
#define PROOFS 64
static struct proof {
	int used, kind, p, m, v, L, seq, hidden;
} proofs[PROOFS];
static int proof_next;
static pthread_mutex_t proof_lock = PTHREAD_MUTEX_INITIALIZER;

static struct proof proof_key(const struct run_cfg *cfg)
{
	struct proof k = {1,
			  (int)cfg->schedule,
			  cfg->mesh.size[MESH_PP],
			  cfg->gbs / cfg->mbs / cfg->mesh.size[MESH_DP],
			  cfg->vpp,
			  cfg->model.num_layers,
			  cfg->schedule == SCHED_HELIX ? cfg->model.seq_len : 0,
			  cfg->schedule == SCHED_HELIX ? cfg->model.hidden : 0};

	return k;
}

static int proof_same(const struct proof *a, const struct proof *b)
{
	return a->used && a->kind == b->kind && a->p == b->p && a->m == b->m && a->v == b->v &&
	       a->L == b->L && a->seq == b->seq && a->hidden == b->hidden;
}

/* Whether cfg's schedule was proved lately. */
static int proof_recall(const struct run_cfg *cfg)
{
	struct proof k = proof_key(cfg);
	int found = 0;

	pthread_mutex_lock(&proof_lock);
	for (int i = 0; i < PROOFS && !found; i++)
		found = proof_same(&proofs[i], &k);
	pthread_mutex_unlock(&proof_lock);
	return found;
}

static void proof_keep(const struct run_cfg *cfg)
{
	struct proof k = proof_key(cfg);

	pthread_mutex_lock(&proof_lock);
	proofs[proof_next] = k;
	proof_next = (proof_next + 1) % PROOFS;
	pthread_mutex_unlock(&proof_lock);
}

static int check_pipeline(const struct run_cfg *cfg, char *err, size_t n)
{
	int pp = cfg->mesh.size[MESH_PP], dp = cfg->mesh.size[MESH_DP];
	int accum = cfg->gbs / cfg->mbs, rc;
	struct sched sc;

	if (cfg->zero > 1) {
		snprintf(err, n,
			 "--zero-stage %d with --pp %d: pipelines run with ZeRO stage 0 or 1 in "
			 "this build (stages 2 and 3 reduce every micro-batch)",
			 cfg->zero, pp);
		return -1;
	}
	if (sched_constraints(cfg->schedule, pp, accum / dp, cfg->vpp, cfg->model.num_layers, err,
			      n))
		return -1;
	if (cfg->schedule == SCHED_HELIX && cfg->recompute != PAR_RECOMPUTE_NONE &&
	    cfg->recompute != PAR_RECOMPUTE_FULL) {
		snprintf(err, n,
			 "--recompute %s with --schedule helix: HelixPipe recomputes without "
			 "attention, which is --recompute full (or none)",
			 cfg->recompute == PAR_RECOMPUTE_SELECTIVE ? "selective" : "oases");
		return -1;
	}
	if (cfg->schedule == SCHED_HELIX && cfg->tp_overlap) {
		snprintf(err, n,
			 "--tp-overlap oases with --schedule helix: HelixPipe runs a layer's "
			 "attention and the rest on different stages, which this build does not "
			 "interleave by sub-batch");
		return -1;
	}
	if (proof_recall(cfg))
		return 0;
	run_cfg_schedule(cfg, &sc);
	rc = sched_check(&sc, err, n) ? -1 : 0;
	sched_free(&sc);
	if (!rc)
		proof_keep(cfg);
	return rc;
}

/* The rules of context parallelism (par/cp.h): each sequence in 2 cp chunks, and what
 * this build combines it with. */
static int check_cp(const struct run_cfg *cfg, char *err, size_t n)
{
	const struct gpt_config *m = &cfg->model;
	int cp = cfg->mesh.size[MESH_CP], tp = cfg->mesh.size[MESH_TP];
	static const char *const kind[] = {"p2p", "all_gather", "a2a"};

	if (m->seq_len % (cfg->cp_contiguous ? cp : 2 * cp)) {
		if (cfg->cp_contiguous)
			snprintf(
				err, n,
				"--cp %d --cp-layout contiguous cuts each sequence into %d chunks: "
				"--seq-length %d does not split so",
				cp, cp, m->seq_len);
		else
			snprintf(err, n,
				 "--cp %d cuts each sequence into 2 x %d chunks (Megatron's load "
				 "balance of causal attention): --seq-length %d does not split so",
				 cp, cp, m->seq_len);
		return -1;
	}
	if (cfg->cp_comm == PAR_CP_A2A && m->heads / tp % cp) {
		snprintf(err, n,
			 "--cp-comm-type a2a (Ulysses) gives each of the %d context-parallel ranks "
			 "a share of the %d heads a tensor-parallel rank holds: %d does not divide "
			 "%d",
			 cp, m->heads / tp, cp, m->heads / tp);
		return -1;
	}
	if (cfg->cp_contiguous && cfg->cp_comm != PAR_CP_P2P) {
		snprintf(err, n,
			 "--cp-layout contiguous is the ring's (--cp-comm-type p2p): %s puts the "
			 "keys in position order whatever the layout",
			 kind[cfg->cp_comm]);
		return -1;
	}
	if (!cfg->flash) {
		snprintf(err, n,
			 "--cp %d runs the memory-efficient attention (--use-flash-attn), as "
			 "Megatron-Core's context parallelism runs TransformerEngine's fused one",
			 cp);
		return -1;
	}
	if (cfg->schedule == SCHED_HELIX || cfg->tp_overlap || cfg->tpf_layers ||
	    cfg->recompute == PAR_RECOMPUTE_OASES) {
		snprintf(err, n, "--cp %d (%s) with %s: not combined in this build", cp,
			 kind[cfg->cp_comm],
			 cfg->schedule == SCHED_HELIX ? "--schedule helix"
			 : cfg->tp_overlap            ? "--tp-overlap oases"
			 : cfg->tpf_layers            ? "--tp-first"
						      : "--recompute oases");
		return -1;
	}
	return 0;
}

/* The rules of expert parallelism (par/ep.h): experts over ep of the dp x cp ranks,
 * and what this build combines it with. */
static int check_ep(const struct run_cfg *cfg, char *err, size_t n)
{
	const struct gpt_config *m = &cfg->model;
	const int *size = cfg->mesh.size;
	int ep = cfg->ep;

	if (m->num_experts == 0) {
		snprintf(err, n, "--ep %d: the model has no MoE layers (--num-experts)", ep);
		return -1;
	}
	if (m->num_experts % ep) {
		snprintf(err, n, "--ep %d does not divide the %d experts of a MoE layer", ep,
			 m->num_experts);
		return -1;
	}
	if (run_ep_mode(cfg) == RUN_EP_ROWS && !cfg->sp) {
		snprintf(err, n,
			 "--ep %d with --tp %d: whole experts over ep ranks that are not the tp "
			 "group take each rank's own tokens, its sequence-parallel rows: add "
			 "--sequence-parallel (as Megatron-Core's MoE with tp), or give --ep %d "
			 "(the experts over the tp group) or --expert-tensor-parallel-size %d "
			 "(each cut over tp)",
			 ep, size[MESH_TP], size[MESH_TP], size[MESH_TP]);
		return -1;
	}
	if (cfg->schedule == SCHED_HELIX || cfg->tp_overlap || cfg->tpf_layers ||
	    cfg->recompute == PAR_RECOMPUTE_OASES) {
		snprintf(err, n, "--ep %d with %s: not combined in this build", ep,
			 cfg->schedule == SCHED_HELIX ? "--schedule helix"
			 : cfg->tp_overlap            ? "--tp-overlap oases"
			 : cfg->tpf_layers            ? "--tp-first"
						      : "--recompute oases");
		return -1;
	}
	if (run_ep_mode(cfg) == RUN_EP_TP) /* over the tp group: the experts' gradients are the
					    * rest's */
		return 0;
	if (run_ep_mode(cfg) == RUN_EP_ROWS) {
		if (size[MESH_TP] * size[MESH_DP] * size[MESH_CP] % ep) {
			snprintf(
				err, n,
				"--ep %d: whole experts over the tp x cp x dp ranks, and the %d of "
				"--tp %d --cp %d --dp %d do not split into groups of %d",
				ep, size[MESH_TP] * size[MESH_DP] * size[MESH_CP], size[MESH_TP],
				size[MESH_CP], size[MESH_DP], ep);
			return -1;
		}
		return 0;
	}
	if (size[MESH_DP] * size[MESH_CP] % ep) {
		if (size[MESH_CP] == 1)
			snprintf(err, n,
				 "--ep %d: the experts are spread over data-parallel ranks, and "
				 "--dp "
				 "%d does not split into groups of %d",
				 ep, size[MESH_DP], ep);
		else
			snprintf(
				err, n,
				"--ep %d: the experts are spread over the data-parallel x "
				"context-parallel ranks, and the %d x %d of --dp %d --cp %d do not "
				"split into groups of %d",
				ep, size[MESH_DP], size[MESH_CP], size[MESH_DP], size[MESH_CP], ep);
		return -1;
	}
	return 0;
}

/* --tp-comm-overlap (par/tpo.h): Megatron's rule (sequence parallelism), and what this
 * build does not combine it with. */
static int check_tp_comm_overlap(const struct run_cfg *cfg, char *err, size_t n)
{
	if (!cfg->sp) {
		snprintf(err, n,
			 "--tp-comm-overlap needs --sequence-parallel (as Megatron-LM's: "
			 "it overlaps sequence parallelism's all-gathers and reduce-scatters)%s",
			 cfg->mesh.size[MESH_TP] == 1 ? ", which needs --tp > 1" : "");
		return -1;
	}
	if (cfg->tp_overlap || cfg->recompute == PAR_RECOMPUTE_OASES || cfg->tp_sync_dgrad) {
		const char *other = cfg->tp_overlap ? "--tp-overlap oases"
				    : cfg->recompute == PAR_RECOMPUTE_OASES
					    ? "--recompute oases"
					    : "--no-async-tensor-model-parallel-allreduce";

		snprintf(err, n, "--tp-comm-overlap with %s: two orders of the same collectives",
			 other);
		return -1;
	}
	return 0;
}

/* The rules of Oases's overlap (par/overlap.h): two sub-batches of a micro-batch, each
 * cut as a micro-batch would be. */
static int check_overlap(const struct run_cfg *cfg, char *err, size_t n)
{
	int tp = cfg->mesh.size[MESH_TP], tokens = cfg->mbs / PAR_NSUB * cfg->model.seq_len;

	if (tp == 1) {
		snprintf(err, n,
			 "--tp-overlap oases needs --tp > 1 (it hides the tensor-parallel "
			 "collectives behind compute)");
		return -1;
	}
	if (cfg->mbs % PAR_NSUB) {
		snprintf(err, n,
			 "--tp-overlap oases cuts each micro-batch into %d sub-batches along the "
			 "batch: --micro-batch-size %d does not split so",
			 PAR_NSUB, cfg->mbs);
		return -1;
	}
	if (cfg->sp && tokens % tp) {
		snprintf(err, n,
			 "--sequence-parallel with --tp-overlap oases: --tp %d does not divide the "
			 "%d tokens of a sub-batch",
			 tp, tokens);
		return -1;
	}
	if (cfg->mlp_chunks > tokens) {
		snprintf(err, n,
			 "--mlp-chunks %d: more chunks than the %d tokens of a sub-batch "
			 "(--tp-overlap oases)",
			 cfg->mlp_chunks, tokens);
		return -1;
	}
	if (cfg->zero == 3) {
		snprintf(err, n,
			 "--zero-stage 3 with --tp-overlap oases: ZeRO-3 frees a layer's gathered "
			 "weights when the next layer is read, and the two sub-batches are in two "
			 "layers at once");
		return -1;
	}
	return 0;
}

/* The rules of Oases's mixed degrees (--tp-first K:T): the first K layers cut T ways over
 * parts of the (sub-)batch, gathered after them (par/tp.h). */
static int check_tp_first(const struct run_cfg *cfg, char *err, size_t n)
{
	const struct gpt_config *m = &cfg->model;
	int K = cfg->tpf_layers, T = cfg->tpf, tp = cfg->mesh.size[MESH_TP];
	int B = cfg->tp_overlap ? cfg->mbs / PAR_NSUB : cfg->mbs;

	if (K > m->num_layers) {
		snprintf(err, n, "--tp-first %d:%d: the model has %d layers", K, T, m->num_layers);
		return -1;
	}
	if (tp % T) {
		snprintf(err, n, "--tp-first %d:%d: %d does not divide --tp %d", K, T, T, tp);
		return -1;
	}
	if (m->heads % T || m->ffn % T) {
		snprintf(err, n,
			 "--tp-first %d:%d: %d does not divide the %d attention heads and the MLP "
			 "width %d",
			 K, T, T, m->heads, m->ffn);
		return -1;
	}
	if (B % (tp / T)) {
		snprintf(err, n,
			 "--tp-first %d:%d: the first layers cut each %s of %d sequences into "
			 "tp / T = %d parts",
			 K, T, cfg->tp_overlap ? "sub-batch" : "micro-batch", B, tp / T);
		return -1;
	}
	if (cfg->sp && B / (tp / T) * m->seq_len % T) {
		snprintf(err, n,
			 "--tp-first %d:%d with --sequence-parallel: %d does not divide the %d "
			 "tokens of a part",
			 K, T, T, B / (tp / T) * m->seq_len);
		return -1;
	}
	if (cfg->mesh.size[MESH_PP] > 1) {
		snprintf(err, n,
			 "--tp-first with --pp %d: mixed degrees run without a pipeline in this "
			 "build",
			 cfg->mesh.size[MESH_PP]);
		return -1;
	}
	for (int l = 0; l < K; l++)
		if (gpt_layer_is_moe(m, l)) {
			snprintf(
				err, n,
				"--tp-first %d:%d: layer %d is a MoE layer, whose router would see "
				"a part of the batch (its capacity and loss are the whole batch's)",
				K, T, l);
			return -1;
		}
	return 0;
}

int run_check(const struct run_cfg *cfg, int ndev, char *err, size_t n)
{
	const struct mesh *m = &cfg->mesh;
	int dp = m->size[MESH_DP], tp = m->size[MESH_TP], pp = m->size[MESH_PP];
	long long tokens_ll = (long long)cfg->mbs * (cfg->model.seq_len / m->size[MESH_CP]);
	int tokens = tokens_ll > RUN_CFG_MAX_INT ? 0 : (int)tokens_ll;

	if (gpt_config_check(&cfg->model, err, n))
		return -1;
	if (tokens_ll * m->size[MESH_CP] > RUN_CFG_MAX_INT) {
		snprintf(err, n,
			 "--micro-batch-size %d x --seq-length %d is %lld tokens a micro-batch, "
			 "more than pemu takes (%d)",
			 cfg->mbs, cfg->model.seq_len, (long long)cfg->mbs * cfg->model.seq_len,
			 RUN_CFG_MAX_INT);
		return -1;
	}
	if (cfg->gbs % cfg->mbs) {
		snprintf(err, n,
			 "--global-batch-size %d is not a multiple of --micro-batch-size %d",
			 cfg->gbs, cfg->mbs);
		return -1;
	}
	if (check_mesh(cfg, err, n))
		return -1;
	if (!cfg->data && (cfg->save || cfg->resume)) {
		snprintf(err, n, "--%s: a dry-run holds shapes, not weights (drop --dry-run)",
			 cfg->save ? "save" : "load");
		return -1;
	}
	if (cfg->opt.min_lr > cfg->opt.lr) { /* (Megatron asserts min_lr <= max_lr too) */
		snprintf(err, n,
			 "--min-lr %g is above --lr %g: the learning rate decays from --lr down to "
			 "--min-lr",
			 (double)cfg->opt.min_lr, (double)cfg->opt.lr);
		return -1;
	}
	if (cfg->save_interval && !cfg->save) {
		snprintf(err, n, "--save-interval %d: saves to --save DIR, which is not given",
			 cfg->save_interval);
		return -1;
	}
	if (cfg->data && cfg->model.vocab < 256) {
		if (cfg->vocab_orig && cfg->vocab_orig != cfg->model.vocab)
			snprintf(err, n,
				 "--vocab-size %d (padded to %d): the data is bytes, so training "
				 "needs a vocabulary of at least 256",
				 cfg->vocab_orig, cfg->model.vocab);
		else
			snprintf(err, n,
				 "--vocab-size %d: the data is bytes, so training needs a "
				 "vocabulary of at least 256",
				 cfg->model.vocab);
		return -1;
	}
	if (m->world != ndev) {
		snprintf(err, n, "the mesh needs %d devices and the cluster has %d", m->world,
			 ndev);
		return -1;
	}
	if (par_tp_check(&cfg->model, tp, err, n))
		return -1;
	if (m->size[MESH_CP] == 1 && (cfg->cp_comm != PAR_CP_P2P || cfg->cp_contiguous)) {
		snprintf(err, n, "--%s: context parallelism's, which needs --cp > 1",
			 cfg->cp_contiguous ? "cp-layout contiguous" : "cp-comm-type");
		return -1;
	}
	if (cfg->etp && cfg->etp != tp && (cfg->ep <= 1 || cfg->etp != 1)) {
		if (cfg->ep > 1)
			snprintf(err, n,
				 "--expert-tensor-parallel-size %d: with --ep this build holds "
				 "each expert whole (1) or cuts it as the dense MLP over --tp (%d)",
				 cfg->etp, tp);
		else
			snprintf(err, n,
				 "--expert-tensor-parallel-size %d: without --ep the experts are "
				 "cut as the dense MLP, over --tp, so it is %d here",
				 cfg->etp, tp);
		return -1;
	}
	if (cfg->ep <= 1 && cfg->ep_dispatch != PAR_EP_ALLTOALL) {
		snprintf(err, n,
			 "--moe-token-dispatcher-type allgather: expert parallelism's, which needs "
			 "--ep > 1");
		return -1;
	}
	if (m->size[MESH_CP] > 1 && check_cp(cfg, err, n))
		return -1;
	if (cfg->ep > 1 && check_ep(cfg, err, n))
		return -1;
	if (cfg->overlap_grad < 0 && cfg->zero >= 2) {
		snprintf(
			err, n,
			"--no-overlap-grad-reduce with --zero-stage %d: stages 2 and 3 reduce each "
			"micro-batch's gradients as backward makes them; the flag is for stages 0 "
			"and 1",
			cfg->zero);
		return -1;
	}
	if (cfg->overlap_param_gather && (cfg->zero < 1 || cfg->zero > 2)) {
		snprintf(err, n, "--overlap-param-gather with --zero-stage %d: %s", cfg->zero,
			 cfg->zero < 1 ? "without a distributed optimizer (ZeRO 1-2) every rank "
					 "updates all its weights and there is nothing to gather; "
					 "add --use-distributed-optimizer"
				       : "ZeRO-3 gathers each layer's weights before every use "
					 "already");
		return -1;
	}
	if (cfg->mlp_chunks > 1 && pp > 1 &&
	    (cfg->schedule == SCHED_ZBH1 || cfg->schedule == SCHED_ZBH2)) {
		snprintf(err, n,
			 "--mlp-chunks with --schedule %s: the chunked MLP computes its weight "
			 "gradients with its input gradients, which zero-bubble schedules split",
			 sched_name(cfg->schedule));
		return -1;
	}
	if (cfg->mlp_chunks > tokens) {
		snprintf(err, n, "--mlp-chunks %d: more chunks than the %d tokens of a micro-batch",
			 cfg->mlp_chunks, tokens);
		return -1;
	}
	if (cfg->sp && tp == 1) {
		snprintf(err, n,
			 "--sequence-parallel needs --tp > 1 (it splits the tensor-parallel "
			 "group's work)");
		return -1;
	}
	if (cfg->sp && tokens % tp) {
		snprintf(err, n,
			 "--sequence-parallel: --tp %d does not divide the %d tokens of a "
			 "micro-batch%s",
			 tp, tokens, m->size[MESH_CP] > 1 ? " a context-parallel rank holds" : "");
		return -1;
	}
	if (cfg->tp_overlap && check_overlap(cfg, err, n))
		return -1;
	if (cfg->tp_comm_overlap && check_tp_comm_overlap(cfg, err, n))
		return -1;
	if (cfg->ce_impl_set && cfg->ce == CE_UNFUSED) {
		snprintf(err, n,
			 "--cross-entropy-fusion-impl without --cross-entropy-loss-fusion: it "
			 "chooses the fused cross-entropy's kernels, and the unfused one runs");
		return -1;
	}
	if (cfg->tpo_cfg_set && !cfg->tp_comm_overlap) {
		snprintf(err, n,
			 "--tp-comm-overlap-cfg without --tp-comm-overlap: the file sets that "
			 "overlap's methods");
		return -1;
	}
	if (cfg->tpf_layers && check_tp_first(cfg, err, n))
		return -1;
	if (cfg->gbs / cfg->mbs % dp) {
		snprintf(err, n,
			 "--global-batch-size %d is %d micro-batch%s of %d, which --dp %d does not "
			 "divide",
			 cfg->gbs, cfg->gbs / cfg->mbs, cfg->gbs / cfg->mbs == 1 ? "" : "es",
			 cfg->mbs, dp);
		return -1;
	}
	return pp > 1 ? check_pipeline(cfg, err, n) : 0;
}
